"""E166 RT-8: composing workflows solves what no single worker can.

Three workflow templates of the LLM-free ``TemplateComposer`` join the pool as pseudo-workers, so one head chooses
between single workers and workflows (Conductor-style [A][S]): ``numnorm→arith`` (number words → digits → the
arithmetic solver), ``decompose→lookup,lookup→arith`` (two fact lookups combined), and ``vote(smollm2, arith,
lookup)``. Their cells are computed here from the solvers and the recorded SmolLM2 answers (replayed), with
intra-workflow isolation on. The decomposers encode the composite templates by hand (pitfall C13): this shows the
machinery, not learned composition; the LM composer (untrained) runs only when an endpoint is given.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate, paired_diff
from agentmill.experiments.e166_router import PAPER
from agentmill.experiments.e166_router.outcomes import load_pool, table_reads
from agentmill.experiments.protocol import Claim, Experiment, RunContext
from agentmill.methods.router import Router, RouterConfig
from agentmill.methods.router import metrics as M

SRC = "docs/methods/router.md (Claims); Conductor arXiv:2512.04388 [A]"
COMPOSITE = ("arith_words", "facts_compose")


@dataclass(frozen=True)
class Setup:
    table: str = "shipped"
    """``shipped``, ``standin`` (smoke) or a path."""
    es_generations: int = 20
    """sep-CMA-ES generations of both routers."""
    seed: int = 0
    """ES seed."""


SETUPS = {"smoke": Setup(table="standin", es_generations=3), "quick": Setup(), "full": Setup(es_generations=60)}

CLAIMS = (
    Claim("RT-8a", "On the composite slice (arith_words + facts_compose) the workflow router beats the fast router "
          "by ≥ 10 points", SRC, "Fugu-Ultra/Conductor beats every worker [A]", "composite_gain", ">=", 0.10),
    Claim("RT-8b", "Overall it stays within 1 point of the fast router", SRC, "—", "overall_gain", ">=", -0.01),
)


class _Replay:
    """A worker answering from the table's recorded cells (the SmolLM2 step of the vote workflow)."""

    def __init__(self, worker: str, table: Any, by_text: dict[str, str]) -> None:
        self.worker_id, self.table, self.by_text = worker, table, by_text
        self.fingerprint = table.fingerprint(worker) or worker

    def answer(self, query: str, context: Any = ()) -> Any:
        from agentmill.methods.router.workers import WorkerResult
        qid = self.by_text.get(query)
        if qid is None:
            return WorkerResult(None, 0.0, 0.0, query)
        c = self.table.cells(qid, self.worker_id)[0]
        return WorkerResult(c.answer, c.cost, c.latency, query)


def workflow_rows(tasks: Any, table: Any, lm_worker: str) -> tuple[list[dict], list[str]]:
    from agentmill.envs.route_tasks import verify
    from agentmill.methods.router.workers import HELPERS, SOLVERS, make_worker
    from agentmill.methods.router.workflow import TemplateComposer, run_workflow, vote_template
    comp = TemplateComposer(lm_worker)
    workers = {f"solver:{n}": make_worker(f"solver:{n}") for n in [*SOLVERS, *HELPERS]}
    workers[lm_worker] = _Replay(lm_worker, table, {q.text: q.qid for q in tasks.queries})
    names = comp.names()
    assert vote_template(lm_worker).name in names
    rows = []
    for name in names:
        wf = comp.compose(name)
        for q in tasks.queries:
            r = run_workflow(wf, q.text, workers, isolation=True)
            rows.append({"query_id": q.qid, "worker": name, "answer": r.answer, "score": verify(q, r.answer),
                         "cost": r.cost, "latency": r.latency})
    return rows, names


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    pool = load_pool(s.table, extra=workflow_rows)
    if isinstance(pool, str):
        ctx.data["precondition"] = pool
        return {}
    ctx.data["precondition"] = "met"
    W = pool.workers
    single = [i for i, w in enumerate(W) if not w.startswith("wf:")]
    cfg = RouterConfig(es_generations=s.es_generations, seed=s.seed)
    fast = Router(cfg, [W[i] for i in single])
    fast.fit_arrays(pool.X["train"], pool.Y["train"][:, single], pool.L["train"][:, single], pool.X["val"],
                    pool.Y["val"][:, single], pool.L["val"][:, single])
    wfr = Router(RouterConfig(es_generations=s.es_generations, seed=s.seed, include_workflows=True), W)
    wfr.fit_arrays(pool.X["train"], pool.Y["train"], pool.L["train"], pool.X["val"], pool.Y["val"], pool.L["val"])
    Yt, Xt = pool.Y["test"], pool.X["test"]
    f_q = M.per_query(fast.route_features(Xt), Yt[:, single])
    ch = wfr.route_features(Xt)
    w_q = M.per_query(ch, Yt)
    comp = np.array([q.rsplit("-", 2)[0] in COMPOSITE for q in pool.ids["test"]])
    out = {"composite_gain": paired_diff(w_q[comp], f_q[comp], stat="diff", n_boot=10_000, seed=s.seed),
           "overall_gain": paired_diff(w_q, f_q, stat="diff", n_boot=10_000, seed=s.seed)}
    ctx.data.update({
        "workers": W, "n_composite_test": int(comp.sum()),
        "fast": {"acc": float(f_q.mean()), "composite_acc": float(f_q[comp].mean())},
        "workflow_router": {"acc": float(w_q.mean()), "composite_acc": float(w_q[comp].mean()),
                            "shares": dict(zip(W, M.shares(ch, len(W)).round(4).tolist()))},
        "singles_composite": {w: float(Yt[comp, i].mean()) for i, w in enumerate(W)},
        "oracle": {"single_workers": float(Yt[:, single].max(1).mean()), "with_workflows": float(Yt.max(1).mean())},
        "lm_composer": "not run (needs an openai: endpoint; untrained)",
    })
    return out


def plots(data: dict[str, Any], out_dir: Path) -> list[Path]:
    from agentmill.experiments.plotting import pyplot, save
    if "fast" not in data:
        return []
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.2))
    labels = ["fast", "workflow router"]
    ax.bar(np.arange(2) - 0.2, [data["fast"]["composite_acc"], data["workflow_router"]["composite_acc"]], 0.4,
           label="composite slice")
    ax.bar(np.arange(2) + 0.2, [data["fast"]["acc"], data["workflow_router"]["acc"]], 0.4, label="all test")
    ax.set_xticks(range(2), labels)
    ax.set_ylabel("test accuracy")
    ax.set_title("E166 RT-8: workflows as pseudo-workers")
    ax.legend(fontsize=8)
    return [save(fig, Path(out_dir) / "e166_router_workflow.png")]


EXPERIMENT = Experiment(
    id="e166.workflow",
    title="E166 RT-8: a head choosing between single workers and workflow templates",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    reads=table_reads,
    requires=frozenset({"router"}),
    parallel_safe=True,
    quick_budget_s=25,
    scale_note="LLM-free TemplateComposer with hand-written decomposers (pitfall C13) over the replayed SmolLM2 "
               "table and solvers; Fugu-Ultra's 7B GRPO-trained Conductor writes workflows over frontier models. "
               "The LM composer is untrained and runs only against an endpoint.",
)
