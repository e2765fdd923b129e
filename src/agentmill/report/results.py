"""Result summaries: the small, committed JSON behind every published verdict (``results/<profile>/<id>.json``).

A run record (``runs/<profile>/<id>.json``) holds everything a run produced: raw series, tracebacks, package
versions, the absolute paths of the machine it ran on. It is the audit trail, too big and too machine-specific to
commit. A result summary keeps only what a reader of a verdict table needs to trust one line of it: each claim's
value with its interval and sample size, the verdict and why, the threshold and which rule judged it, and the
provenance (model, setup hash, commit, date, CPU, wall time). The README table and ``docs/verdicts.md`` are rendered
from these files alone (``report.markdown``), so a verdict is published only when an experiment run produced it.

The same file always comes out of the same record: keys in a fixed order, numbers rounded to six significant
digits, no timestamps of the save itself, and no absolute paths (an error message or reason naming a file keeps
only the file's name).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from agentmill.core.machine import CPU_FLAGS, host_cpu
from agentmill.core.records import RunRecord, write_text_atomic
from agentmill.core.stats import Estimate
from agentmill.experiments import protocol
from agentmill.experiments.protocol import Claim, Experiment
from agentmill.report.papers import paper_of

SUMMARY_SCHEMA = 1
SMOKE_REASON: str = getattr(protocol, "SMOKE_REASON", "smoke profile: never judged")
"""The reason a smoke claim is not judged, as the judge words it (for records written before reasons were kept)."""
COUNTED = ("supported", "not_supported", "inconclusive", "not_judged")
"""The claim verdicts a table counts, each in its own column: a claim the profile does not judge is never counted
as inconclusive (ARCHITECTURE.md §4)."""

LM_PREFIXES = ("hf:", "tiny:", "openai:", "scripted:", "serve:")
"""Spec prefixes of the lm layer (and ``serve:``, a model behind the loopback server)."""

EMBEDDED_NAMES = {"smollm2": "hf:smollm2", "gemma3-270m": "hf:gemma3-270m", "gemma3": "hf:gemma3-270m"}
"""Bare names of the embedded models as some setups spell them: a field called ``model`` (or ``*_model``) holding
``smollm2`` is the ``hf:smollm2`` weights run through the serving engine (E179) or an ``HFPair`` (E173 perf). The
report layer may not import ``agentmill.lm`` (tests/test_layering.py), so the names are listed here; a new embedded
model that setups name bare is added here too."""

"""The CPU features that change this project's timings (ARCHITECTURE.md §3: bf16 decode and prefill differ
between AVX2-only and AVX-512 VNNI/BF16 hosts); a summary names which of them the CPU has."""


DEFAULT_MODEL = "hf:smollm2"
"""The model an experiment that takes ``--model`` runs when none is named (``experiments.runner.DEFAULT_MODEL``)."""


def model_label(rec: RunRecord) -> str:
    """The model column: the run's ``--model`` when the experiment takes one; else the LM specs its setup names
    (an organism's base, a summariser, a policy), with the fields that name them; else ``none``."""
    return _label(rec.model, rec.setup)


def _named_specs(setup: Mapping[str, Any]) -> dict[str, list[str]]:
    """The LM specs a setup names, each with the fields that name it."""
    named: dict[str, list[str]] = {}
    for key, value in setup.items():
        if not isinstance(value, str):
            continue
        if value.startswith(LM_PREFIXES):
            named.setdefault(value, []).append(key)
        elif (key == "model" or key.endswith("_model")) and value in EMBEDDED_NAMES:
            named.setdefault(EMBEDDED_NAMES[value], []).append(key)
    return named


def _label(model: str | None, setup: Mapping[str, Any]) -> str:
    if model:
        return model
    named = _named_specs(setup)
    return "; ".join(f"{spec} ({', '.join(keys)})" for spec, keys in named.items()) or "none"


def variant_of(rec: RunRecord, exp: Experiment) -> str | None:
    """The name of the model variant ``rec`` is, or ``None`` when it ran the model its experiment registers.

    The same claims re-run on another model (``--model hf:qwen-coder-0.5b``, or ``--set base=...`` where a setup
    names its model) are published beside the registered model's rows, not over them: their summary is
    ``results/<profile>/<id>@<variant>.json``. The variant is named after the specs that differ (prefix dropped, and
    an ``openai:`` endpoint's address too: ``openai:qwen-coder-0.5b@http://127.0.0.1:8011/v1`` is ``qwen-coder-0.5b``,
    the address being transport, as in a recording's key)."""
    registered = exp.setups.get(rec.profile)
    default_setup = dataclasses.asdict(registered) if registered is not None else {}
    default_model = DEFAULT_MODEL if exp.uses_model else None
    if _label(rec.model, rec.setup) == _label(default_model, default_setup):
        return None
    if rec.model:
        specs = [rec.model]
    else:
        before = _named_specs(default_setup)
        specs = [spec for spec in _named_specs(rec.setup) if spec not in before] or ["setup"]
    names = [re.sub(r"[^a-z0-9.]+", "-", _without_address(spec).split(":", 1)[-1].lower()).strip("-.")
             for spec in specs]
    return "+".join(n for n in names if n) or "variant"


def _without_address(spec: str) -> str:
    return spec.split("@", 1)[0] if spec.startswith("openai:") else spec


def missing_reason(rec: RunRecord) -> str:
    """What a claim without a metric shows: the run's withheld-precondition or plan-only note, else ``missing``."""
    pre = rec.data.get("precondition")
    if isinstance(pre, str) and pre.startswith("precondition not met"):
        return "precondition not met"
    if rec.data.get("plan_only"):
        return "not measured (plan only)"
    return "missing"


def claim_rule(claim: Claim) -> str:
    """``ci``, ``exact`` or ``two_part``: which judging rule applies (``Claim.rule`` where the protocol has it)."""
    rule = getattr(claim, "rule", None)
    if isinstance(rule, str):
        return rule
    if claim.judge_on in ("exact", "point"):  # "point": the protocol's name for it before Claim.rule
        return "exact"
    return "two_part" if claim.ci_bound is not None else "ci"


def rule_counts(experiments: Mapping[str, Experiment] | Any) -> dict[str, int]:
    """Claims per judging rule over ``experiments`` (``protocol.rule_counts`` where the protocol has it)."""
    exps = list(experiments.values()) if isinstance(experiments, Mapping) else list(experiments)
    counter = getattr(protocol, "rule_counts", None)
    if counter is not None:
        return {k: int(v) for k, v in dict(counter(exps)).items()}
    out = {"ci": 0, "exact": 0, "two_part": 0}
    for exp in exps:
        for claim in exp.claims:
            out[claim_rule(claim)] = out.get(claim_rule(claim), 0) + 1
    return out


# -- scrubbing: no absolute path and no NaN leaves this module ---------------------------------------------------

_ABS_PATH = re.compile(r"(?<![\w.:/~-])/(?:[\w.@+-]+/)+([\w.@+-]*)")


def scrub(text: str | None) -> str | None:
    """``text`` on one line with every absolute path cut to ``…/<file name>``: a summary is committed, and where a
    run happened to live (``/tmp/pytest-7/…``, a home directory) is neither stable nor anyone's business."""
    if text is None:
        return None
    return _ABS_PATH.sub(lambda m: f"…/{m.group(1)}", " ".join(str(text).split()))


def _num(x: float | None) -> float | None:
    """A finite number rounded to six significant digits (stable text, no float noise); NaN/inf -> ``None``."""
    if x is None or not math.isfinite(x):
        return None
    return float(f"{x:.6g}")


def _dropped(est: Estimate) -> int:
    """Undefined bootstrap replicates left out of the interval (``Estimate.dropped``; older estimates carry it in
    ``method`` as ``bootstrap(dropped=k)``)."""
    m = re.search(r"dropped=(\d+)", est.method)
    return max(int(getattr(est, "dropped", 0) or 0), int(m.group(1)) if m else 0)


def _reason(rec: RunRecord, claim: Claim, verdict: str, est: Estimate | None, observed: bool) -> str | None:
    """Why a claim got neither ``supported`` nor ``not_supported``: the record's own reason (``RunRecord.reasons``)
    when it has one, else what the record shows."""
    if verdict in ("supported", "not_supported"):
        return None
    own = (getattr(rec, "reasons", None) or {}).get(claim.id)
    if isinstance(own, str) and own.strip():
        return scrub(own)
    if claim.id not in rec.verdicts:
        return "the record has no verdict for this claim (the claim is newer than the run)"
    if verdict == "not_judged":
        if rec.profile == "smoke":
            return SMOKE_REASON
        if observed:
            return "this profile records the value but does not judge the claim"
        return missing_reason(rec)
    if est is None:
        return missing_reason(rec)
    if est.value != est.value:
        return "the statistic is undefined on this sample (NaN)"
    meets = est.value >= claim.threshold if claim.direction == ">=" else est.value <= claim.threshold
    if claim_rule(claim) == "two_part" and meets:
        return f"the value meets {claim.threshold:g} but the CI does not clear {claim.ci_bound:g}"
    return "the 95% CI reaches both sides of the threshold"


def claim_result(rec: RunRecord, claim: Claim) -> dict[str, Any]:
    """One claim of one ok record: value, interval, verdict, reason, threshold and rule (a summary's row)."""
    est = rec.metrics.get(claim.metric)
    observed = False
    if est is None and f"{claim.metric}_observed" in rec.metrics:
        est, observed = rec.metrics[f"{claim.metric}_observed"], True
    verdict = rec.verdicts.get(claim.id, "not_judged")
    return {
        "id": claim.id,
        "statement": claim.statement,
        "metric": claim.metric,
        "threshold": claim.threshold_text,
        "rule": claim_rule(claim),
        "value": _num(est.value) if est else None,
        "lo": _num(est.lo) if est else None,
        "hi": _num(est.hi) if est else None,
        "n": est.n if est else None,
        "dropped": _dropped(est) if est else None,
        "method": est.method if est else None,
        "observed_only": observed,
        "verdict": verdict,
        "reason": _reason(rec, claim, verdict, est, observed),
    }


def _cpu_of(rec: RunRecord) -> dict[str, Any]:
    """The CPU a record names (``environment['cpu']``, a name or ``{"model", "flags"}``), else this host's, said
    so: a summary is normally saved on the machine that ran it, right after the run."""
    cpu = rec.environment.get("cpu")
    if isinstance(cpu, dict) and isinstance(cpu.get("model"), str):
        flags = [f for f in CPU_FLAGS if f in (cpu.get("flags") or ())]
        return {"model": cpu["model"], "flags": flags, "source": "record"}
    if isinstance(cpu, str) and cpu.strip():
        return {"model": cpu, "flags": [], "source": "record"}
    return {**host_cpu(), "source": "host at save time"}


def summarize(rec: RunRecord, exp: Experiment) -> dict[str, Any]:
    """The result summary of ``rec`` (a record of ``exp``): the dict written to ``results/<profile>/<id>.json``."""
    ok = rec.status == "ok"
    variant = variant_of(rec, exp)
    return {
        "schema": SUMMARY_SCHEMA,
        "experiment_id": rec.experiment_id,
        **({"variant": variant} if variant else {}),
        "title": exp.title,
        "paper": paper_of(exp),
        "profile": rec.profile,
        "status": rec.status,
        "error": None if ok else scrub(rec.error),
        "model": scrub(model_label(rec)),
        "setup_hash": rec.setup_hash,
        "version": rec.version,
        "git_commit": rec.git_commit,
        "date": rec.started_at,
        "cpu": _cpu_of(rec),
        "cpus": rec.environment.get("cpus"),
        "wall_seconds": round(rec.wall_seconds, 1),
        "claims": [claim_result(rec, c) for c in exp.claims] if ok else [],
    }


def summary_text(summary: Mapping[str, Any]) -> str:
    """The file content of a summary: fixed key order, two-space indent, UTF-8 text (≥, ∈ stay readable)."""
    return json.dumps(summary, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def summary_path(results_dir: str | Path, profile: str, exp_id: str, variant: str | None = None) -> Path:
    return Path(results_dir) / profile / (f"{exp_id}@{variant}.json" if variant else f"{exp_id}.json")


def save_summaries(records: list[RunRecord], experiments: Mapping[str, Experiment],
                   results_dir: str | Path) -> list[Path]:
    """Write the summary of each record whose experiment is in ``experiments``; returns the paths written.

    Summaries of experiments without a record here are left alone: a partial run must not erase what an earlier
    complete run committed (each summary names its own commit and date)."""
    out = []
    for rec in records:
        exp = experiments.get(rec.experiment_id)
        if exp is None:
            continue
        summary = summarize(rec, exp)
        text = summary_text(summary)
        path = summary_path(results_dir, rec.profile, rec.experiment_id, summary.get("variant"))
        out.append(write_text_atomic(path, text))
    return out


class SummaryError(ValueError):
    """A file under ``results/`` that is not a result summary; the message names the file and what is wrong."""


def load_summaries(results_dir: str | Path, profile: str) -> dict[str, dict[str, Any]]:
    """Every summary of the registered model under ``results_dir/profile`` by experiment id (empty when the folder
    does not exist); model variants are :func:`load_variants`'.

    These files are committed and reviewed, so a malformed one is an error naming it (``SummaryError``), not a
    record to set aside quietly."""
    return {i: d for (i, v), d in _load_all(results_dir, profile).items() if v is None}


def load_variants(results_dir: str | Path, profile: str) -> dict[str, dict[str, dict[str, Any]]]:
    """The model-variant summaries under ``results_dir/profile``: experiment id -> variant -> summary."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for (i, v), d in _load_all(results_dir, profile).items():
        if v is not None:
            out.setdefault(i, {})[v] = d
    return out


def _load_all(results_dir: str | Path, profile: str) -> dict[tuple[str, str | None], dict[str, Any]]:
    folder = Path(results_dir) / profile
    out: dict[tuple[str, str | None], dict[str, Any]] = {}
    if not folder.is_dir():
        return out
    for path in sorted(folder.glob("*.json")):
        try:
            d = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise SummaryError(f"{path}: not a JSON result summary ({e})") from None
        if not isinstance(d, dict) or not isinstance(d.get("experiment_id"), str) \
                or not isinstance(d.get("claims"), list) or d.get("profile") != profile:
            raise SummaryError(f"{path}: not a result summary of profile {profile!r} "
                               f"(needs experiment_id, profile and claims)")
        if d.get("schema", 0) > SUMMARY_SCHEMA:
            raise SummaryError(f"{path}: schema {d.get('schema')} is newer than this agentmill reads")
        variant = d.get("variant")
        if variant is not None and not isinstance(variant, str):
            raise SummaryError(f"{path}: variant must be a string, not {variant!r}")
        expected = f"{d['experiment_id']}@{variant}" if variant else d["experiment_id"]
        if path.stem != expected:
            raise SummaryError(f"{path}: names experiment {expected!r}, not this file's {path.stem!r}")
        out[(d["experiment_id"], variant or None)] = d
    return out


def claim_entry(summary: Mapping[str, Any] | None, claim_id: str) -> dict[str, Any] | None:
    """The row of ``claim_id`` in ``summary`` (``None`` when there is no summary or it lacks the claim)."""
    if not summary:
        return None
    return next((c for c in summary.get("claims", ()) if isinstance(c, dict) and c.get("id") == claim_id), None)


def fmt_value(entry: Mapping[str, Any]) -> str:
    """``0.024 [0.001, 0.134]`` (3 significant digits, as ``Estimate.fmt``), ``0.5`` for an exact value, or ``—``."""
    value, lo, hi = entry.get("value"), entry.get("lo"), entry.get("hi")
    if value is None:
        return "—"
    if lo is None or hi is None or lo == hi or entry.get("method") == "exact":
        return f"{value:.3g}"
    return f"{value:.3g} [{lo:.3g}, {hi:.3g}]"


def counts(entries: list[Mapping[str, Any]]) -> dict[str, int]:
    """Claims per verdict of :data:`COUNTED` (every key present, zeros included)."""
    out = dict.fromkeys(COUNTED, 0)
    for e in entries:
        if e.get("verdict") in out:
            out[e["verdict"]] += 1
    return out
