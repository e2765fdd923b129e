"""E178 RQ-8: the search runs with a language-model judge (no threshold on its quality).

ReviewWorld documents are rendered to text (``envs.review_world.render_documents``: sound vs flawed claims by
observed quality, confident adjectives by polish, a machine-style phrase, filler by length). The judge is an LM read
only through logp(" ACCEPT") − logp(" REJECT") after a rubric; its threshold is the median margin on 16 train
documents. Challengers are LLM-free rubric edits (one sentence added or dropped from a fixed phrase library).
Anchor: 60 rendered decision documents; budget 128 evaluations, K = 2 rubric edits per checkpoint, McNemar at α/K.
Reported: incumbent and final judge accuracy on the 100 holdout documents (Wilson CIs), acceptance of 50 human and
50 quality-matched machine probe documents, the items the LM scored. A 135M judge may sit near chance: no threshold. Full profile: ``hf:smollm2``; smoke and quick run
the same code with ``scripted:whitebox`` (a pipeline check).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.seeding import derive_seed
from agentmill.core.stats import Estimate, proportion_estimate
from agentmill.experiments.e178_red_queen import PAPER
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, Experiment, RunContext, models_read


@dataclass(frozen=True)
class Setup:
    judge_model: str = "hf:smollm2"
    budget: int = 128
    n_anchor: int = 60
    n_challengers: int = 4
    n_probe: int = 200
    """Human and machine probe documents each (matched quality) for R(J)."""
    n_holdout: int = 100
    n_calib: int = 16
    """Train documents whose median margin sets each judge's threshold."""
    seed: int = 0


_FAKE = dict(judge_model="scripted:whitebox", budget=8, n_anchor=20, n_challengers=1, n_probe=10, n_holdout=20,
             n_calib=6)
# full [R]: K = 2 rubric edits per checkpoint (not 4) and 50 + 50 probe documents per judge keep the SmolLM2 run near
# 1,200 judged items (~10 min at ~0.5 s per item on 2 idle cores); budget and anchor as planned (128, 60)
SETUPS = {"smoke": Setup(**_FAKE), "quick": Setup(**_FAKE), "full": Setup(n_challengers=2, n_probe=50, n_calib=8)}

CLAIMS = (
    Claim("RQ-8", "The search runs end to end with an LM judge (rubric + ACCEPT/REJECT margin) and LLM-free rubric "
          "edits; holdout accuracies are reported, with no threshold on them.", "[R] (the paper's judges are LLMs "
          "[A])", "—", "rq8_completed", ">=", 1.0, judge_on="exact",
          exact_why="whether one deterministic run finished with its ledger intact (1) or not (0)"),
)


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    from agentmill.envs.review_world import ReviewWorld
    from agentmill.methods.red_queen import RedQueenConfig, RedQueenSearch
    from agentmill.methods.red_queen.challengers import LMRubricSlot
    from agentmill.methods.red_queen.review import failing_checks, world_checks
    from agentmill.methods.red_queen.writers import ReviewWorkspace

    from agentmill.envs.review_world import WorldConstants

    ctx.data["world_constants"] = WorldConstants().to_dict()
    checks = world_checks(s.seed)
    ctx.data["world_checks"] = checks
    if failing_checks(checks):
        ctx.data["precondition"] = f"precondition not met: world checks fail: {failing_checks(checks)}"
        return {}
    if s.judge_model == "scripted:whitebox":  # the character-level fake needs a longer context for a rubric + paper
        from agentmill.lm.scripted import ScriptedWhiteBoxLM

        lm = ScriptedWhiteBoxLM(max_positions=4096)
    else:
        lm = ctx.load_lm(s.judge_model)
    world = ReviewWorld("review", s.seed)
    t0 = time.perf_counter()
    slot = LMRubricSlot(world, lm, n_anchor=s.n_anchor, n_challengers=s.n_challengers, n_calib=s.n_calib)
    cfg = RedQueenConfig(budget=s.budget, seed=s.seed, n_challengers=s.n_challengers, trap="off",
                         min_anchor_outcomes=min(50, s.n_anchor))
    ledger_dir = ctx.work_dir / f"ledger_{derive_seed(*sorted(dataclasses.asdict(s).items())):x}"
    search = RedQueenSearch(ReviewWorkspace(world), {0: slot}, cfg, ledger_dir,
                            describe={"world": "review", "world_seed": s.seed, "judge_model": s.judge_model})
    res = search.run()
    wall = time.perf_counter() - t0
    problems = search.log.ledger.verify() if search.log.ledger is not None else []
    inc, fin = slot.incumbent(), search.judges[0]
    hold = world.splits.holdout.take(np.arange(s.n_holdout))
    yo = world.oracle_labels(hold)
    out: dict[str, Estimate] = {"rq8_completed": Estimate.exact(float(res.n_evals == s.budget and not problems))}
    stats = {}
    for name, j in (("incumbent", inc), ("final", fin)):
        ok = int((j.accept(hold).astype(int) == yo).sum())
        out[f"rq8_{name}_holdout_acc"] = proportion_estimate(ok, len(yo))
        hp = world.probe_human.take(np.arange(s.n_probe))
        mp = world.probe_machine.take(np.linspace(0, len(world.probe_machine) - 1, s.n_probe).astype(int))
        ah, am = j.accept(hp).mean(), j.accept(mp).mean()
        stats[name] = {"judge": j.judge_id, "rubric": j.rubric, "threshold": j.threshold, "accept_human": float(ah),
                       "accept_machine": float(am), "raw_probe_ratio": float(am / ah) if ah > 0 else float("nan")}
    items = slot.items_scored()
    ctx.data.update({"judges": stats, "replacements": [{k: v for k, v in r.items() if k != "judge"}
                                                       for r in res.replacements],
                     "checkpoints": res.checkpoint_log, "lm_items_scored": items, "wall_s": wall,
                     "best_writer": res.best_state, "model": s.judge_model})
    out["rq8_lm_items"] = Estimate.exact(float(items))
    out["rq8_replacements"] = Estimate.exact(float(len(res.replacements)))
    return out


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    plt = pyplot()
    js = data.get("judges", {})
    if not js:
        return []
    fig, ax = plt.subplots(figsize=(4.5, 3.2))
    names = list(js)
    x = np.arange(len(names))
    ax.bar(x - 0.2, [js[n]["accept_human"] for n in names], 0.4, label="human")
    ax.bar(x + 0.2, [js[n]["accept_machine"] for n in names], 0.4, label="machine (matched q)")
    ax.set_xticks(x, names)
    ax.set_ylabel("acceptance rate on the probe")
    ax.set_title(f"LM judge ({data.get('model')})", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    p = out / "rq8_lm_judge.png"
    save(fig, p)
    return [p]


EXPERIMENT = Experiment(
    id="e178.lm_judge",
    title="E178 Red Queen: the search with a language-model judge (SmolLM2 at full)",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    requires=frozenset({"hf"}),
    quick_budget_s=15,
    quick_check="quick runs the pipeline with scripted:whitebox (a fake LM); RQ-8 runs hf:smollm2 at full",
    reads=models_read("judge_model"),
    parallel_safe=False,
    scale_note="a 128-evaluation search, 60 anchor documents, K = 2 rubric edits per checkpoint; the embedded "
               "SmolLM2-135M as judge (full); text rendered from ReviewWorld's features by templates.",
)
