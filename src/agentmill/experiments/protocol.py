"""What an experiment is: a paraphrased claim with a pre-registered threshold, setups per profile, a measurement.

A claim's threshold and direction are fixed in code before any run (pre-registration). The judge is
deliberately conservative: a claim is ``supported`` only when the whole confidence interval of its metric is on
the right side of the threshold, ``not_supported`` when the whole interval is on the wrong side, and
``inconclusive`` otherwise. It never rounds up.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from agentmill.core.records import VERDICTS as VERDICTS  # one copy: a record holds only these (re-exported)
from agentmill.core.stats import Estimate

PROFILES = ("smoke", "quick", "full")
Verdict = Literal["supported", "not_supported", "inconclusive", "not_judged"]  # the values of ``VERDICTS``


@dataclass(frozen=True)
class Claim:
    """One paper claim, paraphrased, with its pre-registered test.

    ``direction``: ``">="`` / ``"<="`` compare the metric with ``threshold``; ``"in"`` requires
    ``threshold <= metric <= upper``. ``judge_on="ci"`` (default) needs the whole CI on the right side;
    ``"point"`` compares the point value only (for exact quantities and counts). ``ci_bound`` encodes the
    spec's two-part rules such as "≥ 1.5 and CI > 1": the point must meet ``threshold`` and the CI's near end
    must lie strictly beyond ``ci_bound`` (lower end for ``>=``, upper end for ``<=``).
    """

    id: str
    statement: str
    source: str
    paper_value: str
    metric: str
    direction: Literal[">=", "<=", "in"]
    threshold: float
    upper: float | None = None
    judge_on: Literal["ci", "point"] = "ci"
    ci_bound: float | None = None

    def __post_init__(self) -> None:
        if self.ci_bound is not None and self.direction == "in":
            raise ValueError(f"claim {self.id}: ci_bound applies to '>=' / '<=' claims only")
        if self.direction not in (">=", "<=", "in"):
            raise ValueError(f"claim {self.id}: direction must be '>=', '<=' or 'in', got {self.direction!r}")
        if self.direction == "in" and (self.upper is None or self.upper < self.threshold):
            raise ValueError(f"claim {self.id}: direction 'in' needs upper >= threshold")

    @property
    def threshold_text(self) -> str:
        if self.direction == "in":
            return f"∈ [{self.threshold:g}, {self.upper:g}]"
        text = f"{'≥' if self.direction == '>=' else '≤'} {self.threshold:g}"
        if self.ci_bound is not None:
            text += f", CI {'>' if self.direction == '>=' else '<'} {self.ci_bound:g}"
        return text

    def _ok(self, x: float) -> bool:
        if self.direction == ">=":
            return x >= self.threshold
        if self.direction == "<=":
            return x <= self.threshold
        assert self.upper is not None
        return self.threshold <= x <= self.upper

    def judge(self, est: Estimate | None) -> Verdict:
        """Verdict for ``est`` (None or NaN: inconclusive)."""
        if est is None or est.value != est.value:
            return "inconclusive"
        if self.judge_on == "point" or est.lo == est.hi:
            return "supported" if self._ok(est.value) else "not_supported"
        if self.direction == "in":
            if self._ok(est.lo) and self._ok(est.hi):
                return "supported"
            assert self.upper is not None
            if est.hi < self.threshold or est.lo > self.upper:
                return "not_supported"
            return "inconclusive"
        if self.ci_bound is not None:
            near = est.lo > self.ci_bound if self.direction == ">=" else est.hi < self.ci_bound
            if self._ok(est.value):
                return "supported" if near else "inconclusive"
            far_bad = not self._ok(est.hi if self.direction == ">=" else est.lo)
            return "not_supported" if far_bad else "inconclusive"
        lo_ok, hi_ok = self._ok(est.lo), self._ok(est.hi)
        if lo_ok and hi_ok:
            return "supported"
        if not lo_ok and not hi_ok:
            return "not_supported"
        return "inconclusive"


@dataclass
class RunContext:
    """What ``measure`` gets besides its setup: where to write, which model, which executor, progress."""

    profile: str
    model: str
    executor: Any
    work_dir: Path
    """A per-experiment directory for caches/checkpoints that survive an interrupted run."""
    progress: Callable[[str, float, float | None], None] = lambda desc, done, total: None
    """``progress(description, completed, total)``; the CLI renders it as a rich progress bar."""
    data: dict[str, Any] = field(default_factory=dict)
    """Raw series for plots and audit (saved into the run record's ``data``)."""
    lm_loader: Callable[[str], Any] | None = None

    def load_lm(self, spec: str | None = None) -> Any:
        """Load (and cache per process) the model named by ``spec`` or the run's model."""
        spec = spec or self.model
        if self.lm_loader is not None:
            return self.lm_loader(spec)
        from agentmill.lm import load_lm

        return load_lm(spec)


Measure = Callable[[Any, RunContext], Mapping[str, Estimate]]
Plotter = Callable[[Mapping[str, Any], Path], list[Path]]


@dataclass(frozen=True)
class Experiment:
    """A reproducible experiment: claims + per-profile setups + ``measure``.

    ``setups`` maps each profile to a frozen dataclass instance; ``--set key=value`` overrides its fields.
    ``requires`` names extras the experiment needs (``{"hf"}``); ``uses_model`` says whether ``--model`` matters.
    ``plots(data, out_dir)`` renders figures from the record's ``data``.
    ``parallel_safe`` marks an experiment that runs on one core and judges no wall-clock time or speed ratio, so
    ``agentmill reproduce --jobs N`` may run it beside another such experiment without changing its result; every
    other experiment runs alone (model experiments use both cores; timing experiments need a quiet machine).
    """

    id: str
    title: str
    paper: str
    claims: tuple[Claim, ...]
    setups: Mapping[str, Any]
    measure: Measure
    scale_note: str
    uses_model: bool = False
    requires: frozenset[str] = frozenset()
    plots: Plotter | None = None
    version: str = "1"
    parallel_safe: bool = False

    def __post_init__(self) -> None:
        missing = [p for p in PROFILES if p not in self.setups]
        if missing:
            raise ValueError(f"experiment {self.id}: setups missing profiles {missing}")
        for p, s in self.setups.items():
            if not dataclasses.is_dataclass(s) or not getattr(type(s), "__dataclass_params__").frozen:
                raise TypeError(f"experiment {self.id}: setup for {p!r} must be a frozen dataclass instance")
        ids = [c.id for c in self.claims]
        if len(set(ids)) != len(ids):
            raise ValueError(f"experiment {self.id}: duplicate claim ids {ids}")

    def setup_for(self, profile: str, overrides: Mapping[str, str] | None = None) -> Any:
        """The setup of ``profile`` with ``--set`` overrides parsed to each field's type."""
        if profile not in PROFILES:
            raise ValueError(f"unknown profile {profile!r}; choose one of {', '.join(PROFILES)}")
        setup = self.setups[profile]
        if not overrides:
            return setup
        return dataclasses.replace(setup, **parse_overrides(setup, overrides, where=self.id))

    def judge(self, profile: str, metrics: Mapping[str, Estimate]) -> dict[str, Verdict]:
        """Verdict per claim; the smoke profile never yields a verdict."""
        if profile == "smoke":
            return {c.id: "not_judged" for c in self.claims}
        return {c.id: c.judge(metrics.get(c.metric)) for c in self.claims}


def unjudged(out: Mapping[str, Any], metrics: Collection[str]) -> dict[str, Any]:
    """``out`` with each claim metric in ``metrics`` renamed ``<metric>_observed``.

    A run that cannot judge its claims (an untrained stand-in model in a quick profile) still records the numbers;
    without their claim names no verdict is computed from them.
    """
    return {(f"{k}_observed" if k in metrics else k): v for k, v in out.items()}


def parse_overrides(setup: Any, overrides: Mapping[str, str], *, where: str) -> dict[str, Any]:
    """Parse ``key=value`` strings into typed field values; unknown keys fail with a suggestion."""
    import difflib

    fields = {f.name: f for f in dataclasses.fields(setup)}
    out: dict[str, Any] = {}
    for key, raw in overrides.items():
        if key not in fields:
            close = difflib.get_close_matches(key, list(fields), n=1)
            hint = f" Did you mean '{close[0]}'?" if close else ""
            raise KeyError(f"{where} has no setting {key!r}.{hint} Settings: {', '.join(fields)}")
        current = getattr(setup, key)
        out[key] = _coerce(raw, current, key)
    return out


def _coerce(raw: str, current: Any, key: str) -> Any:
    try:
        if isinstance(current, bool):
            low = raw.strip().lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
            raise ValueError("expected true/false")
        if isinstance(current, int):
            return int(raw)
        if isinstance(current, float):
            return float(raw)
        if isinstance(current, tuple):
            items = [s for s in raw.split(",") if s.strip()]
            proto = current[0] if current else ""
            return tuple(_coerce(s.strip(), proto, key) for s in items)
        if current is None or isinstance(current, str):
            return raw
    except ValueError as e:
        raise ValueError(f"--set {key}={raw!r}: cannot parse as {type(current).__name__} ({e})") from None
    raise ValueError(f"--set {key}: fields of type {type(current).__name__} cannot be set from the command line")


def setup_hash(setup: Any, model: str | None) -> str:
    """Stable hash of a setup (and model) so resume can tell whether a stored record is for the same run."""
    blob = json.dumps({"setup": dataclasses.asdict(setup), "model": model}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
