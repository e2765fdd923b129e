"""E166 negative controls NC-R1…R3: when "beats the best single worker" is built into the task mix.

NC-R1 *shuffled rows*: the training outcome rows (Y and latency together) are permuted across training queries, so
features carry no information about who is right; the router must then do no better than the best single worker
(+1 point). NC-R2 *no complementarity*: train, validation and test are restricted to queries where the best single
worker (chosen on validation) is row-wise at least as good as every other worker; the router must stay within ±2
points of it (TOST at α = 0.05 ⇔ the 90 % paired interval inside ±0.02); its traffic share is reported — collapse
is correct here. NC-R3: the random router and the oracle, printed with every run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate, paired_diff, tost
from agentmill.experiments.e166_router import PAPER
from agentmill.experiments.e166_router.outcomes import load_pool, table_reads
from agentmill.experiments.protocol import Claim, Experiment, RunContext
from agentmill.methods.router import Router, RouterConfig
from agentmill.methods.router import baselines as B
from agentmill.methods.router import metrics as M

SRC = "docs/methods/router.md (Claims, Pitfalls C1) [R]; OpenFugu mock vs GSM8K tie [S]"


@dataclass(frozen=True)
class Setup:
    table: str = "shipped"
    """``shipped``, ``standin`` (smoke) or a path."""
    es_generations: int = 20
    """sep-CMA-ES generations."""
    seed: int = 0
    """ES and permutation seed."""


SETUPS = {"smoke": Setup(table="standin", es_generations=3), "quick": Setup(), "full": Setup(es_generations=60)}

CLAIMS = (
    Claim("NC-R1", "With outcome rows shuffled across training queries the router is no better than the best "
          "single worker (+1 point)", SRC, "—", "shuffled_minus_best", "<=", 0.01),
    Claim("NC-R2", "Without complementarity the router is equivalent to the best single worker (±2 points, TOST)",
          SRC, "OpenFugu GSM8K tie [S]", "nocomp_minus_best", "in", -0.02, upper=0.02),
)


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    pool = load_pool(s.table)
    if isinstance(pool, str):
        ctx.data["precondition"] = pool
        return {}
    ctx.data["precondition"] = "met"
    W, m = pool.workers, len(pool.workers)
    Yt, Xt = pool.Y["test"], pool.X["test"]
    best = B.best_single(pool.Y["val"])
    cfg = RouterConfig(es_generations=s.es_generations, seed=s.seed)

    # NC-R1: shuffled rows
    perm = np.random.default_rng(s.seed).permutation(pool.Y["train"].shape[0])
    r1 = Router(cfg, W)
    r1.fit_arrays(pool.X["train"], pool.Y["train"][perm], pool.L["train"][perm], pool.X["val"], pool.Y["val"],
                  pool.L["val"])
    ch1 = r1.route_features(Xt)
    out = {"shuffled_minus_best": paired_diff(M.per_query(ch1, Yt), Yt[:, best], stat="diff", n_boot=10_000,
                                              seed=s.seed)}

    # NC-R2: no complementarity (every split restricted)
    def keep(Y: np.ndarray) -> np.ndarray:
        return np.all(Y[:, [best]] >= Y, axis=1)

    k = {sp: keep(pool.Y[sp]) for sp in ("train", "val", "test")}
    r2 = Router(cfg, W)
    r2.fit_arrays(pool.X["train"][k["train"]], pool.Y["train"][k["train"]], pool.L["train"][k["train"]],
                  pool.X["val"][k["val"]], pool.Y["val"][k["val"]], pool.L["val"][k["val"]])
    Yk = Yt[k["test"]]
    ch2 = r2.route_features(Xt[k["test"]])
    a, b = M.per_query(ch2, Yk), Yk[:, best]
    out["nocomp_minus_best"] = paired_diff(a, b, stat="diff", n_boot=10_000, level=0.90, seed=s.seed)
    t = tost(a, b, margin=0.02)
    rnd = B.random_route(len(Yt), m, seed=s.seed)
    ctx.data.update({
        "workers": W, "best_single_val": W[best],
        "shuffled": {"acc": M.accuracy(ch1, Yt), "best_acc": float(Yt[:, best].mean()),
                     "shares": dict(zip(W, M.shares(ch1, m).round(4).tolist()))},
        "nocomp": {"n_train": int(k["train"].sum()), "n_test": int(k["test"].sum()), "acc": float(a.mean()),
                   "best_acc": float(b.mean()), "best_share": float((ch2 == best).mean()),
                   "tost_p": [t.p_lower, t.p_upper]},
        "random": {"acc": M.accuracy(rnd, Yt)}, "oracle": {"acc": float(M.oracle(Yt).mean())},
    })
    return out


def plots(data: dict[str, Any], out_dir: Path) -> list[Path]:
    return []


EXPERIMENT = Experiment(
    id="e166.controls",
    title="E166 NC-R1…R3: shuffled outcomes, no complementarity, random and oracle",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    reads=table_reads,
    requires=frozenset({"router"}),
    parallel_safe=True,
    quick_budget_s=20,
    scale_note="Controls on the replayed RouteTasks table (SmolLM2-135M + 5 solvers), ngram features, λ = 0, "
               "w_div = 0 [R].",
)
