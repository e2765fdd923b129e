"""E172 CT-3: cliffs locate the token where the trace fails (planted oracle).

Oracle traces are scanned at n = 64 (every position 0..T−1) and cliffs detected with the paper's test. Recall: of
the planted SO/UC error tokens the trace actually emitted with exact V_{t−1} ≥ 0.3, the share flagged as cliffs.
First-cliff precision: of the failing traces with at least one cliff, the share whose first cliff is the first
planted error token. Thresholds are the oracle's (the tiny-model half is not built: method README, deviation 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentmill.core.stats import Estimate, clopper_pearson
from agentmill.experiments.e172_cliff_tokens import PAPER
from agentmill.experiments.protocol import Claim, Experiment, RunContext


@dataclass(frozen=True)
class Setup:
    traces: int = 5000
    """Oracle traces scanned (shared with CT-4, CT-5, CT-6 through the scan cache)."""
    n: int = 64
    """Continuations per potential."""
    seed: int = 0


SETUPS = {"smoke": Setup(traces=60), "quick": Setup(traces=1000), "full": Setup(traces=5000)}

CLAIMS = (
    Claim("E172-CT3-recall", "Cliffs find the planted error tokens: recall of emitted SO/UC error tokens with "
          "V_{t-1} ≥ 0.3 (oracle).", "[P] cliffs locate failures; [R] planted task", "qualitative",
          "ct3_recall", ">=", 0.99, ci_bound=0.0),
    Claim("E172-CT3-precision", "On failing traces the first cliff is the first planted error token (oracle).",
          "[P]; [R] planted task", "qualitative", "ct3_first_cliff_precision", ">=", 0.95, ci_bound=0.0),
)


def localization_counts(recs: list[dict[str, Any]]) -> dict[str, int]:
    from agentmill.experiments.e172_cliff_tokens.scans import first_error_site

    qual = hit = fail_with = first_ok = 0
    for r in recs:
        cpos = {c["pos"] for c in r["cliffs"]}
        for st in r["sites"]:
            if st["erred"] and st["kind"] in ("SO", "UC") and r["exact_v"][st["pos"]] >= 0.3:
                qual += 1
                hit += (st["pos"] + 1) in cpos
        if not r["correct"] and r["cliffs"]:
            fail_with += 1
            fe = first_error_site(r)
            first_ok += fe is not None and min(cpos) == fe["pos"] + 1
    return {"qualifying": qual, "recalled": hit, "failing_with_cliff": fail_with, "first_cliff_correct": first_ok,
            "failing": sum(not r["correct"] for r in recs), "traces": len(recs)}


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    from agentmill.experiments.e172_cliff_tokens.scans import oracle_scans

    recs, secs = oracle_scans(s.traces, s.n, s.seed, progress=lambda i, n: ctx.progress("oracle scans", i, n))
    c = localization_counts(recs)
    ctx.data.update({"counts": c, "scan_seconds": secs, "substrate": "chainadd oracle (exact planted policy)",
                     "examples": [r for r in recs if r["cliffs"] and not r["correct"]][:6]})
    return {"ct3_recall": clopper_pearson(c["recalled"], c["qualifying"]),
            "ct3_first_cliff_precision": clopper_pearson(c["first_cliff_correct"], c["failing_with_cliff"])}


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    from agentmill.experiments.e172_cliff_tokens.scans import plot_potentials

    return [plot_potentials(data["examples"], out, "ct3_potentials.png")]


EXPERIMENT = Experiment(
    id="e172.cliff_localization",
    title="E172 CT-3: cliffs locate the planted error token (oracle)",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    scale_note="designed error mechanisms (carry drops) in an exact numpy oracle of 3-operand chained addition vs "
               "seven instruction-tuned LLMs on GSM1K/MATH500/AIME; checks the detector, not that real models fail "
               "this way.",
    parallel_safe=True,
    quick_budget_s=12,
)
