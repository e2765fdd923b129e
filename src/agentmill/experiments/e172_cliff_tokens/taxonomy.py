"""E172 CT-4: the taxonomy recovers the planted mechanism (oracle).

Detected cliffs that sit on planted SO (UC) error tokens must be typed SO (UC) by greedy rank and full-vocabulary
entropy of the rollout policy; planted DF error tokens must almost never be flagged (their true drop is ≤ 0.005 by
construction). The paper's top-20 partial entropy on the raw distribution is reported beside (identical here: the
oracle's support has at most two tokens and T = 1)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentmill.core.stats import Estimate, clopper_pearson
from agentmill.experiments.e172_cliff_tokens import PAPER
from agentmill.experiments.protocol import Claim, Experiment, RunContext


@dataclass(frozen=True)
class Setup:
    traces: int = 5000
    """Oracle traces scanned (the CT-3 scans, read from the scan cache)."""
    n: int = 64
    """Continuations per potential."""
    seed: int = 0


SETUPS = {"smoke": Setup(traces=60), "quick": Setup(traces=1000), "full": Setup(traces=5000)}

CLAIMS = (
    Claim("E172-CT4-SO", "Cliffs on planted SO error tokens are typed SO (full entropy, policy distribution).",
          "[P] taxonomy; [R] planted", "qualitative", "ct4_so_typed_so", ">=", 0.90, ci_bound=0.0),
    Claim("E172-CT4-UC", "Cliffs on planted UC error tokens are typed UC.", "[P] taxonomy; [R] planted",
          "qualitative", "ct4_uc_typed_uc", ">=", 0.90, ci_bound=0.0),
    Claim("E172-CT4-DF", "Planted DF error tokens are (almost) never flagged as cliffs (share flagged).",
          "[D] DF bound", "—", "ct4_df_flagged", "<=", 0.02),
)


def taxonomy_counts(recs: list[dict[str, Any]]) -> dict[str, Any]:
    c = {"SO": [0, 0], "UC": [0, 0], "DF_erred": 0, "DF_flagged": 0, "agree": 0, "cliffs": 0}
    for r in recs:
        at = {cl["pos"]: (ty, t20) for cl, ty, t20 in zip(r["cliffs"], r["types"], r["types_top20"])}
        c["cliffs"] += len(at)
        c["agree"] += sum(ty == t20 for ty, t20 in at.values())
        for st in r["sites"]:
            if not st["erred"]:
                continue
            pos = st["pos"] + 1
            if st["kind"] in ("SO", "UC") and pos in at:
                c[st["kind"]][1] += 1
                c[st["kind"]][0] += at[pos][0] == st["kind"]
            if st["kind"] == "DF":
                c["DF_erred"] += 1
                c["DF_flagged"] += pos in at
    return c


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    from agentmill.experiments.e172_cliff_tokens.scans import oracle_scans

    recs, secs = oracle_scans(s.traces, s.n, s.seed, progress=lambda i, n: ctx.progress("oracle scans", i, n))
    c = taxonomy_counts(recs)
    ctx.data.update({"counts": c, "scan_seconds": secs, "substrate": "chainadd oracle (exact planted policy)"})
    out = {"ct4_so_typed_so": clopper_pearson(*c["SO"]), "ct4_uc_typed_uc": clopper_pearson(*c["UC"]),
           "ct4_df_flagged": clopper_pearson(c["DF_flagged"], c["DF_erred"])}
    if c["cliffs"]:
        out["ct4_top20_raw_agreement"] = clopper_pearson(c["agree"], c["cliffs"])
    return out


EXPERIMENT = Experiment(
    id="e172.cliff_taxonomy",
    title="E172 CT-4: the cliff taxonomy recovers the planted mechanism (oracle)",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    scale_note="planted oracle (DF p_err 0.995, UC 0.6, SO 0.15 carry drops); full-vocabulary entropy of the T = 1 "
               "policy; reuses CT-3's scans.",
    parallel_safe=True,
    quick_budget_s=3,
)
