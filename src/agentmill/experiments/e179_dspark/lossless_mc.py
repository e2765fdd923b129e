"""E179-T2: engine-level sampling under load matches the target — the scheduler sees co-batched requests.

One measured request shares every scheduling decision with 7 fake co-requests whose confidences are fresh random
draws; a deliberately bad block-parallel toy drafter (confidence 0.05 or 0.95 by the parity of x_{k−1}, so c_{k+1}
reveals x_k) drafts γ = 3 tokens per round for a second-order Markov toy target over V = 6, and a synthetic cost
curve with a cliff prices the step. Batches are independent, so the measured
request's length-4 continuations are i.i.d.; they are compared with the exact 6⁴ target joint by chi-square (cells
with expected count < 5 merged). Lossless policies must pass (Holm-adjusted p > 1e-3 over seeds); the retrospective
search must be rejected (p < 1e-6), or the setup is underpowered.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate, holm
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, Experiment, RunContext

PAPER = "Cheng et al., DSpark, arXiv:2607.05147 (App. A, §5.2)"
V, GAMMA, N_TOK, CO = 6, 3, 4, 7
CO_HI = 0.1
"""Co-requests draw step confidences from U(0, 0.1)."""


@dataclass(frozen=True)
class Setup:
    samples: int = 200_000
    seeds: int = 3
    policies: str = "fixed:3,threshold:0.5,dspark,dspark-async"


SETUPS = {
    "smoke": Setup(samples=2_000, seeds=1, policies="dspark"),
    "quick": Setup(samples=20_000, seeds=1),
    "full": Setup(),
}

CLAIMS = (
    Claim("E179-T2", "Under load (7 co-batched requests), sampling through every causal policy matches the target: "
          "smallest Holm-adjusted chi-square p-value of length-4 continuations vs the exact joint.",
          "[P] DSpark App. A", "exact", "t2_min_holm_p", ">=", 1e-3, judge_on="exact",
          exact_why="a hypothesis test: the smallest Holm-adjusted p-value is the decision statistic, and the "
                    "sampling noise is already in the test"),
    Claim("E179-T2-power", "Power check: the retrospective search is rejected (its chi-square p-value).",
          "[R] power check", "—", "t2_retro_p", "<=", 1e-6, judge_on="exact",
          exact_why="a power check: the retrospective search's chi-square p-value is the decision statistic, its "
                    "sampling noise already in the test"),
)


def _sps() -> Any:
    """The App.-A cost shape shifted to 8 requests: flat up to B = 8, a cliff at 9, a plateau after.

    Deviation from the planned curve (t = 1 + 0.15(B − 1), +0.3 above B = 12; docs/LOG.md 2026-11-24), which left the
    power check without power: the retrospective search was not rejected (p = 0.16 with 100k samples; with co-request
    confidences U(0, 1) it never even differed from Algorithm 1 in 3,000 batches). Here admitting the measured request's
    first draft pays only together with its second, whose confidence reveals the first token — the App.-A trap under
    load.
    """
    from agentmill.methods.dspark.costmodel import SPSTable

    return SPSTable.from_function(lambda b: 1.0 if b <= 8 else 1.2 + 0.01 * max(0, b - 10), list(range(1, 65)))


def _model() -> tuple[Any, np.ndarray, np.ndarray]:
    from agentmill.methods.dspark.exact import ToyMarkovLM

    tgt = ToyMarkovLM(V=V, seed=3, temperature=1.0)
    rng = np.random.default_rng(4)
    q_base = rng.dirichlet(np.ones(V) * 0.7, size=(GAMMA, V))       # block-parallel: depends on the anchor only
    return tgt, q_base, np.array([0.95 if x % 2 == 0 else 0.05 for x in range(V)])


def _cdf(p: np.ndarray) -> np.ndarray:
    """Normalised cumulative sums along the last axis, as ``Generator.choice`` builds them."""
    c = np.cumsum(p, axis=-1)
    return c / c[..., -1:]


def _draw(rng: np.random.Generator, cdf: np.ndarray) -> int:
    return int(cdf.searchsorted(rng.random(), side="right"))


def simulate(policy: str, n: int, seed: int) -> np.ndarray:
    """``n`` i.i.d. length-4 continuations of the measured request (each from its own simulated batch)."""
    from agentmill.methods.dspark.policies import make_policy, schedule

    tgt, q_base, conf_of_prev = _model()
    # The target depends on the last two tokens only: its V × V next-token rows, computed once. Draws go through
    # ``_draw``, which consumes the generator exactly as ``rng.choice(V, p=...)`` does: the same samples, without
    # choice's per-call argument checks.
    P = np.array([[tgt.p((a, b)) for b in range(V)] for a in range(V)])
    q_cdf, p_cdf = _cdf(q_base), _cdf(P)
    sps = _sps()
    pol = make_policy(policy, sps) if policy != "retrospective" else None
    rng = np.random.default_rng(seed)
    prompt = (1, 2)
    out = np.zeros((n, N_TOK), dtype=np.int64)
    for i in range(n):
        seq: list[int] = []
        stale = np.cumprod(rng.uniform(0.2, 0.95, size=(CO + 1, GAMMA)), 1)    # snapshots from earlier steps
        while len(seq) < N_TOK:
            ctx = prompt + tuple(seq)
            anchor = ctx[-1]
            xs = [_draw(rng, q_cdf[k, anchor]) for k in range(GAMMA)]
            prevs = [anchor] + xs[:-1]
            conf = np.empty((CO + 1, GAMMA))
            conf[0] = conf_of_prev[prevs]
            conf[1:] = rng.uniform(0.0, CO_HI, size=(CO, GAMMA))
            avail = np.full(CO + 1, GAMMA)
            avail[0] = max(0, min(GAMMA, N_TOK - len(seq) - 1))          # value-independent cap
            ids = np.arange(CO + 1)
            if policy == "retrospective":
                ell = int(schedule(conf, avail, sps, "retrospective", req_ids=ids)[0])
            elif policy == "dspark-async":
                ell = int(schedule(conf, avail, sps, "dspark-async", req_ids=ids, stale_survival=stale)[0])
            else:
                ell = int(pol.lengths(conf, avail, ids, 0)[0])
            committed = []
            for k in range(ell + 1):
                c2 = (ctx + tuple(committed))[-2:]
                p = P[c2]
                if k == ell:
                    committed.append(_draw(rng, p_cdf[c2]))
                    break
                x, q = xs[k], q_base[k, anchor]
                if rng.random() * q[x] < p[x]:
                    committed.append(x)
                    continue
                resid = np.maximum(p - q, 0)
                committed.append(_draw(rng, _cdf(resid / resid.sum())))
                break
            seq += committed
            stale = np.vstack([np.cumprod(conf[0])[None], stale[1:]])             # this step becomes history
        out[i] = seq[:N_TOK]
    return out


def chi2_p(samples: np.ndarray) -> float:
    from scipy.stats import chisquare

    tgt, _, _ = _model()
    joint = tgt.joint((1, 2), N_TOK)
    keys = sorted(joint, key=joint.get, reverse=True)
    index = {k: i for i, k in enumerate(keys)}
    obs = np.zeros(len(keys))
    for row in samples:
        obs[index[tuple(int(t) for t in row)]] += 1
    exp = np.array([joint[k] for k in keys]) * len(samples)
    big = exp >= 5
    obs = np.append(obs[big], obs[~big].sum())
    exp = np.append(exp[big], exp[~big].sum())
    return float(chisquare(obs, exp * obs.sum() / exp.sum()).pvalue)


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    ps, names = [], []
    pols = s.policies.split(",")
    total = len(pols) * s.seeds + 1
    i = 0
    for pol in pols:
        for seed in range(s.seeds):
            ctx.progress("T2 Monte Carlo (policy × seed)", i, total)
            ps.append(chi2_p(simulate(pol, s.samples, 1000 + seed)))
            names.append(f"{pol} seed {seed}")
            i += 1
    ctx.progress("T2 Monte Carlo (policy × seed)", i, total)
    retro = chi2_p(simulate("retrospective", s.samples, 999))
    adj = holm(ps)
    ctx.data["p_values"] = dict(zip(names, ps))
    ctx.data["holm"] = dict(zip(names, adj))
    ctx.data["retrospective_p"] = retro
    return {"t2_min_holm_p": Estimate.exact(min(adj), len(adj)), "t2_retro_p": Estimate.exact(retro)}


def plots(data: dict[str, Any], out_dir: Path) -> list[Path]:
    plt = pyplot()

    h = data.get("holm")
    if not h:
        return []
    names = list(h) + ["retrospective (control)"]
    vals = [max(v, 1e-300) for v in h.values()] + [max(data["retrospective_p"], 1e-300)]
    fig, ax = plt.subplots(figsize=(6, 3.2))
    ax.barh(names, vals, color=["tab:blue"] * len(h) + ["tab:red"])
    ax.axvline(1e-3, color="k", ls="--", lw=1, label="pass above 1e-3")
    ax.axvline(1e-6, color="r", ls=":", lw=1, label="control below 1e-6")
    ax.set_xscale("log")
    ax.set_xlabel("chi-square p (Holm-adjusted for the causal policies)")
    ax.legend(fontsize=7)
    ax.set_title("E179-T2: sampling under load vs the exact target joint")
    fig.tight_layout()
    p = out_dir / "e179_lossless_mc.png"
    save(fig, p, dpi=120)
    return [p]


EXPERIMENT = Experiment(
    quick_budget_s=65,
    id="e179.lossless_mc",
    parallel_safe=True,
    title="DSpark losslessness under load with co-batched requests, Monte Carlo (T2)",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    scale_note="Toy target (V = 6) and a deliberately bad drafter; quick: 20k continuations per policy, 1 seed; full: "
               "200k × 3 seeds.",
    plots=plots,
)
