"""Hypotheses and the hash-chained, append-only registry that pre-registers them.

The registry is a :class:`agentmill.core.ledger.Ledger` (one JSONL line per event, each carrying the previous
line's hash, fsynced before ``append`` returns). Events: ``register`` (a hypothesis or a revision pointing to its
parent version, with its UTC ``registered_at`` and the sha256 of its canonical body), ``freeze`` (the body hash
that arms will be judged against), ``rollouts`` (an arm touching some variables produced data) and ``verdict``.

Rules, enforced on write and re-checked by :meth:`HypothesisRegistry.verify_chain` on every open:
- a tampered line (payload edited, line dropped or reordered) breaks the chain: refused with the line that broke;
- a hypothesis may be revised only before any rollout of its own arms: a revision after its data were seen is
  refused (:class:`PostDataEditError`), and a log that contains one anyway is refused on verify;
- arms run only for a frozen hypothesis whose frozen hash is its latest version (:class:`UnfrozenHypothesisError`);
- a hypothesis registered after a rollout touching one of its variables is ``post_hoc`` (allowed, flagged in every
  verdict row: the CoT miner reads incident rollouts before hypotheses exist, which is what that flag records).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from agentmill.core.ledger import Ledger, canonical
from agentmill.methods.forensics.variables import Intervention

CATEGORIES = ("benign", "malign", "unknown")


class RegistryError(ValueError):
    """A registry that does not verify, or an operation its rules forbid; the message names the line."""


class PostDataEditError(RegistryError):
    """A revision of a hypothesis after rollouts of its arms were seen."""


class UnfrozenHypothesisError(RegistryError):
    """Arms requested for a hypothesis that is not frozen at its latest version."""


@dataclass(frozen=True)
class Prediction:
    """Setting ``variable`` to ``value`` moves the concerning rate in ``direction`` (+1 up, −1 down, 0 no change)
    by at least ``min_effect``. ``value == "dose"``: the variable's whole grid, with ``threshold_range`` the
    interval the fitted d50 must fall in (None: only the trend's direction is predicted)."""

    variable: str
    value: Any
    direction: int
    min_effect: float = 0.2
    threshold_range: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        if self.direction not in (-1, 0, 1):
            raise ValueError(f"prediction direction must be -1, 0 or +1, got {self.direction!r}")
        if not 0 < self.min_effect <= 1:
            raise ValueError(f"min_effect must be in (0, 1], got {self.min_effect}")


@dataclass(frozen=True)
class Hypothesis:
    id: str
    statement: str
    category: str
    motive: str
    variables: tuple[str, ...]
    predictions: tuple[Prediction, ...]
    positive_control: Intervention | None
    evidence_spans: tuple[str, ...] = ()
    author: str = "unknown"

    def __post_init__(self) -> None:
        if self.category not in CATEGORIES:
            raise ValueError(f"hypothesis {self.id}: category must be one of {CATEGORIES}, got {self.category!r}")
        if not self.variables:
            raise ValueError(f"hypothesis {self.id}: names no declared variable; it cannot be tested here")
        if not self.predictions:
            raise ValueError(f"hypothesis {self.id}: needs at least one prediction")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["variables"] = list(self.variables)
        d["evidence_spans"] = list(self.evidence_spans)
        d["predictions"] = [{**asdict(p), "threshold_range": None if p.threshold_range is None else
                             list(p.threshold_range)} for p in self.predictions]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Hypothesis:
        pc = d.get("positive_control")
        return cls(id=d["id"], statement=d["statement"], category=d["category"], motive=d["motive"],
                   variables=tuple(d["variables"]),
                   predictions=tuple(Prediction(p["variable"], p["value"], int(p["direction"]),
                                                float(p.get("min_effect", 0.2)),
                                                None if p.get("threshold_range") is None else
                                                tuple(p["threshold_range"])) for p in d["predictions"]),
                   positive_control=None if pc is None else Intervention(pc["variable"], pc["value"]),
                   evidence_spans=tuple(d.get("evidence_spans", ())), author=d.get("author", "unknown"))

    @property
    def sha256(self) -> str:
        return hashlib.sha256(canonical(self.to_dict())).hexdigest()


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass
class _State:
    versions: list[tuple[int, Hypothesis]] = field(default_factory=list)  # (seq, hypothesis)
    frozen_sha: str | None = None
    data_seq: int | None = None
    post_hoc: bool = False


class HypothesisRegistry:
    """The registry in directory ``path`` (created if missing). Opening verifies the whole chain."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        try:
            self.ledger = Ledger(self.path, run_id="forensics")
        except ValueError as e:
            raise RegistryError(f"registry {self.path}: {e}") from e
        self._state: dict[str, _State] = {}
        self._touched: list[tuple[int, set[str]]] = []
        self.verify_chain()

    # -- reading --------------------------------------------------------------------------------------------------
    def verify_chain(self) -> None:
        """Check the hash chain and the registry's rules over every line; raise :class:`RegistryError` naming the
        first line that broke (line numbers are 1-based lines of ``ledger.jsonl``)."""
        problems = self.ledger.verify()
        if problems:
            seq = int(problems[0].split(":")[0].split()[1])
            raise RegistryError(f"registry {self.ledger.path} line {seq + 1} does not verify ({problems[0]}); "
                                "refusing to use it")
        self._state, self._touched = {}, []
        for ev in self.ledger.events:
            self._apply(ev, self.ledger.payload(ev), check=True)

    def _apply(self, ev: dict[str, Any], body: dict[str, Any], *, check: bool) -> None:
        line = ev["seq"] + 1
        kind = ev["kind"]
        if kind == "register":
            h = Hypothesis.from_dict(body["hypothesis"])
            if check and h.sha256 != body["sha256"]:
                raise RegistryError(f"registry line {line}: hypothesis {h.id} body does not match its sha256")
            st = self._state.setdefault(h.id, _State())
            if check and st.data_seq is not None:
                raise PostDataEditError(f"registry line {line}: hypothesis {h.id} revised after its data were seen "
                                        f"(line {st.data_seq + 1}); refusing to use the registry")
            st.versions.append((ev["seq"], h))
            st.frozen_sha = None
            st.post_hoc = st.post_hoc or any(set(h.variables) & vs for _, vs in self._touched)
        elif kind == "freeze":
            st = self._state[body["id"]]
            st.frozen_sha = body["sha256"]
        elif kind == "rollouts":
            self._touched.append((ev["seq"], set(body["variables"])))
            for hid in body.get("hypotheses", []):
                st = self._state.get(hid)
                if st is not None and st.data_seq is None:
                    st.data_seq = ev["seq"]

    def ids(self) -> list[str]:
        return list(self._state)

    def get(self, hid: str) -> Hypothesis:
        if hid not in self._state:
            raise KeyError(f"no hypothesis {hid!r} in registry {self.path}")
        return self._state[hid].versions[-1][1]

    def is_frozen(self, hid: str) -> bool:
        st = self._state.get(hid)
        return st is not None and st.frozen_sha == st.versions[-1][1].sha256

    def post_hoc(self, hid: str) -> bool:
        return self._state[hid].post_hoc

    # -- writing --------------------------------------------------------------------------------------------------
    def _append(self, kind: str, step: str, payload: dict[str, Any]) -> None:
        ev = self.ledger.append(kind, step, payload)
        self._apply(ev, payload, check=False)

    def add(self, h: Hypothesis) -> str:
        """Register ``h`` (a new id); returns its body sha256."""
        if h.id in self._state:
            raise RegistryError(f"hypothesis {h.id!r} is already registered; use revise()")
        self._append("register", f"register:{h.id}:v1", {"hypothesis": h.to_dict(), "sha256": h.sha256,
                                                           "version": 1, "parent": None, "registered_at": _now()})
        return h.sha256

    def revise(self, hid: str, **changes: Any) -> str:
        """Register a new version of ``hid`` with ``changes``; refused once rollouts of its arms were seen."""
        st = self._state.get(hid)
        if st is None:
            raise KeyError(f"no hypothesis {hid!r} in registry {self.path}")
        if st.data_seq is not None:
            raise PostDataEditError(f"hypothesis {hid} has data since registry line {st.data_seq + 1}; a revision "
                                    "now would be fitted to its results. Register a new hypothesis instead")
        old = st.versions[-1][1]
        h = replace(old, **changes)
        if h.id != hid:
            raise RegistryError("a revision cannot change the hypothesis id")
        v = len(st.versions) + 1
        self._append("register", f"register:{hid}:v{v}", {"hypothesis": h.to_dict(), "sha256": h.sha256,
                                                           "version": v, "parent": old.sha256,
                                                           "registered_at": _now()})
        return h.sha256

    def freeze(self, hid: str) -> str:
        h = self.get(hid)
        n = sum(1 for ev in self.ledger.events if ev["kind"] == "freeze" and ev["step"].startswith(f"freeze:{hid}:"))
        self._append("freeze", f"freeze:{hid}:{n + 1}", {"id": hid, "sha256": h.sha256, "frozen_at": _now()})
        return h.sha256

    def record_rollouts(self, arm_id: str, variables: list[str], hypotheses: list[str]) -> None:
        """Note that ``arm_id`` produced data touching ``variables`` for ``hypotheses`` (each must be frozen)."""
        for hid in hypotheses:
            if not self.is_frozen(hid):
                raise UnfrozenHypothesisError(f"hypothesis {hid} is not frozen at its latest version; freeze it "
                                              "before any of its arms run")
        n = len(self.ledger.events)
        self._append("rollouts", f"rollouts:{arm_id}:{n}", {"arm": arm_id, "variables": sorted(variables),
                                                             "hypotheses": sorted(hypotheses)})

    def record_verdict(self, hid: str, row: dict[str, Any]) -> None:
        n = len(self.ledger.events)
        self._append("verdict", f"verdict:{hid}:{n}", {"id": hid, **row})


__all__ = ["CATEGORIES", "Hypothesis", "HypothesisRegistry", "PostDataEditError", "Prediction", "RegistryError",
           "UnfrozenHypothesisError"]
