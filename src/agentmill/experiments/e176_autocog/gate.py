"""E176 AC-3, AC-4 (NC-3): the discrimination gate is calibrated and accepted designs are decisive (the gate is the
repository's ``AutoCog.propose_round`` [C]; thresholds [R], docs/methods/autocog.md, Claims and verdicts).

AC-3: a theory against itself (two independent 50-subject simulations, every SearchAdvocate template, Welch test at
N = 25, α = .01) is rarely accepted (expected ≈ 0.02%: t* ~ N(0, 0.5)); TTB vs WADD on a design of 8
top-cue-vs-majority conflict pairs is accepted almost always.
AC-4: for designs the gate accepts (min-p template over random designs, all ordered pairs of {TTB, Tallying, WADD,
dial γ=3}), a fresh 25-subject sample from theory A lands nearer μ_A than μ_B.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.seeding import derive_seed, rng_for
from agentmill.core.stats import Estimate, proportion_estimate
from agentmill.experiments.e176_autocog import PAPER
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, Experiment, RunContext



@dataclass(frozen=True)
class Setup:
    seeds: int = 50
    """Replications per theory for AC-3 (50 quick / 500 full [R])."""
    n_accepted: int = 100
    """Accepted designs collected for AC-4 (100 quick / 1,000 full [R])."""
    n_sim: int = 50
    """Simulated subjects per theory (n_runs = 50 [C])."""
    n_real: int = 25
    """Sample size the gate assumes (REAL_N_SUBJECTS = 25 [C])."""
    alpha: float = 0.01
    """Gate level (function default [C])."""
    seed: int = 0


SETUPS = {"smoke": Setup(seeds=3, n_accepted=6), "quick": Setup(), "full": Setup(seeds=500, n_accepted=1000)}

CLAIMS = (
    Claim("E176-AC3-false", "The gate rarely admits a theory against itself (false-accept rate over all "
          "templates, 5 library theories).", "[I] self-vs-self rarely passes (expected ≈ 0.02%)", "≈ 0.0002",
          "ac3_false_accept", "<=", 0.01),
    Claim("E176-AC3-power", "The gate admits TTB vs WADD on a design of 8 top-cue-vs-majority conflict pairs.",
          "[R] threshold pre-registered", "—", "ac3_accept_ttb_wadd", ">=", 0.95),
    Claim("E176-AC4", "Accepted designs are decisive: a fresh 25-subject sample from theory A lands nearer μ_A "
          "than μ_B.", "[I] derivation gives ≥ 0.91; threshold [R]", "—", "ac4_decisive", ">=", 0.85),
)


def conflict_design():
    from agentmill.methods.autocog.design import Design
    from agentmill.methods.autocog.library import tally_delta, ttb_delta, wadd_delta

    v = (0.9, 0.8, 0.7, 0.6)
    ctx = {"validities": np.asarray(v), "n_features": 4, "rating_max": 1}
    vecs = list(itertools.product((0, 1), repeat=4))
    pa, pb = [], []
    for a, b in itertools.product(vecs, vecs):
        A, B = np.array([[a]], float), np.array([[b]], float)
        top, maj, w = (float(np.sign(f({}, A, B, ctx))[0, 0]) for f in (ttb_delta, tally_delta, wadd_delta))
        if top != 0 and maj != 0 and top != maj and w == maj and len(pa) < 8:
            pa.append(a)
            pb.append(b)
    return Design.make(v, pa, pb)


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    from agentmill.methods.autocog import library as L
    from agentmill.methods.autocog.design import random_design
    from agentmill.methods.autocog.gate import welch_gate
    from agentmill.methods.autocog.metrics import TemplateMetric, templates_for
    from agentmill.methods.autocog.simulate import simulate

    # AC-3 false accepts: theory vs itself, independent simulations
    lib = {"ttb": L.ttb(), "tallying": L.tallying(), "wadd": L.wadd(), "dial3": L.dial(gamma=3.0), "ew": L.ew()}
    fa, tests, ps = 0, 0, []
    for name, th in lib.items():
        for k in range(s.seeds):
            rng = rng_for(s.seed, "ac3", name, k)
            d = random_design(rng)
            da = simulate(th, d, s.n_sim, (derive_seed(s.seed, "a", name, k),))
            db = simulate(th, d, s.n_sim, (derive_seed(s.seed, "b", name, k),))
            for m in templates_for(th, th, cardinal=False):
                g = welch_gate(m(da), m(db), n_real=s.n_real, alpha=s.alpha)
                fa += g.accepted
                tests += 1
                ps.append(g.p)
        ctx.progress("AC-3", list(lib).index(name) + 1, len(lib))
    # AC-3 power: TTB vs WADD on the conflict design
    d = conflict_design()
    m = TemplateMetric("top_cue_vs_majority")
    acc = 0
    for k in range(s.seeds):
        ea = m(simulate(lib["ttb"], d, s.n_sim, (derive_seed(s.seed, "pa", k),)))
        eb = m(simulate(lib["wadd"], d, s.n_sim, (derive_seed(s.seed, "pb", k),)))
        acc += welch_gate(ea, eb, n_real=s.n_real, alpha=s.alpha).accepted
    # AC-4 decisiveness over accepted designs
    names = ["ttb", "tallying", "wadd", "dial3"]
    pairs = list(itertools.permutations(names, 2))
    decisive, n_acc, tried = 0, 0, 0
    while n_acc < s.n_accepted and tried < 50 * s.n_accepted:
        a, b = pairs[tried % len(pairs)]
        rng = rng_for(s.seed, "ac4", tried)
        tried += 1
        d = random_design(rng)
        crn = (derive_seed(s.seed, "ac4crn", tried),)
        da, db = simulate(lib[a], d, s.n_sim, crn), simulate(lib[b], d, s.n_sim, crn)
        best = min(((welch_gate(mt(da), mt(db), n_real=s.n_real, alpha=s.alpha), mt)
                    for mt in templates_for(lib[a], lib[b], cardinal=False)), key=lambda x: x[0].p)
        g, mt = best
        if not g.accepted:
            continue
        n_acc += 1
        fresh = mt(simulate(lib[a], d, s.n_real, (derive_seed(s.seed, "fresh", tried),))).value
        decisive += fresh is not None and abs(fresh - g.mu_a) < abs(fresh - g.mu_b)
        ctx.progress("AC-4", n_acc, s.n_accepted)
    ctx.data.update({"ac3_p_values": ps, "ac3_tests": tests, "ac4_tried": tried, "ac4_accepted": n_acc,
                     "conflict_design": conflict_design().to_json()})
    return {"ac3_false_accept": proportion_estimate(fa, tests),
            "ac3_accept_ttb_wadd": proportion_estimate(acc, s.seeds),
            "ac4_decisive": proportion_estimate(decisive, n_acc) if n_acc else Estimate.exact(float("nan")),
            "ac4_gate_pass_rate_single_design": proportion_estimate(n_acc, tried)}


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(5, 3.5))
    ax.hist(data["ac3_p_values"], bins=20, range=(0, 1))
    ax.set_xlabel("gate p (theory vs itself)")
    ax.set_ylabel("tests")
    ax.set_title("Null p-values of the Welch gate (n_sim 50 judged at N 25)")
    fig.tight_layout()
    p = out / "gate_null_p.png"
    save(fig, p, dpi=110)
    return [p]


EXPERIMENT = Experiment(
    id="e176.gate",
    quick_budget_s=10,
    parallel_safe=True,
    title="E176 AutoCog: the discrimination gate is calibrated and its designs are decisive",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    scale_note="numpy simulation only; 50 (quick) / 500 (full) replications per theory, 100 / 1,000 accepted designs. "
               "False-accept rate is per (design, template) test; an advocate that searches many designs for the "
               "minimum p would be accepted far more often (the gate is also not binding [I]).",
)
