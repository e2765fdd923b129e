"""E176 performance targets P1-P4 (the project's own targets [R]; ratios measured side by side in one run).

P1  vectorised simulation (``simulate.simulate``, planned as ``simulate_batch``: one array pass per trial position)
    against the per-trial reference loop, 50 subjects × 96 trials, TTB / WADD / DR-WADD on one cardinal design
    (R = 5, U = 24, K = 4). The reference loop is the sandbox child's own exec-style loop (``sandbox.CHILD_THEORY``,
    one ``predict`` call per trial, history appended) run in this process, with AC-2's plain-Python per-trial
    semantics (``e176_library.ref_prob``) as ``predict``. Speed = median over alternating A/B repetitions of the
    paired time ratio. Agreement: each arm's per-pair P(A) (share of A choices, pooled over repetitions with
    independent seeds) is compared by a z test whose standard error is clustered by subject (a subject's
    parameters are shared by its trials), Bonferroni over pairs × rules at family-wise α = 0.01; the claim counts
    the pairs outside Monte Carlo error. With common random numbers (same seed) the two arms must also give the same
    P(A) to 1e-9 and the same choices (reported).
P2  sandboxed ``CodeTheory`` (one fresh ``python -I`` child per batch) against the same source exec'd in-process
    through the same loop, 50 × 96 batch, A/B alternating after one discarded warm-up call per arm ("warm"). Cold
    start = wall time of a 1 × 1 sandbox batch (process start + numpy import + audit hook): every sandbox call is a
    cold interpreter start; the first call of the run is reported separately (the OS page cache is not dropped).
P3  one programmatic round with 10 observations in the pool: 2 ``SearchAdvocate`` proposals (200 designs each) with
    their gates, data for both new observations, backfill, the ``RuleArbiter`` verdict, a ``ProgramSpaceReviser``
    revision with the 600-candidate budget (the verdict kind is forced to ``new_theory`` so the candidate set is the
    whole grammar; the reviser's stratified subsample scores ~560 of it, recorded as ``n_candidates``), and the
    post-admission backfill, on the cardinal task (R = 5; the binary grammar holds only 198 candidates) with a hidden
    DR-WADD ground truth (ε_gt = 0.25). The first 8 observations and 6 registered theories (2 slot seeds + 4
    earlier "revisions") are built untimed. The loop's ledger writes are not part of it. Claimed on this process's
    CPU seconds (user + sys, every thread: the time on one core, which the training job sharing the machine inflates
    far less than wall time); wall time beside.
P4  trial ``PUT`` latency through the real app (uvicorn in its own process, test mode, loopback, one keep-alive
    client, tokens round-robin so the 20 req/s per-token limit never binds) against a raw SQLite
    ``BEGIN; INSERT; COMMIT`` (WAL, synchronous=FULL) into the store's own ``trials`` table on the same disk,
    alternating blocks of the two. Throughput: 25 concurrent clients (``web.loadtest.run_load``, no duplicates,
    no conflicts, no pacing) submit whole sessions; PUT/s = acknowledged trials / time of the last acknowledgement.

Machine load (``os.getloadavg``) is recorded before and after every target; absolute numbers (P2 cold, P3, P4
latency and rate) must be read next to it.

Every target is judged on an interval over independent repeats, never on one timing (issue 24): P1 and P2-warm on
the bootstrap of the median paired ratio over their repetitions, P2-cold on the bootstrap of the median cold start,
P4-p95 and P4-raw on a bootstrap over the latency blocks (a raw block and a PUT block side by side are resampled
together, so the ratio stays paired), P4-rate on the Student-t interval of ``p4_rate_reps`` throughput runs (the
geometric mean; ``core.stats.repeats_estimate``) and P3 on the t-interval of ``p3_reps`` rounds with their own
seeds. One round costs ~20 s of CPU on a 2-core AMD EPYC host, so three would double the quick run: the quick
profile runs none and leaves P3 not judged, with that reason (the full profile judges three; a run with one or two
records them as ``p3_round_cpu_s_observed``). P4-rate's runs keep their full length at quick (40 trials per client):
the 25 client threads cost ~2.7 s of start-up per run, so shorter runs would measure the start-up, not the store.
"""

from __future__ import annotations

import io
import json
import math
import os
import resource
import sqlite3
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from agentmill.core.seeding import rng_for
from agentmill.core.stats import Estimate, bootstrap_ci, cluster_bootstrap, repeats_estimate
from agentmill.experiments.e176_autocog import PAPER
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, Experiment, RunContext, unjudged

P1_RULES = ("ttb", "wadd", "dr_wadd")


@dataclass(frozen=True)
class Setup:
    n_subjects: int = 50
    """Simulated subjects per batch (50 × 96 [R])."""
    p1_reps: int = 5
    """P1 A/B repetitions per rule (each with its own seed; the agreement test pools them)."""
    p1_vec_inner: int = 5
    """Vectorised calls averaged inside one P1 repetition (one call takes ~ms, below timer noise under load)."""
    p2_reps: int = 5
    """P2 A/B repetitions of the 50 × 96 batch."""
    p2_cold_reps: int = 5
    """1 × 1 sandbox calls whose median wall time is the cold start."""
    p3_n_designs: int = 200
    """SearchAdvocate designs per proposal (200 [R])."""
    p3_max_candidates: int = 600
    """Reviser candidates (600 [R])."""
    p3_prior_obs: int = 8
    """Observations in the pool before the timed round (the round adds 2 -> 10 [R])."""
    p3_rescore_n: int = 200
    """Fresh subjects in the reviser's top-5 re-score (its default)."""
    p3_reps: int = 3
    """Timed rounds, each with its own seed (below 3 the claim is not judged: no interval worth the name)."""
    p3_rating_max: int = 5
    """R of the round's designs. The cardinal task (R = 5): its grammar (2,763 variants, 45 families) exceeds the
    600-candidate budget, whose stratified subsample takes ⌊600/45⌋ = 13 per family (fewer where a family has
    fewer), i.e. ~560 scored candidates; the binary grammar has only 198."""
    p4_lat_blocks: int = 10
    """Alternating (raw commit block, PUT block) pairs."""
    p4_lat_block: int = 20
    """Samples per block."""
    p4_clients: int = 25
    """Concurrent clients in the throughput run (25 [R])."""
    p4_trials: int = 100
    """Trials each throughput client submits per run (100 = a whole U = 8 session: 96 + 4 catch; quick 40)."""
    p4_rate_reps: int = 3
    """Throughput runs, each with its own fresh sessions (the rate's interval is over them)."""
    alpha: float = 0.01
    """Family-wise level of P1's agreement test (Bonferroni over pairs × rules)."""
    seed: int = 0


SETUPS = {
    "smoke": Setup(n_subjects=4, p1_reps=2, p1_vec_inner=1, p2_reps=1, p2_cold_reps=1, p3_n_designs=3,
                   p3_max_candidates=4, p3_prior_obs=2, p3_rescore_n=10, p3_reps=2, p4_lat_blocks=2, p4_lat_block=3,
                   p4_clients=2, p4_trials=6, p4_rate_reps=2),
    "quick": Setup(p3_reps=0, p4_trials=40),
    "full": Setup(p1_reps=10, p2_reps=10, p2_cold_reps=10, p4_lat_blocks=20, p4_lat_block=25),
}

SRC = "[R] performance target of this project"
CLAIMS = (
    Claim("E176-P1", "Vectorised simulation is >= 20× faster than the per-trial reference loop (50 × 96, slowest "
          "of TTB / WADD / DR-WADD; median paired ratio over alternating repetitions).", SRC, "—",
          "p1_speedup_min", ">=", 20.0),
    Claim("E176-P1-agree", "Vectorised and per-trial reference give the same per-pair P(A) within Monte Carlo error "
          "(pairs outside a subject-clustered z test, Bonferroni over pairs × rules, family-wise α = 0.01).", SRC,
          "—", "p1_pairs_outside_mc", "<=", 0.0, judge_on="exact",
          exact_why="a seeded Monte Carlo check whose noise is inside its own test (subject-clustered z, Bonferroni, "
                    "family-wise alpha 0.01): a count of rejections"),
    Claim("E176-P2-warm", "A sandboxed CodeTheory batch (50 × 96) costs <= 1.5× the same source exec'd in-process "
          "(median paired ratio).", SRC, "—", "p2_warm_ratio", "<=", 1.5),
    Claim("E176-P2-cold", "Sandbox cold start (interpreter + numpy import, 1 × 1 batch, median wall) <= 1.0 s; "
          "absolute, read with the recorded load.", SRC, "—", "p2_cold_start_s", "<=", 1.0),
    Claim("E176-P3", "One programmatic round (2 advocates × 200 designs + backfill + revision with a 600-candidate "
          "budget, 10 observations) takes <= 15 s on one core (CPU seconds of this process; wall and load "
          "recorded).", SRC, "—", "p3_round_cpu_s", "<=", 15.0),
    Claim("E176-P4-p95", "Trial PUT p95 latency <= 25 ms (absolute, read with the recorded load).", SRC, "—",
          "p4_put_p95_ms", "<=", 25.0),
    Claim("E176-P4-raw", "Trial PUT p95 <= 4× the p95 of a raw SQLite insert+commit (WAL, synchronous=FULL) on the "
          "same disk, measured in alternating blocks.", SRC, "—", "p4_put_p95_over_raw", "<=", 4.0),
    Claim("E176-P4-rate", ">= 150 acknowledged PUT/s with 25 concurrent clients.", SRC, "—", "p4_put_per_s", ">=",
          150.0),
)


# ---- shared helpers --------------------------------------------------------------------------------------------
def load() -> list[float]:
    """1/5/15-minute load averages (rounded) — the context every absolute time here needs."""
    return [round(x, 2) for x in os.getloadavg()]


def ratio_estimate(num: list[float], den: list[float]) -> Estimate:
    """Median of paired ratios num[i] / den[i] with a bootstrap CI of the median (one value: exact)."""
    if len(num) != len(den) or not num:
        raise ValueError(f"ratio_estimate needs equal, non-empty lists, got {len(num)} and {len(den)}")
    if min(den) <= 0:
        raise ValueError(f"ratio_estimate: non-positive denominator {min(den)}")
    r = np.asarray(num, float) / np.asarray(den, float)
    if len(r) == 1:
        return Estimate.exact(float(r[0]), n=1)
    return bootstrap_ci(r, np.median)


def percentile_ms(xs: list[float], q: float) -> float:
    """The ``q``-th percentile (linear interpolation) of seconds ``xs``, in milliseconds."""
    if not xs:
        raise ValueError("percentile_ms: no samples")
    return float(np.percentile(np.asarray(xs, float) * 1e3, q))


def run_trial_loop(predict: Callable, A, B, params: dict, u=None, policy: str = "sample") -> dict:
    """The sandbox child's per-trial loop (``sandbox.CHILD_THEORY``: one ``predict`` call per trial, the subject's
    history appended after each choice) exec'd in this process, with the request exactly as the child would decode
    it. Returns the child's answer {probs, resps, renormalised}. No isolation: trusted ``predict`` only."""
    from agentmill.methods.autocog.sandbox import CHILD_THEORY

    req = {"A": np.asarray(A).tolist(), "B": np.asarray(B).tolist(),
           "params": {k: np.asarray(v).tolist() for k, v in params.items()},
           "u": None if u is None else np.asarray(u).tolist(), "policy": policy}
    buf = io.StringIO()

    def fail(kind: str, msg: str) -> None:
        raise RuntimeError(f"trial loop {kind}: {msg}")

    exec(_compiled(CHILD_THEORY), {"ns": {"predict": predict}, "req": req, "np": np, "json": json, "out": buf,
                                   "layers": {}, "fail": fail})
    return json.loads(buf.getvalue())


_CODE: dict[str, Any] = {}


def _compiled(src: str):
    if src not in _CODE:
        _CODE[src] = compile(src, "<trial-loop>", "exec")
    return _CODE[src]


# ---- P1 ----------------------------------------------------------------------------------------------------------
def p1_design(seed: int):
    """One cardinal design (F = 4, R = 5, U = 24 -> K = 4, 96 trials), fixed by ``seed``."""
    from agentmill.methods.autocog.design import random_design

    return random_design(rng_for(seed, "p1-design"), n_features=4, rating_max=5, n_unique=(24, 24))


def reference_predict(rule: str, ctx: dict) -> Callable:
    """``predict(params, stimulus, history) -> (2,)`` from AC-2's per-trial reference semantics."""
    from agentmill.experiments.e176_autocog.reference_rules import ref_prob

    v, R = [float(x) for x in ctx["validities"]], int(ctx["rating_max"])

    def predict(params, stimulus, history):
        pa = ref_prob(rule, params, stimulus[0].tolist(), stimulus[1].tolist(), v, R)
        return np.array([pa, 1.0 - pa])

    return predict


def reference_simulate(theory, rule: str, design, n_subjects: int, seed: tuple):
    """Per-trial reference run with ``simulate``'s own draws for ``seed`` (schedules, parameters, choice uniforms),
    so the same seed gives common random numbers. Returns (pair_idx, resp, prob_a), each (S, T)."""
    ctx = design.context()
    pair_idx = design.schedules(rng_for(*seed, "sched"), n_subjects)
    a, b = design.arrays()
    params = theory.params.sample(rng_for(*seed, "params", theory.content_id), ctx, n_subjects)
    u = rng_for(*seed, "choice").random(pair_idx.shape)
    res = run_trial_loop(reference_predict(rule, ctx), a[pair_idx], b[pair_idx], params, u, theory.policy)
    return pair_idx, np.asarray(res["resps"], int), np.asarray(res["probs"], float)


def pair_rates(pair_idx: np.ndarray, resp: np.ndarray, n_pairs: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-pair P(A) (mean over subjects of each subject's share of A on that pair) and its subject-clustered
    standard error (SD over subjects / √S). Shapes: (S, T) in, (U,) out."""
    S = resp.shape[0]
    if S < 2:
        raise ValueError(f"pair_rates needs >= 2 subjects for a standard error, got {S}")
    rows = np.repeat(np.arange(S), resp.shape[1])
    n = np.zeros((S, n_pairs))
    k = np.zeros((S, n_pairs))
    np.add.at(n, (rows, pair_idx.ravel()), 1.0)
    np.add.at(k, (rows, pair_idx.ravel()), (resp.ravel() == 0).astype(float))
    if (n == 0).any():
        raise ValueError("pair_rates: some subject never saw some pair")
    share = k / n
    return share.mean(0), share.std(0, ddof=1) / math.sqrt(S)


def agreement_z(m1: np.ndarray, se1: np.ndarray, m2: np.ndarray, se2: np.ndarray) -> np.ndarray:
    """Two-sample z per pair; 0 where both are exact and equal, inf where both are exact and differ."""
    den = np.sqrt(se1 ** 2 + se2 ** 2)
    diff = np.abs(m1 - m2)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, diff / np.where(den > 0, den, 1.0), np.where(diff > 0, np.inf, 0.0))


def bonferroni_z(alpha: float, m: int) -> float:
    """Two-sided critical z for ``m`` tests at family-wise level ``alpha``."""
    if not (0 < alpha < 1) or m < 1:
        raise ValueError(f"bonferroni_z: need 0 < alpha < 1 and m >= 1, got alpha={alpha}, m={m}")
    return statistics.NormalDist().inv_cdf(1 - alpha / (2 * m))


def p1(s: Setup, ctx: RunContext) -> dict[str, Any]:
    from agentmill.methods.autocog import library as L
    from agentmill.methods.autocog.simulate import simulate

    design = p1_design(s.seed)
    U = design.n_unique
    zc = bonferroni_z(s.alpha, U * len(P1_RULES))
    out: dict[str, Any] = {"design": design.to_json(), "z_crit": zc, "rules": {}, "load_start": load()}
    for rule in P1_RULES:
        th = L.REGISTRY[rule]()
        t_vec, t_ref, vec_runs, ref_runs = [], [], [], []
        for r in range(s.p1_reps):
            seed_v, seed_r = (s.seed, "p1", rule, "vec", r), (s.seed, "p1", rule, "ref", r)
            for arm in (("vec", "ref") if r % 2 == 0 else ("ref", "vec")):  # alternate which arm runs first
                if arm == "vec":
                    t0 = time.perf_counter()
                    for _ in range(s.p1_vec_inner):
                        d = simulate(th, design, s.n_subjects, seed_v)
                    t_vec.append((time.perf_counter() - t0) / s.p1_vec_inner)
                    vec_runs.append((d.pair_idx, d.resp))
                else:
                    t0 = time.perf_counter()
                    pi, resp, _ = reference_simulate(th, rule, design, s.n_subjects, seed_r)
                    t_ref.append(time.perf_counter() - t0)
                    ref_runs.append((pi, resp))
            ctx.progress(f"P1 {rule}", r + 1, s.p1_reps)
        # common random numbers: the same seed must give the same P(A) and the same choices
        crn = (s.seed, "p1", rule, "vec", 0)
        d0 = simulate(th, design, s.n_subjects, crn)
        _, resp_c, prob_c = reference_simulate(th, rule, design, s.n_subjects, crn)
        pv, sv = pair_rates(np.concatenate([x[0] for x in vec_runs]), np.concatenate([x[1] for x in vec_runs]), U)
        pr, sr = pair_rates(np.concatenate([x[0] for x in ref_runs]), np.concatenate([x[1] for x in ref_runs]), U)
        z = agreement_z(pv, sv, pr, sr)
        sp = ratio_estimate(t_ref, t_vec)
        out["rules"][rule] = {"t_vec_s": t_vec, "t_ref_s": t_ref, "speedup": sp.to_dict(),
                              "pairs_outside": int((z > zc).sum()), "max_z": float(z.max()),
                              "p_vec": pv.round(4).tolist(), "p_ref": pr.round(4).tolist(),
                              "crn_max_abs_dp": float(np.abs(d0.prob_a - prob_c).max()),
                              "crn_choice_agreement": float((d0.resp == resp_c).mean())}
    out["load_end"] = load()
    return out


# ---- P2 ----------------------------------------------------------------------------------------------------------
COLD_SOURCE = "import numpy as np\ndef predict(params, stimulus, history):\n    return np.array([0.5, 0.5])\n"


def p2_theory():
    """The AC-12 scripted reviser's theory code (validity weights to a power) as a sandboxed CodeTheory."""
    from agentmill.methods.autocog.agents.loopback import GRADED_CODE
    from agentmill.methods.autocog.theory import CodeTheory, Interval, ParamSpace

    ps = ParamSpace({"gamma": Interval(0.0, 10.0), "beta": Interval(0.1, 15.0), "eps": Interval(0.0, 0.5)})
    return CodeTheory("graded-code", "validity weights raised to a power", GRADED_CODE, ps)


def in_process(theory, params: dict, A, B, u) -> tuple[np.ndarray, np.ndarray]:
    """The theory's source through the same static policy and the same loop, exec'd here (no child process)."""
    from agentmill.methods.autocog.sandbox import check_source

    check_source(theory.source)
    ns: dict[str, Any] = {"np": np, "math": math}
    exec(compile(theory.source, "<theory>", "exec"), ns)
    res = run_trial_loop(ns["predict"], A, B, params, u, theory.policy)
    return np.asarray(res["probs"], float), np.asarray(res["resps"], int)


def _child_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def p2(s: Setup, ctx: RunContext) -> dict[str, Any]:
    from agentmill.methods.autocog.sandbox import run_batch

    out: dict[str, Any] = {"load_start": load()}
    cold, cold_cpu = [], []
    for k in range(s.p2_cold_reps + 1):  # call 0 is the run's first sandbox start: reported, not in the median
        c0, t0 = _child_cpu(), time.perf_counter()
        run_batch(COLD_SOURCE, [[[0, 1]]], [[[1, 0]]], {})
        cold.append(time.perf_counter() - t0)
        cold_cpu.append(_child_cpu() - c0)
    out.update(first_call_s=cold[0], cold_s=cold[1:], cold_child_cpu_s=cold_cpu[1:])
    th = p2_theory()
    design = p1_design(s.seed)
    ctxd = design.context()
    pair_idx = design.schedules(rng_for(s.seed, "p2", "sched"), s.n_subjects)
    a, b = design.arrays()
    A, B = a[pair_idx], b[pair_idx]
    params = th.params.sample(rng_for(s.seed, "p2", "params"), ctxd, s.n_subjects)
    u = rng_for(s.seed, "p2", "choice").random(pair_idx.shape)
    p_sbx, r_sbx = th.simulate_in_sandbox(params, A, B, u)  # warm-up of both arms (discarded)
    p_in, r_in = in_process(th, params, A, B, u)
    t_sbx, t_in, cpu_sbx = [], [], []
    for r in range(s.p2_reps):
        for arm in (("sbx", "in") if r % 2 == 0 else ("in", "sbx")):
            c0, t0 = _child_cpu(), time.perf_counter()
            if arm == "sbx":
                th.simulate_in_sandbox(params, A, B, u)
                t_sbx.append(time.perf_counter() - t0)
                cpu_sbx.append(_child_cpu() - c0)
            else:
                in_process(th, params, A, B, u)
                t_in.append(time.perf_counter() - t0)
        ctx.progress("P2 batches", r + 1, s.p2_reps)
    out.update(t_sandbox_s=t_sbx, sandbox_child_cpu_s=cpu_sbx, t_in_process_s=t_in,
               warm_ratio=ratio_estimate(t_sbx, t_in).to_dict(),
               max_abs_dp=float(np.abs(p_sbx - p_in).max()), choices_equal=bool((r_sbx == r_in).all()),
               load_end=load())
    return out


# ---- P3 ----------------------------------------------------------------------------------------------------------
def p3(s: Setup, ctx: RunContext, seed: int) -> dict[str, Any]:
    """One timed round on a pool built from ``seed`` (each repeat its own seed; the first is ``Setup.seed``)."""
    from agentmill.methods.autocog import library as L
    from agentmill.methods.autocog.agents.base import PoolView, Verdict
    from agentmill.methods.autocog.agents.search import ProgramSpaceReviser, RuleArbiter, SearchAdvocate
    from agentmill.methods.autocog.cohorts import SimulatedCohort
    from agentmill.methods.autocog.design import random_design
    from agentmill.methods.autocog.gate import welch_gate
    from agentmill.methods.autocog.metrics import predicted_estimate, templates_for
    from agentmill.methods.autocog.scoring import leaderboard

    n_sim, n_real = 50, 25  # the loop's defaults [C `src/run_config.py`]
    rng = rng_for(seed, "p3")
    R = s.p3_rating_max
    cohort = SimulatedCohort(L.dr_wadd(), action_noise=0.25, seed=seed)  # hidden GT: DR-WADD at ε_gt = 0.25
    seeds = (L.ttb(), L.wadd())
    earlier = (L.ew(), L.dial(), L.rank_decay(), L.satisficing_wadd())  # stand-ins for 4 earlier revisions
    theories = {t.content_id: t for t in seeds + earlier}
    slots = [seeds[0].content_id, seeds[1].content_id]
    obs: list[dict] = []
    view = PoolView(theories, slots, obs)

    def add_obs(design, metric, rnd: int, slot: int) -> dict:
        o = {"obs_id": f"o{rnd:02d}{slot}", "round": rnd, "slot": slot, "design": design, "metric": metric,
             "real": None, "preds": {}, "gate_passed": True, "seed": int(rng.integers(2**62))}
        obs.append(o)
        return o

    def collect(o: dict) -> None:
        o["real"] = o["metric"](cohort.collect(o["obs_id"], o["design"], n_real)).value

    def backfill() -> int:
        n = 0
        for o in obs:
            for tid, t in theories.items():
                if tid not in o["preds"]:
                    o["preds"][tid] = predicted_estimate(t, o["design"], o["metric"], n_sim, (o["seed"], "pred")).value
                    n += 1
        return n

    tmpl = templates_for(seeds[0], seeds[1], cardinal=R > 1)
    for k in range(s.p3_prior_obs):  # untimed: the pool a round-5 run would have
        o = add_obs(random_design(rng, rating_max=R), tmpl[k % len(tmpl)], 1 + k // 2, 1 + k % 2)
        collect(o)
    backfill()
    load_start = load()
    advocates = [SearchAdvocate(n_designs=s.p3_n_designs, n_sim=n_sim, n_real=n_real, rating_max=R)
                 for _ in range(2)]
    reviser = ProgramSpaceReviser(n_sim=n_sim, max_candidates=s.p3_max_candidates, rescore_n=s.p3_rescore_n)
    rnd = 1 + s.p3_prior_obs // 2
    c0, t0 = time.process_time(), time.perf_counter()
    for k in (1, 2):  # (1) proposals with their gates -> two observations
        own, opp = theories[slots[k - 1]], theories[slots[2 - k]]
        prop = advocates[k - 1].propose(own, opp, view, rng_for(seed, "p3", rnd, k, "propose"))
        crn = (seed, "p3", rnd, k, "gate")
        g = welch_gate(predicted_estimate(own, prop.design, prop.metric, n_sim, crn),
                       predicted_estimate(opp, prop.design, prop.metric, n_sim, crn), n_real=n_real)
        add_obs(prop.design, prop.metric, rnd, k)["gate_passed"] = g.accepted
    t_prop = time.perf_counter() - t0
    for o in obs[-2:]:  # (2) data
        collect(o)
    n_pred = backfill()  # (3) backfill + post-data leaderboard
    leaderboard(view.scoring_rows(), list(theories))
    verdict = RuleArbiter().judge(theories[slots[0]], theories[slots[1]], view)  # (4)
    forced = Verdict("new_theory", verdict.target_slot, verdict.interpretation, verdict.recommendation)
    tgt, other = slots[forced.target_slot - 1], slots[2 - forced.target_slot]
    t1 = time.perf_counter()
    rev = reviser.revise(forced, theories[tgt], theories[other], view, rng_for(seed, "p3", "revise"))  # (5)
    t_rev = time.perf_counter() - t1
    theories[rev.theory.content_id] = rev.theory
    slots[forced.target_slot - 1] = rev.theory.content_id
    n_pred += backfill()  # (6) post-admission backfill + leaderboard
    leaderboard(view.scoring_rows(), list(theories))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    n_cand = sum(1 for c in rev.candidates if "content_id" in c)
    return {"wall_s": wall, "cpu_s": cpu, "rating_max": R, "proposals_wall_s": t_prop, "revision_wall_s": t_rev,
            "n_observations": len(obs), "n_candidates": n_cand, "n_theories": len(theories),
            "backfill_predictions": n_pred, "arbiter_kind": verdict.kind, "revised": rev.theory.name,
            "blas_env": {k: os.environ.get(k) for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                                                        "MKL_NUM_THREADS")},
            "load_start": load_start, "load_end": load()}


# ---- P4 ----------------------------------------------------------------------------------------------------------
def raw_commit_sampler(path: Path) -> Callable[[], float]:
    """One SQLite connection (WAL, synchronous=FULL) on ``path`` with the store's schema; each call times one
    ``BEGIN; INSERT INTO trials …; COMMIT`` of a fresh row and returns the seconds it took."""
    from agentmill.methods.autocog.web.store import SCHEMA

    c = sqlite3.connect(path, isolation_level=None)
    c.execute("PRAGMA journal_mode=WAL")
    c.execute("PRAGMA synchronous=FULL")
    c.executescript(SCHEMA)
    n = [0]

    def one() -> float:
        n[0] += 1
        row = ("raw", n[0], 0, 0, "[1, 0, 0, 0]", "[0, 1, 1, 1]", "L", "L", 0, 1500.0, None, time.time())
        t0 = time.perf_counter()
        c.execute("BEGIN")
        c.execute("INSERT INTO trials VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", row)
        c.execute("COMMIT")
        return time.perf_counter() - t0

    return one


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux ``/proc/<pid>/stat``; NaN elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime (fields 14, 15)


def p4(s: Setup, ctx: RunContext, work: Path) -> dict[str, Any]:
    import httpx

    from agentmill.methods.autocog.web.loadtest import U8_DESIGN, free_port, prepare, run_load, start_server
    from agentmill.methods.autocog.web.store import Store

    n_lat = s.p4_lat_blocks * s.p4_lat_block
    n_tok = min(25, n_lat)  # round-robin: each token sees < 20 req/s; 25 × 100 trials bounds n_lat
    if n_lat > 25 * 100:
        raise ValueError(f"P4 latency samples {n_lat} exceed 25 sessions × 100 trials")
    db = work / "p4-study.sqlite"
    st = Store(db)
    st.add_observation("lat", U8_DESIGN)
    for rep in range(s.p4_rate_reps):  # one observation per run: the study caps sessions per observation at 35
        st.add_observation(f"thr{rep}", U8_DESIGN)
    raw = raw_commit_sampler(work / "p4-raw.sqlite")
    port = free_port()
    proc = start_server(db, port)
    base = f"http://127.0.0.1:{port}"
    out: dict[str, Any] = {"load_start": load(), "disk_dir": str(work)}
    try:
        lat_toks = st.create_sessions("lat", n_tok)
        thr_toks = [st.create_sessions(f"thr{rep}", s.p4_clients) for rep in range(s.p4_rate_reps)]
        put_s, raw_s, codes = [], [], {}
        with httpx.Client(base_url=base, timeout=10) as c:
            for t in lat_toks + [t for toks in thr_toks for t in toks]:
                prepare(c, t)
            for _ in range(3):  # warm-up (connection, first page of the db): discarded
                raw()
            k = 0
            for blk in range(s.p4_lat_blocks):
                for arm in (("raw", "put") if blk % 2 == 0 else ("put", "raw")):
                    for _ in range(s.p4_lat_block):
                        if arm == "raw":
                            raw_s.append(raw())
                            continue
                        tok, idx = lat_toks[k % n_tok], k // n_tok
                        k += 1
                        t0 = time.perf_counter()
                        r = c.put(f"/api/s/{tok}/trials/{idx}", json={"side_pressed": "L", "rt_ms": 1500.0})
                        put_s.append(time.perf_counter() - t0)
                        codes[r.status_code] = codes.get(r.status_code, 0) + 1
                ctx.progress("P4 latency blocks", blk + 1, s.p4_lat_blocks)
        out["load_mid"] = load()
        runs = []
        for rep, toks in enumerate(thr_toks):
            srv0, t0 = proc_cpu_s(proc.pid), time.perf_counter()
            log = run_load(base, toks, s.p4_trials, seed=s.seed + rep, dup_p=0.0, conflict_p=0.0, pace_s=0.0)
            thr_wall, srv_cpu = time.perf_counter() - t0, proc_cpu_s(proc.pid) - srv0
            acked = sum(len(a) for a in log.acked.values())
            last = max(log.ack_times) if log.ack_times else float("nan")
            runs.append({"acked": acked, "last_ack_s": last, "wall_s": thr_wall, "server_cpu_s": srv_cpu,
                         "put_per_s": acked / last if last > 0 else float("nan"), "errors": log.errors[:20],
                         "load": load()})
            ctx.progress("P4 throughput runs", rep + 1, s.p4_rate_reps)
    finally:
        proc.kill()
        proc.wait()
    acked = sum(r["acked"] for r in runs)
    srv_cpu = sum(r["server_cpu_s"] for r in runs)
    rates = [r["put_per_s"] for r in runs]
    out.update(put_s=put_s, raw_s=raw_s, put_status=codes, n_latency_tokens=n_tok,
               put_p50_ms=percentile_ms(put_s, 50), put_p95_ms=percentile_ms(put_s, 95),
               raw_p50_ms=percentile_ms(raw_s, 50), raw_p95_ms=percentile_ms(raw_s, 95),
               thr_runs=runs, thr_acked=acked, thr_expected=s.p4_rate_reps * s.p4_clients * s.p4_trials,
               thr_errors=[e for r in runs for e in r["errors"]][:20], thr_put_per_s_runs=rates,
               thr_put_per_s=float(np.exp(np.mean(np.log(rates)))) if all(x > 0 for x in rates) else float("nan"),
               thr_server_cpu_s=srv_cpu, thr_server_cpu_ms_per_put=1e3 * srv_cpu / acked if acked else float("nan"),
               load_end=load())
    return out


def latency_estimates(put_s: list[float], raw_s: list[float], block: int, *, n_boot: int = 2000,
                      seed: int = 0) -> tuple[Estimate, Estimate]:
    """(PUT p95 in ms, PUT p95 / raw p95), each with a bootstrap over the latency blocks: block b of ``put_s`` and
    block b of ``raw_s`` (``block`` samples each, measured side by side) are resampled together, so the ratio stays
    paired and a slow phase of the machine moves both of its sides. Samples inside a block are not independent
    (one connection, one stretch of machine load), so the blocks are the units (``Estimate.n``)."""
    if len(put_s) != len(raw_s) or not put_s or len(put_s) % block:
        raise ValueError(f"latency_estimates needs equal whole blocks of {block}, got {len(put_s)} and {len(raw_s)}")
    x = np.concatenate([np.asarray(put_s, float), np.asarray(raw_s, float)]) * 1e3
    n = len(put_s)
    is_put = np.arange(2 * n) < n
    blocks = np.concatenate([np.arange(n) // block] * 2)

    def p95(rows: np.ndarray) -> float:
        return float(np.percentile(x[rows[is_put[rows]]], 95))

    def ratio(rows: np.ndarray) -> float:
        return p95(rows) / float(np.percentile(x[rows[~is_put[rows]]], 95))

    return (cluster_bootstrap(p95, blocks, n_boot=n_boot, seed=seed),
            cluster_bootstrap(ratio, blocks, n_boot=n_boot, seed=seed))


# ---- measure -----------------------------------------------------------------------------------------------------
def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    if s.n_subjects < 2:
        raise ValueError(f"Setup.n_subjects must be >= 2 (P1's standard error), got {s.n_subjects}")
    ctx.data["load_start"] = load()
    r1 = p1(s, ctx)
    r2 = p2(s, ctx)
    rounds = []
    for k in range(s.p3_reps):
        rounds.append(p3(s, ctx, s.seed + k))
        ctx.progress("P3 rounds", k + 1, s.p3_reps)
    r3 = {"rounds": rounds, **({"load_start": rounds[0]["load_start"], "load_end": rounds[-1]["load_end"]}
                               if rounds else {})}
    Path(ctx.work_dir).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="e176-perf-", dir=ctx.work_dir) as d:
        r4 = p4(s, ctx, Path(d))
    ctx.data.update(p1=r1, p2=r2, p3=r3, p4=r4, load_end=load(), cpu_count=os.cpu_count())
    worst = min(P1_RULES, key=lambda k: r1["rules"][k]["speedup"]["value"])
    p95, p95_ratio = latency_estimates(r4["put_s"], r4["raw_s"], s.p4_lat_block, seed=s.seed)
    m = {"p1_speedup_min": Estimate.from_dict(r1["rules"][worst]["speedup"]),
         "p1_pairs_outside_mc": Estimate.exact(sum(r1["rules"][k]["pairs_outside"] for k in P1_RULES),
                                               n=len(P1_RULES) * len(r1["rules"][worst]["p_vec"])),
         "p1_crn_max_abs_dp": Estimate.exact(max(r1["rules"][k]["crn_max_abs_dp"] for k in P1_RULES)),
         "p2_warm_ratio": Estimate.from_dict(r2["warm_ratio"]),
         "p2_cold_start_s": bootstrap_ci(r2["cold_s"], np.median),
         "p2_first_call_s": Estimate.exact(r2["first_call_s"]),
         "p2_max_abs_dp": Estimate.exact(r2["max_abs_dp"]),
         "p4_put_p50_ms": Estimate.exact(r4["put_p50_ms"], n=len(r4["put_s"])),
         "p4_put_p95_ms": p95,
         "p4_raw_p50_ms": Estimate.exact(r4["raw_p50_ms"], n=len(r4["raw_s"])),
         "p4_raw_p95_ms": Estimate.exact(r4["raw_p95_ms"], n=len(r4["raw_s"])),
         "p4_put_p95_over_raw": p95_ratio,
         "p4_put_per_s": repeats_estimate(r4["thr_put_per_s_runs"], log=True),
         "p4_server_cpu_ms_per_put": Estimate.exact(r4["thr_server_cpu_ms_per_put"], n=r4["thr_acked"]),
         "load1_start": Estimate.exact(ctx.data["load_start"][0]),
         "load1_end": Estimate.exact(ctx.data["load_end"][0])}
    for k in P1_RULES:
        m[f"p1_speedup_{k}"] = Estimate.from_dict(r1["rules"][k]["speedup"])
    if rounds:
        m["p3_round_cpu_s"] = repeats_estimate([r["cpu_s"] for r in rounds])
        m["p3_round_wall_s"] = repeats_estimate([r["wall_s"] for r in rounds])
    if s.p3_reps < 3:
        m = unjudged(m, ["p3_round_cpu_s"], f"{s.p3_reps} P3 round(s) in this profile: one takes ~20 s of CPU and the "
                     "claim needs an interval over 3 (the full profile)", ctx.data)
    return m


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    plt = pyplot()

    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 3.6))
    rules = list(data["p1"]["rules"])
    sp = [data["p1"]["rules"][k]["speedup"]["value"] for k in rules]
    a1.bar(rules, sp, color="tab:blue")
    a1.axhline(20, color="k", ls="--", lw=1, label="target ≥ 20×")
    a1.set_ylabel("reference time / vectorised time")
    a1.set_title(f"P1 speed-up (load {data['p1']['load_start'][0]})", fontsize=9)
    a1.legend(fontsize=7)
    p4d = data["p4"]
    bins = np.linspace(0, max(max(p4d["put_s"]), max(p4d["raw_s"])) * 1e3, 40)
    a2.hist(np.asarray(p4d["raw_s"]) * 1e3, bins=bins, alpha=0.6, label=f"raw commit p95 {p4d['raw_p95_ms']:.1f} ms")
    a2.hist(np.asarray(p4d["put_s"]) * 1e3, bins=bins, alpha=0.6, label=f"PUT p95 {p4d['put_p95_ms']:.1f} ms")
    a2.axvline(25, color="k", ls="--", lw=1)
    a2.set_xlabel("ms")
    a2.set_title(f"P4 latency (load {p4d['load_start'][0]}); {p4d['thr_put_per_s']:.0f} PUT/s at "
                 f"{len(p4d['thr_errors']) and 'errors' or 'no errors'}", fontsize=9)
    a2.legend(fontsize=7)
    fig.tight_layout()
    p = out / "perf_targets.png"
    save(fig, p, dpi=110)
    return [p]


EXPERIMENT = Experiment(
    id="e176.perf",
    quick_budget_s=30,
    title="E176 AutoCog: performance targets P1-P4 (simulation, sandbox, one round, trial PUT)",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    requires=frozenset({"autocog-e2e"}),
    plots=plots,
    scale_note="Engineering targets of this project [R], no model. Ratios (P1, P2 warm, P4 vs raw) are paired and "
               "measured side by side in alternating repetitions; absolute numbers (P2 cold, P3, P4 latency and "
               "rate) depend on the machine and its load, which the record holds (os.getloadavg before and after "
               "each target). P3 is the round's roles composed without the ledger; P5-P7 are reported by "
               "e176.browser, e176.resume and e176.recovery.",
)
