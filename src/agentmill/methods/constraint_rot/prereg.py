"""The pre-registration (``prereg.yaml``; docs/methods/constraint_rot.md "Claims and verdicts"): claim thresholds, the
decay precondition and the statistics settings, loaded, validated and hashed.

Why a hash: every report prints the sha256 of the file the thresholds came from, and a results file written under
another prereg is not resumed (the package README, "Faults"), so a threshold cannot drift after numbers are seen.
"""

from __future__ import annotations

import copy
import hashlib
import math
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any

from agentmill.core.extras import MissingExtraError

DIRECTIONS = ("eq", "le", "ge", "lt", "gt", "abs_le", "ci_lower_gt", "ci_lower_ge", "ci_upper_le", "ci_includes",
              "ci_excludes", "non_increasing", "reported")
_NO_THRESHOLD = ("non_increasing", "reported")
PROFILES = ("all", "quick", "full", "endpoint")
EXACT_TOL = 1e-9


def _yaml() -> Any:
    """PyYAML, from the ``constraint-rot`` extra (imported on first use so the core install can import this module)."""
    try:
        import yaml
    except ImportError as e:
        raise MissingExtraError("constraint-rot", "reading ConstraintRot's pre-registration (YAML)") from e
    return yaml



class PreregError(ValueError):
    """A malformed pre-registration (the message names the file and the field)."""


@dataclass(frozen=True)
class Criterion:
    """One pre-registered test: ``metric`` compared against ``threshold`` in ``direction``."""

    id: str
    metric: str
    direction: str
    threshold: float | None
    profile: str = "all"
    note: str = ""

    def check(self, value: float | None = None, lo: float | None = None, hi: float | None = None,
              *, sequence: list[float] | None = None) -> bool | None:
        """True/False for a gated criterion, None for ``reported``. CI directions need ``lo``/``hi``;
        ``non_increasing`` needs ``sequence``. A NaN input gives False (an undefined number never passes)."""
        d, t = self.direction, self.threshold
        if d == "reported":
            return None
        if d == "non_increasing":
            if sequence is None:
                raise ValueError(f"{self.id}: non_increasing needs sequence=")
            return all(b <= a + EXACT_TOL for a, b in zip(sequence, sequence[1:]))
        assert t is not None
        if d.startswith("ci_"):
            if lo is None or hi is None:
                raise ValueError(f"{self.id}: direction {d} needs lo= and hi=")
            if math.isnan(lo) or math.isnan(hi):
                return False
            return {"ci_lower_gt": lo > t, "ci_lower_ge": lo >= t, "ci_upper_le": hi <= t,
                    "ci_includes": lo <= t <= hi, "ci_excludes": not lo <= t <= hi}[d]
        if value is None:
            raise ValueError(f"{self.id}: direction {d} needs value=")
        if math.isnan(value):
            return False
        return {"eq": abs(value - t) <= EXACT_TOL, "le": value <= t + EXACT_TOL, "ge": value >= t - EXACT_TOL,
                "lt": value < t, "gt": value > t, "abs_le": abs(value) <= t + EXACT_TOL}[d]


@dataclass(frozen=True)
class Claim:
    id: str
    title: str
    kind: str  # "claim" | "negative_control"
    criteria: tuple[Criterion, ...]
    source: str = ""
    setup: str = ""


@dataclass(frozen=True)
class Prereg:
    version: str
    sha256: str
    path: str
    precondition: dict[str, float]
    statistics: dict[str, Any]
    claims: tuple[Claim, ...]

    def claim(self, claim_id: str) -> Claim:
        for c in self.claims:
            if c.id == claim_id:
                return c
        raise KeyError(f"no claim {claim_id!r} in prereg {self.path}")

    def criterion(self, criterion_id: str) -> Criterion:
        for c in self.claims:
            for k in c.criteria:
                if k.id == criterion_id:
                    return k
        raise KeyError(f"no criterion {criterion_id!r} in prereg {self.path}")

    @property
    def rs_ci_lower_min(self) -> float:
        return float(self.precondition["rs_ci_lower_min"])

    @property
    def v_full_max(self) -> float:
        return float(self.precondition["v_full_max"])


def default_prereg_path() -> Path:
    return Path(str(resources.files("agentmill.methods.constraint_rot").joinpath("prereg.yaml")))


def _num(v: Any, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(float(v)):
        raise PreregError(f"{where}: must be a number, got {v!r}")
    return float(v)


def _criterion(d: Any, where: str) -> Criterion:
    if not isinstance(d, dict):
        raise PreregError(f"{where}: a criterion must be a mapping, got {type(d).__name__}")
    unknown = set(d) - {"id", "metric", "direction", "threshold", "profile", "note"}
    if unknown:
        raise PreregError(f"{where}: unknown field(s) {sorted(unknown)}")
    for f in ("id", "metric", "direction"):
        if not isinstance(d.get(f), str) or not d[f]:
            raise PreregError(f"{where}: field {f!r} must be a non-empty string, got {d.get(f)!r}")
    where = f"{where} ({d['id']})"
    direction = d["direction"]
    if direction not in DIRECTIONS:
        raise PreregError(f"{where}: unknown direction {direction!r}; expected one of {DIRECTIONS}")
    profile = d.get("profile", "all")
    if profile not in PROFILES:
        raise PreregError(f"{where}: unknown profile {profile!r}; expected one of {PROFILES}")
    t = d.get("threshold")
    if direction in _NO_THRESHOLD:
        if t is not None:
            raise PreregError(f"{where}: direction {direction!r} takes no threshold, got {t!r}")
        threshold = None
    else:
        threshold = _num(t, f"{where} threshold")
    return Criterion(d["id"], d["metric"], direction, threshold, profile, str(d.get("note", "")))


def parse_prereg(text: str | bytes, *, path: str = "<string>") -> Prereg:
    """Validate and build a :class:`Prereg` from YAML text; ``sha256`` is over the exact bytes."""
    raw = text.encode() if isinstance(text, str) else text
    try:
        doc = _yaml().safe_load(raw)
    except _yaml().YAMLError as e:
        raise PreregError(f"{path}: invalid YAML: {e}") from e
    if not isinstance(doc, dict):
        raise PreregError(f"{path}: top level must be a mapping")
    version = doc.get("version")
    if not isinstance(version, str) or not version:
        raise PreregError(f"{path}: field 'version' must be a non-empty string, got {version!r}")
    pre = doc.get("precondition")
    if not isinstance(pre, dict) or set(pre) != {"rs_ci_lower_min", "v_full_max"}:
        raise PreregError(f"{path}: 'precondition' must have exactly rs_ci_lower_min and v_full_max, got {pre!r}")
    precondition = {k: _num(v, f"{path} precondition.{k}") for k, v in pre.items()}
    stats = doc.get("statistics")
    if not isinstance(stats, dict):
        raise PreregError(f"{path}: 'statistics' must be a mapping")
    claims: list[Claim] = []
    seen: set[str] = set()
    for section, kind in (("claims", "claim"), ("negative_controls", "negative_control")):
        entries = doc.get(section)
        if not isinstance(entries, list) or not entries:
            raise PreregError(f"{path}: '{section}' must be a non-empty list")
        for i, c in enumerate(entries):
            where = f"{path} {section}[{i}]"
            if not isinstance(c, dict) or not isinstance(c.get("id"), str):
                raise PreregError(f"{where}: needs a string 'id'")
            crits = c.get("criteria")
            if not isinstance(crits, list) or not crits:
                raise PreregError(f"{where} ({c['id']}): 'criteria' must be a non-empty list")
            parsed = tuple(_criterion(k, f"{where}.criteria[{j}]") for j, k in enumerate(crits))
            for ident in (c["id"], *(k.id for k in parsed)):
                if ident in seen:
                    raise PreregError(f"{where}: duplicate id {ident!r}")
                seen.add(ident)
            claims.append(Claim(c["id"], str(c.get("title", "")), kind, parsed, str(c.get("source", "")),
                                str(c.get("setup", ""))))
    return Prereg(version, hashlib.sha256(raw).hexdigest(), path, precondition, stats, tuple(claims))


_PARSED: dict[tuple[str, str], Prereg] = {}
"""Parsed pre-registrations by (sha256 of the bytes, path): every E164 claim is built from one criterion at import,
and parsing the YAML ~50 times per process took seconds. The file is read and hashed on every call, so an edited
file is parsed afresh."""


def load_prereg(path: str | Path | None = None) -> Prereg:
    """Load the packaged ``prereg.yaml`` (or ``path``), validate it and hash its bytes (parsed once per content;
    each caller gets its own copies of the mutable ``precondition`` and ``statistics`` mappings)."""
    p = Path(path) if path is not None else default_prereg_path()
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise PreregError(f"cannot read prereg file {p}: {e}") from e
    key = (hashlib.sha256(raw).hexdigest(), str(p))
    pr = _PARSED.get(key)
    if pr is None:
        pr = _PARSED[key] = parse_prereg(raw, path=str(p))
    return replace(pr, precondition=dict(pr.precondition), statistics=copy.deepcopy(pr.statistics))


__all__ = ["DIRECTIONS", "Claim", "Criterion", "Prereg", "PreregError", "default_prereg_path", "load_prereg",
           "parse_prereg"]
