"""What an experiment is: a paraphrased claim with a pre-registered threshold, setups per profile, a measurement.

A claim's threshold and direction are fixed in code before any run (pre-registration), and so is the rule that
judges it (``Claim.rule``). There are three, and the judge never moves a claim from one to another:

- ``ci`` (the default): ``supported`` only when the whole confidence interval of the metric is on the right side of
  the threshold, ``not_supported`` when the whole interval is on the wrong side, ``inconclusive`` otherwise.
- ``two_part`` (``ci_bound`` set, e.g. "≥ 1.5 and CI > 1"): the point must meet the threshold and the interval's near
  end must lie strictly beyond ``ci_bound``; ``not_supported`` when the far end misses the threshold.
- ``exact`` (``judge_on="exact"``): the point is compared with the threshold. Only for a deterministic metric — a
  closed form, a count over a fixed battery, a seeded check whose noise is inside its own test — and the claim must
  say why in ``exact_why``; a measurement with sampling noise (a timing ratio, a Monte Carlo rate) is never exact.

Whatever the rule, a verdict needs a number: a NaN or infinite value or a NaN bound is ``inconclusive``. An interval
needs one too: ``ci`` and ``two_part`` give ``inconclusive`` when the estimate rests on fewer than 2 independent
units (``Estimate.n``), when its interval has zero width (one sample, or a sampled quantity every unit agreed on —
width zero is not certainty), or when more than half of its bootstrap resamples were dropped as undefined
(``Estimate.dropped`` of ``Estimate.n_boot``). A claim whose run deliberately withheld its verdict (the metric
recorded as ``<metric>_observed`` by :func:`unjudged` or not measured, with the reason noted by :func:`withhold`; a
plan-only run; the smoke profile) is ``not_judged``. Every verdict other than supported / not supported comes with a
one-line reason (:meth:`Claim.judge_with_reason`, :meth:`Experiment.judge_with_reasons`), which the run record keeps.
The judge never rounds up.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

from agentmill.core.records import VERDICTS as VERDICTS  # one copy: a record holds only these (re-exported)
from agentmill.core.stats import Estimate

PROFILES = ("smoke", "quick", "full")
Verdict = Literal["supported", "not_supported", "inconclusive", "not_judged"]  # the values of ``VERDICTS``
Rule = Literal["ci", "exact", "two_part"]
RULES: tuple[str, ...] = get_args(Rule)
SMOKE_REASON = "smoke profile: never judged"
PRECONDITION_NOT_MET = "precondition not met"
"""How a run's note begins when the instrument it judges with failed its own check (an organism's gates): the run
meant to judge, so its claims are ``inconclusive`` with that note, not ``not_judged``."""
NOT_JUDGED_KEY = "not_judged"
"""``RunContext.data[NOT_JUDGED_KEY]`` maps a claim metric this run deliberately does not judge to why
(:func:`withhold`, :func:`unjudged`)."""


@dataclass(frozen=True)
class Claim:
    """One paper claim, paraphrased, with its pre-registered test.

    ``direction``: ``">="`` / ``"<="`` compare the metric with ``threshold``; ``"in"`` requires
    ``threshold <= metric <= upper``. ``judge_on="ci"`` (default) needs the whole CI on the right side;
    ``"exact"`` compares the point value only, and ``exact_why`` must say why no interval is needed (the metric is
    deterministic: "a count over a fixed battery of 54 grid points", "closed-form values"). ``ci_bound`` encodes the
    pre-registered two-part rules such as "≥ 1.5 and CI > 1": the point must meet ``threshold`` and the CI's near end
    must lie strictly beyond ``ci_bound`` (lower end for ``>=``, upper end for ``<=``). :attr:`rule` names which of
    the three applies (module docstring).
    """

    id: str
    statement: str
    source: str
    paper_value: str
    metric: str
    direction: Literal[">=", "<=", "in"]
    threshold: float
    upper: float | None = None
    judge_on: Literal["ci", "exact"] = "ci"
    ci_bound: float | None = None
    exact_why: str = ""

    def __post_init__(self) -> None:
        if self.judge_on not in ("ci", "exact"):
            raise ValueError(f"claim {self.id}: judge_on must be 'ci' or 'exact' (with exact_why), got "
                             f"{self.judge_on!r}")
        if self.judge_on == "exact" and not self.exact_why.strip():
            raise ValueError(f"claim {self.id}: judge_on='exact' needs exact_why: why no interval is needed")
        if self.judge_on == "ci" and self.exact_why:
            raise ValueError(f"claim {self.id}: exact_why is for judge_on='exact' claims only")
        if self.judge_on == "exact" and self.ci_bound is not None:
            raise ValueError(f"claim {self.id}: ci_bound (the two-part rule) needs an interval, not judge_on='exact'")
        if self.ci_bound is not None and self.direction == "in":
            raise ValueError(f"claim {self.id}: ci_bound applies to '>=' / '<=' claims only")
        if self.direction not in (">=", "<=", "in"):
            raise ValueError(f"claim {self.id}: direction must be '>=', '<=' or 'in', got {self.direction!r}")
        if self.direction == "in" and (self.upper is None or self.upper < self.threshold):
            raise ValueError(f"claim {self.id}: direction 'in' needs upper >= threshold")

    @property
    def rule(self) -> Rule:
        """``"exact"`` (the point), ``"two_part"`` (point and a CI bound) or ``"ci"`` (the whole interval)."""
        if self.judge_on == "exact":
            return "exact"
        return "two_part" if self.ci_bound is not None else "ci"

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
        """Verdict for ``est`` under :attr:`rule` (see :meth:`judge_with_reason` for why it is not a clear one)."""
        return self.judge_with_reason(est)[0]

    def judge_with_reason(self, est: Estimate | None) -> tuple[Verdict, str]:
        """``(verdict, reason)``; the reason is one line for ``inconclusive`` and ``""`` for a clear verdict.

        The checks run in the module docstring's order: a number to judge, then (``ci`` / ``two_part``) an interval
        worth the name, then the comparison. A zero-width interval is never read as a point: that would let one
        seed, or a bootstrap of identical units, pass as certainty.
        """
        if est is None:
            return "inconclusive", f"{self.metric} was not recorded"
        if math.isnan(est.value):
            return "inconclusive", f"{self.metric} is undefined (NaN)"
        if math.isinf(est.value):
            return "inconclusive", f"{self.metric} is infinite"
        if self.rule == "exact":
            return ("supported", "") if self._ok(est.value) else ("not_supported", "")
        if math.isnan(est.lo) or math.isnan(est.hi):
            return "inconclusive", f"{self.metric} = {est.value:.3g} has no interval (bound undefined, {est.method})"
        if est.n < 2:
            return "inconclusive", f"{est.n} independent unit{'' if est.n == 1 else 's'}: no interval"
        if est.lo == est.hi:
            what = ("an exact number, but the claim is judged on an interval" if est.method == "exact" else
                    f"all {est.n} units agree ({est.method}); width zero is not certainty")
            return "inconclusive", f"zero-width interval: {what}"
        if est.n_boot and 2 * est.dropped > est.n_boot:
            return "inconclusive", (f"{est.dropped} of {est.n_boot} bootstrap resamples undefined: the interval "
                                    f"describes the few that were not")
        return self._judge_interval(est)

    def _judge_interval(self, est: Estimate) -> tuple[Verdict, str]:
        straddle = f"CI [{est.lo:.3g}, {est.hi:.3g}] straddles {self.threshold_text}"
        if self.direction == "in":
            if self._ok(est.lo) and self._ok(est.hi):
                return "supported", ""
            assert self.upper is not None
            if est.hi < self.threshold or est.lo > self.upper:
                return "not_supported", ""
            return "inconclusive", straddle
        if self.ci_bound is not None:
            side = ">" if self.direction == ">=" else "<"
            near = est.lo > self.ci_bound if self.direction == ">=" else est.hi < self.ci_bound
            if self._ok(est.value):
                if near:
                    return "supported", ""
                return "inconclusive", (f"point {est.value:.3g} meets the threshold but CI [{est.lo:.3g}, "
                                        f"{est.hi:.3g}] is not {side} {self.ci_bound:g}")
            if not self._ok(est.hi if self.direction == ">=" else est.lo):
                return "not_supported", ""
            return "inconclusive", f"point {est.value:.3g} misses the threshold but the CI reaches it: {straddle}"
        lo_ok, hi_ok = self._ok(est.lo), self._ok(est.hi)
        if lo_ok and hi_ok:
            return "supported", ""
        if not lo_ok and not hi_ok:
            return "not_supported", ""
        return "inconclusive", straddle


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
    inputs: dict[str, str] = field(default_factory=dict)
    """``{path: digest}`` of the artefacts the run was started with (the model's files, ``Experiment.reads``): what
    :meth:`shared_work_dir` checks another experiment's checkpoints against."""
    artefacts: dict[str, str] = field(default_factory=dict)
    """``{path: digest}`` of the artefacts ``measure`` declared with :meth:`read_artefact`; the run record keeps them
    and resume reruns when one has changed."""
    on_artefact: Callable[[Mapping[str, str]], None] | None = None
    """Called with :attr:`artefacts` after each declaration (the runner stamps the work dir with them at once, so an
    interrupted run's checkpoints are not reused after the artefact changes)."""

    def read_artefact(self, *paths: str | os.PathLike[str]) -> None:
        """Declare that the result depends on the content of ``paths``: artefacts found only while measuring (an
        adapter whose content address comes from the SFT data), where ``Experiment.reads`` cannot name them.
        Declare the weights, not files the run itself updates (a validation card), or every run invalidates
        itself."""
        from agentmill.core.digest import digests

        self.artefacts.update(digests(paths))
        if self.on_artefact is not None:
            self.on_artefact(self.artefacts)

    def shared_work_dir(self, exp_id: str) -> Path:
        """The work dir of experiment ``exp_id`` (beside this one), to reuse the checkpoints it keeps there (E162's
        tree_llm samples its calibration pool where collapse_llm keeps it). Its checkpoints are used only when they
        were made from this run's :attr:`inputs` (:func:`stale_work_dir`); otherwise ``<work dir>/<exp_id>`` holds
        this run's own, so neither experiment reads checkpoints of another model's bytes. Stamped like the runner
        stamps a work dir, so ``exp_id``'s own run can tell what they were made from."""
        from agentmill import __version__

        shared = self.work_dir.parent / exp_id
        checkpoints = has_checkpoints(shared)
        if checkpoints and stale_work_dir(shared, __version__) is not None:
            shared = self.work_dir / exp_id
            checkpoints = has_checkpoints(shared)
        shared.mkdir(parents=True, exist_ok=True)
        stamp_work_dir(shared, self.inputs, __version__, fresh=not checkpoints)
        return shared

    def load_lm(self, spec: str | None = None) -> Any:
        """Load (and cache per process) the model named by ``spec`` or the run's model."""
        spec = spec or self.model
        if self.lm_loader is not None:
            return self.lm_loader(spec)
        from agentmill.lm import load_lm

        return load_lm(spec)


WORK_INPUTS = ".inputs.json"
"""A work dir's note of what its checkpoints were made from: ``{"agentmill": version, "artefacts": {path:
digest}}``, every artefact any run in it read (``runner.run_experiment`` writes it)."""


def recorded_digests(obj: Any) -> dict[str, str] | None:
    """``obj`` if it is a ``{path: digest}`` mapping of strings (as a record or a work dir keeps it), else None."""
    if isinstance(obj, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in obj.items()):
        return obj
    return None


def artefacts_changed(recorded: Mapping[str, str]) -> list[str]:
    """The paths of ``recorded`` whose content changed since (``core.digest.changed``), leaving out the ``<reads>``
    entry that holds why the artefacts could not be named (``runner.read_artefacts``)."""
    from agentmill.core.digest import changed

    return changed({k: v for k, v in recorded.items() if k != "<reads>"})


def has_checkpoints(work_dir: Path) -> bool:
    """Whether ``work_dir`` holds anything besides its :data:`WORK_INPUTS` note."""
    return work_dir.is_dir() and any(p.name != WORK_INPUTS for p in work_dir.iterdir())


def stale_work_dir(work_dir: Path, version: str) -> str | None:
    """Why the checkpoints in ``work_dir`` must not be reused, or None: made by another ``version``, from an
    artefact whose content has changed since, or of unknown inputs (no readable :data:`WORK_INPUTS`)."""
    try:
        note = json.loads((work_dir / WORK_INPUTS).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return f"no {WORK_INPUTS}: the inputs they were made from are unknown"
    except (OSError, ValueError) as e:
        return f"{WORK_INPUTS} is unreadable ({type(e).__name__})"
    recorded = recorded_digests(note.get("artefacts")) if isinstance(note, dict) else None
    if recorded is None:
        return f"{WORK_INPUTS} is malformed"
    if note.get("agentmill") != version:
        return f"made by agentmill {note.get('agentmill')}, this is {version}"
    changed = artefacts_changed(recorded)
    if changed:
        more = f" (and {len(changed) - 1} more)" if len(changed) > 1 else ""
        return f"{changed[0]}{more} changed since they were made"
    return None


def stamp_work_dir(work_dir: Path, artefacts: Mapping[str, str], version: str, *, fresh: bool = False) -> None:
    """Add ``artefacts`` to ``work_dir``'s :data:`WORK_INPUTS`. The digests of earlier runs in it are kept (their
    checkpoints are dropped too when one of their artefacts changes) unless ``fresh``: no checkpoints to describe."""
    from agentmill.core.records import write_text_atomic

    recorded = None
    if not fresh:
        try:
            note = json.loads((work_dir / WORK_INPUTS).read_text(encoding="utf-8"))
            recorded = recorded_digests(note.get("artefacts")) if note.get("agentmill") == version else None
        except (OSError, ValueError, AttributeError):
            pass
    merged = {**(recorded or {}), **artefacts}
    write_text_atomic(work_dir / WORK_INPUTS, json.dumps({"agentmill": version, "artefacts": merged}, indent=1,
                                                         sort_keys=True))


Measure = Callable[[Any, RunContext], Mapping[str, Estimate]]
Plotter = Callable[[Mapping[str, Any], Path], list[Path]]


@dataclass(frozen=True)
class Experiment:
    """A reproducible experiment: claims + per-profile setups + ``measure``.

    ``setups`` maps each profile to a frozen dataclass instance; ``--set key=value`` overrides its fields.
    ``requires`` names extras the experiment needs (``{"hf"}``); ``uses_model`` says whether ``--model`` matters.
    ``plots(data, out_dir)`` renders figures from the record's ``data``.
    ``parallel_safe`` marks an experiment that runs on one core and judges no wall-clock time or speed ratio, so
    ``agentmill reproduce --jobs N`` may run it beside another such experiment without changing what it measures
    (model experiments among them run one torch thread each: two SmolLM2 samplers on one core each finish sooner
    than one after the other on two). Every other experiment (a timing) runs one at a time on a core of its own, beside
    model-free experiments only, never beside model inference or another timing (``runner.run_suite``).
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
    quick_budget_s: float | None = None
    """Wall seconds this experiment may take at the quick profile on 2 cores (the main job's share: about a minute
    per paper, ARCHITECTURE.md §4); ``agentmill list`` shows it and a suite warns when a run takes over twice it."""
    quick_check: str = ""
    """Set when quick runs this experiment as a pipeline check only: the reason, naming where its claims are judged
    (full, whose committed record every table shows beside quick). Its claim metrics are then kept as
    ``<metric>_observed`` and its claims are ``not_judged`` at quick (:meth:`for_profile`). For experiments whose
    claims quick cannot power within the main job's budget (ARCHITECTURE.md §4: heavy work runs at full)."""
    reads: Callable[[Any, str | None], Sequence[Path]] | None = None
    """``reads(setup, model)``: the files and folders the run reads whose content its result depends on (a trained
    drafter, a data fixture, a model named in the setup; ``--model``'s own files count without being listed, see
    ``runner.read_artefacts``). Their digests enter :func:`setup_hash`, so an artefact retrained in place makes resume
    rerun instead of reusing a record computed from its old bytes. One found only while measuring (a content-addressed
    adapter) is declared with :meth:`RunContext.read_artefact` instead."""

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

    def for_profile(self, profile: str, metrics: Mapping[str, Estimate], data: dict[str, Any]) -> dict[str, Estimate]:
        """``metrics`` as the record of a ``profile`` run keeps them: at quick, a :attr:`quick_check` experiment's
        claim metrics become observed values (:func:`unjudged`), with its reason noted in ``data``."""
        if profile == "quick" and self.quick_check:
            return unjudged(metrics, [c.metric for c in self.claims], self.quick_check, data)
        return dict(metrics)

    def setup_for(self, profile: str, overrides: Mapping[str, str] | None = None) -> Any:
        """The setup of ``profile`` with ``--set`` overrides parsed to each field's type."""
        if profile not in PROFILES:
            raise ValueError(f"unknown profile {profile!r}; choose one of {', '.join(PROFILES)}")
        setup = self.setups[profile]
        if not overrides:
            return setup
        return dataclasses.replace(setup, **parse_overrides(setup, overrides, where=self.id))

    def judge(self, profile: str, metrics: Mapping[str, Estimate],
              data: Mapping[str, Any] | None = None) -> dict[str, Verdict]:
        """Verdict per claim (:meth:`judge_with_reasons` without the reasons)."""
        return self.judge_with_reasons(profile, metrics, data)[0]

    def judge_with_reasons(self, profile: str, metrics: Mapping[str, Estimate], data: Mapping[str, Any] | None = None
                           ) -> tuple[dict[str, Verdict], dict[str, str]]:
        """``(verdicts, reasons)``: a verdict per claim, and a one-line reason for each that is neither supported
        nor not supported.

        ``not_judged``: the smoke profile; a plan-only run (``data["plan_only"]``, its note the reason); a claim whose
        metric the run withheld (:func:`withhold`, :func:`unjudged`: the reason is in ``data``) or recorded only as
        ``<metric>_observed``. A claim metric that is simply absent is ``inconclusive`` (the run meant to judge it),
        with the run's :data:`PRECONDITION_NOT_MET` note when it has one; so is a withheld one whose reason is such a
        note (the instrument failed its check: the run meant to judge).
        """
        data = data or {}
        verdicts: dict[str, Verdict] = {}
        reasons: dict[str, str] = {}
        plan = data.get("plan_only")
        withheld = data.get(NOT_JUDGED_KEY)
        withheld = withheld if isinstance(withheld, Mapping) else {}
        pre = data.get("precondition")
        for c in self.claims:
            est = metrics.get(c.metric)
            if profile == "smoke":
                v, why = "not_judged", SMOKE_REASON
            elif plan:
                v, why = "not_judged", f"plan only: {plan}" if isinstance(plan, str) else "plan only: nothing measured"
            elif est is None and (c.metric in withheld or f"{c.metric}_observed" in metrics):
                why = str(withheld.get(c.metric) or "recorded as observed only: verdict withheld")
                v = "inconclusive" if why.startswith(PRECONDITION_NOT_MET) else "not_judged"
            elif est is None and isinstance(pre, str) and pre.startswith(PRECONDITION_NOT_MET):
                v, why = "inconclusive", pre
            else:
                v, why = c.judge_with_reason(est)
            verdicts[c.id] = v
            if v not in ("supported", "not_supported"):
                reasons[c.id] = why
        return verdicts, reasons


def withhold(data: dict[str, Any], metrics: Collection[str], reason: str) -> None:
    """Note in ``data`` (the run's ``ctx.data``) that the claims on ``metrics`` are deliberately not judged in this
    run, and why: :meth:`Experiment.judge_with_reasons` then gives them ``not_judged`` with ``reason`` instead of an
    unexplained "inconclusive". For a rule that does not apply at this size (a full-profile rule at 1 seed) or an
    arm this profile does not run. ``reason`` is one line that is true of this run; a second call adds to the notes.
    """
    if not reason.strip():
        raise ValueError("withhold needs a reason: why this run gives no verdict")
    notes = data.setdefault(NOT_JUDGED_KEY, {})
    for m in metrics:
        notes[m] = reason


def unjudged(out: Mapping[str, Any], metrics: Collection[str], reason: str, data: dict[str, Any]) -> dict[str, Any]:
    """``out`` with each claim metric in ``metrics`` renamed ``<metric>_observed``, and ``reason`` noted for them in
    ``data`` (pass the run's ``ctx.data``; :func:`withhold`).

    A run that cannot judge its claims (an untrained stand-in model in a quick profile, one seed where a negative
    control needs five) still records the numbers; without their claim names no verdict is computed from them, and
    the claim says ``not_judged`` with ``reason`` ("tiny stand-in model: verdicts need hf:smollm2 (full)") rather
    than a bare "inconclusive".
    """
    withhold(data, metrics, reason)
    return {(f"{k}_observed" if k in metrics else k): v for k, v in out.items()}


def rule_counts(experiments: Iterable[Experiment] | Mapping[str, Experiment]) -> dict[str, int]:
    """How many claims each rule judges (``{"ci": …, "exact": …, "two_part": …}``, every rule present), for the
    report's header: a reader should see how much rests on a point value."""
    exps = experiments.values() if isinstance(experiments, Mapping) else experiments
    counts = dict.fromkeys(RULES, 0)
    for exp in exps:
        for c in exp.claims:
            counts[c.rule] += 1
    return counts


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


def models_read(*fields: str) -> Callable[[Any, str | None], list[Path]]:
    """``Experiment.reads`` of an experiment whose setup names the models it loads in ``fields`` (specs such as
    ``hf:smollm2``): their weight files (``lm.model_files``), so a GGUF replaced under the same spec reruns it."""

    def reads(setup: Any, model: str | None) -> list[Path]:
        from agentmill.lm import model_files

        return [p for name in fields for p in model_files(getattr(setup, name))]

    return reads


def setup_hash(setup: Any, model: str | None, artefacts: Mapping[str, str] | None = None,
               version: str | None = None) -> str:
    """Stable hash of what a run's result depends on, so resume can tell whether a stored record is for the same
    run: the setup, the model spec, the content of the artefacts it reads (``{path: digest}``,
    ``core.digest.digests``) and the package version. Only the digests enter, not the paths: the same bytes read from
    another checkout give the same result."""
    inputs: dict[str, Any] = {"setup": dataclasses.asdict(setup), "model": model}
    if artefacts is not None:
        inputs["artefacts"] = sorted(artefacts.values())
    if version is not None:
        inputs["version"] = version
    blob = json.dumps(inputs, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]
