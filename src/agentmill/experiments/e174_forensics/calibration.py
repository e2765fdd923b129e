"""E174 FO-3, A/A and NC-F4: the protocol's false-positive rate is controlled.

FO-3: 200 null variables (they render a line of text the planted agent never reads; base rate p0 = 0.3), each
tested as its own pre-registered, frozen hypothesis "setting it on changes the concerning rate" (two-sided) with the
working positive control (the shortcut locked), 40 episodes per arm, Fisher at α = 0.05. Pre-registered: at most
15 of 200 come out ``supported`` (whole Wilson CI of the share ≤ 0.075).
A/A: 40 investigations of five arms identical to the control, Holm within each: none ever ``supported``.
NC-F4: the episodes' arm labels permuted within 40 investigations (six envs, planted agents): no hypothesis
``supported`` in ≥ 95 % of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentmill.core.stats import Estimate, proportion_estimate
from agentmill.experiments.e174_forensics import PAPER, drop_scratch, scratch_registry, stamp_prereg
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, Experiment, RunContext


@dataclass(frozen=True)
class Setup:
    n_null: int = 200
    """Null variables, one investigation each (200)."""
    n_per_arm: int = 40
    """Episodes per arm (40)."""
    p0: float = 0.3
    """Base rate of the concerning action (0.3)."""
    n_aa: int = 40
    """A/A investigations (five identical arms each, Holm within)."""
    n_shuffles: int = 40
    """Investigations judged with permuted arm labels (NC-F4)."""
    seed: int = 0


SETUPS = {"smoke": Setup(n_null=6, n_aa=3, n_shuffles=2), "quick": Setup(), "full": Setup()}

CLAIMS = (
    Claim("FO-3", "The false-positive rate is controlled: ≤ 15 of 200 null variables come out supported (whole "
          "Wilson CI of the share ≤ 0.075); planted constant-rate agent.", "[R] protocol formalisation", "—",
          "null_supported_share", "<=", 0.075),
    Claim("FO-3-AA", "A/A arms are never supported after Holm (count over 40 investigations).", "[R]", "—",
          "aa_supported_count", "<=", 0.0, judge_on="exact",
          exact_why="'never' is a statement about every investigation of this fixed seeded battery, so the count "
                    "itself is the test"),
    Claim("NC-F4", "With arm labels shuffled, no hypothesis is supported in ≥ 95% of 40 investigations.", "[R]",
          "—", "ncf4_none_supported_share", ">=", 0.95, judge_on="exact",
          exact_why="the pre-registered statement is about this fixed seeded battery of 40 shuffles, not a "
                    "population rate"),
)


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    from agentmill.core.stats import holm
    from agentmill.methods.forensics import Hypothesis, PlantedAgent, investigate
    from agentmill.methods.forensics.hypotheses import Prediction
    from agentmill.methods.forensics.envs import ENVS, null_env
    from agentmill.methods.forensics.investigate import run_arm, run_hypotheses
    from agentmill.methods.forensics.verdicts import PredictionResult, compare, judge

    stamp_prereg(ctx.data)
    registry = scratch_registry(ctx, "calibration")
    env = null_env(s.n_null, s.p0)
    agent = PlantedAgent(env, "constant")
    control = env.values()
    null_verdicts, null_p = [], []
    for i in range(s.n_null):
        h = Hypothesis(f"H_null_{i}", f"null_{i} changes the rate", "unknown", "unknown", (f"null_{i}",),
                       (Prediction(f"null_{i}", True, 0, 0.2),), env.positive_control)
        vs, _, _ = run_hypotheses(env, agent, registry, [h], control, p0=s.p0, budget=3 * s.n_per_arm,
                                  seed=s.seed, tag=f"null{i}", n_per_arm=s.n_per_arm)
        null_verdicts.append(vs[0].verdict)
        null_p.append(vs[0].predictions[0].p)
        ctx.progress("FO-3 null variables", i + 1, s.n_null)
    n_sup = sum(v == "supported" for v in null_verdicts)
    # A/A: five arms identical to the control, plus the positive control, Holm within each investigation
    aa_sup = 0
    for j in range(s.n_aa):
        k0, n0 = run_arm(env, control, agent, n=s.n_per_arm, seed=s.seed, key=f"aa{j}/control")
        kp, npc = run_arm(env, {**control, "opportunity": False}, agent, n=s.n_per_arm, seed=s.seed, key=f"aa{j}/pc")
        pc = compare("pc", kp, npc, k0, n0)
        res = []
        for a in range(5):
            k, n = run_arm(env, control, agent, n=s.n_per_arm, seed=s.seed, key=f"aa{j}/arm{a}")
            t = compare(f"aa{a}", k, n, k0, n0)
            res.append(PredictionResult("null_0", True, 0, 0.2, t.diff, t.p))
        for r, adj in zip(res, holm([r.p for r in res])):
            r.p_holm = adj
        for a, r in enumerate(res):
            h = Hypothesis(f"H_aa_{a}", "A/A", "unknown", "unknown", ("null_0",), (Prediction("null_0", True, 0),),
                           env.positive_control)
            aa_sup += judge(h, [r], pc, alpha=0.05, delta_pc=0.2).verdict == "supported"
    ctx.progress("A/A", 1, 1)
    # NC-F4: shuffled arm labels over the six envs' planted agents
    pairs = [(e, p) for e in ENVS.values() for p in e.policies]
    shuffled = []
    for j in range(s.n_shuffles):
        e, pol = pairs[j % len(pairs)]
        inv = investigate(e, PlantedAgent(e, pol), registry, seed=s.seed + j, tag=f"shuffle{j}", shuffle_arms=True)
        shuffled.append({"env": e.name, "policy": pol, "verdicts": [v.verdict for v in inv.verdicts]})
        ctx.progress("NC-F4 shuffles", j + 1, s.n_shuffles)
    none_sup = sum("supported" not in r["verdicts"] for r in shuffled)
    registry.verify_chain()
    ctx.data.update({"null_verdicts": null_verdicts, "null_p": null_p, "aa_supported": aa_sup,
                     "shuffled": shuffled, "registry_head": registry.ledger.head,
                     "registry_events": len(registry.ledger.events)})
    drop_scratch(ctx)
    return {"null_supported_share": proportion_estimate(n_sup, s.n_null),
            "aa_supported_count": Estimate.exact(aa_sup, n=5 * s.n_aa),
            "ncf4_none_supported_share": Estimate.exact(none_sup / s.n_shuffles, n=s.n_shuffles),
            "null_refuted_share": proportion_estimate(sum(v == "refuted" for v in null_verdicts), s.n_null)}


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 3.5))
    ax.hist(data["null_p"], bins=20, range=(0, 1), color="tab:blue")
    ax.axvline(0.05, color="k", ls=":", lw=1)
    ax.set_xlabel("Fisher p, null variable vs control (before Holm)")
    ax.set_ylabel("null variables")
    ax.set_title("FO-3: p-values of 200 null variables")
    fig.tight_layout()
    p = out / "fo3_null_pvalues.png"
    save(fig, p)
    return [p]


EXPERIMENT = Experiment(
    id="e174.forensics_calibration",
    title="E174 FO-3: the protocol's false-positive rate is controlled (null variables, A/A arms, shuffled labels)",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    parallel_safe=True,
    quick_budget_s=20,
    scale_note="LLM-free: a planted agent with a constant rate and 200 null variables it never reads (40 episodes "
               "per arm); every hypothesis is registered and frozen in a hash-chained registry before its arms run.",
)
