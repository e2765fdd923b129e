"""E172 performance: oracle rollout throughput (PF-3), a tiny-model potential scan (PF-2), and one-token DPO with one
prefix forward per cliff against two sequences per pair as TRL scores them (PF-8). Wall-clock timings on this
machine and its load: run alone (``parallel_safe=False``); the CPU is named in the record. PF-1 (SmolLM2 fork scan
against a naive re-encoding scan) is ``e172.cliff_perf_smollm2`` (``perf_smollm2.py``).

PF-2 scans a 35-token trace at n = 64 with ``WhiteBoxForker`` over a random-initialised TinyLM 3 × 96 (continuations
run to the absolute 40-token cap: the worst case); quick times 1 of the 35 positions once and records the
extrapolation unjudged. PF-8 compares forward + backward over 16 cliffs × 4 pairs: one batch of 16 prefixes against
a batch of 128 prefix + token sequences, whose losses must agree to 10⁻⁶.
"""

from __future__ import annotations

import platform
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate, repeats_estimate
from agentmill.experiments.e172_cliff_tokens import PAPER
from agentmill.experiments.protocol import Claim, Experiment, RunContext, unjudged


@dataclass(frozen=True)
class Setup:
    repeats: int = 3
    """Independent timing repeats per comparison."""
    oracle_calls: int = 2000
    """rollout_counts calls (n = 64 each) per PF-3 repeat."""
    scan_positions: int = 35
    """Positions of the 35-token trace timed in PF-2 (35 = all; fewer are extrapolated and not judged)."""
    cliffs: int = 16
    """Cliffs (prefixes) in PF-8."""
    pairs_per_cliff: int = 4
    """Pairs per cliff in PF-8."""
    seed: int = 0


SETUPS = {"smoke": Setup(repeats=2, oracle_calls=100, scan_positions=1, cliffs=2, pairs_per_cliff=2),
          "quick": Setup(repeats=3, oracle_calls=500, scan_positions=1, cliffs=8),
          "full": Setup(repeats=3, oracle_calls=4000, scan_positions=35)}

CLAIMS = (
    Claim("E172-PF3", "The oracle draws at least 10^5 complete rollouts per second.", "[R] performance target",
          "—", "pf3_oracle_rollouts_per_s", ">=", 1e5),
    Claim("E172-PF2", "A tiny-model scan of a 35-token trace at n = 64 (all positions) takes at most 3 s.",
          "[R] performance target", "—", "pf2_tiny_scan_s", "<=", 3.0),
    Claim("E172-PF8", "One prefix forward per cliff is at least 1.8x faster per pair than two sequences per pair.",
          "[R] performance target", "—", "pf8_speedup", ">=", 1.8),
)


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def pf3(s: Setup) -> list[float]:
    from agentmill.methods.cliff_tokens.planted import ChainAddOracle, prompt_ids, sample_problem

    o, rng = ChainAddOracle(), np.random.default_rng(s.seed)
    probs = []
    for _ in range(50):
        ops = sample_problem(rng)
        probs.append((prompt_ids(ops), o.sample_trace(ops, rng).ids.tolist()))
    for q, tr in probs:
        o.rollout_counts(q, tr[:3], 2, rng)  # warm the per-problem tables
    rates = []
    for _ in range(s.repeats):
        t0 = time.perf_counter()
        for i in range(s.oracle_calls):
            q, tr = probs[i % len(probs)]
            o.rollout_counts(q, tr[: i % len(tr)], 64, rng)
        rates.append(64 * s.oracle_calls / (time.perf_counter() - t0))
    return rates


def pf2(s: Setup) -> tuple[list[float], dict[str, Any]]:
    from agentmill.lm.fork import WhiteBoxForker
    from agentmill.lm.tiny import TinyConfig, TinyLM
    from agentmill.methods.cliff_tokens.potential import PotentialConfig, PotentialEstimator

    lm = TinyLM(TinyConfig(layers=3, d=96, heads=4, max_len=80, seed=s.seed))
    prompt = [256] + list(b"Q:23+45+17=\n")
    trace = list(b"A:23+45=68;68+17=85;#85 and so on.")[:35]
    cfg = PotentialConfig(n=64, max_total_len=40, early_stop_zeros=0, positions_per_batch=8, seed=s.seed)
    times, cost = [], {}
    for r in range(s.repeats if s.scan_positions >= 35 else 1):
        est = PotentialEstimator(WhiteBoxForker(lm), lambda ids: bool(ids) and ids[-1] % 2 == 0, cfg)
        t0 = time.perf_counter()
        for t in range(s.scan_positions):
            est.at(prompt, trace[:t], 64, seed_key=(r, t))
        times.append((time.perf_counter() - t0) * 35 / s.scan_positions)
        cost = est.counters.to_dict()
    return times, cost


def pf8(s: Setup) -> tuple[list[float], float]:
    import torch

    from agentmill.lm.tiny import TinyConfig, TinyLM
    from agentmill.methods.cliff_tokens.dpo import single_token_dpo_loss

    lm = TinyLM(TinyConfig(layers=3, d=96, heads=4, max_len=64, seed=s.seed))
    net = lm.model
    g = torch.Generator().manual_seed(s.seed)
    P = 30
    prefixes = torch.randint(0, 256, (s.cliffs, P), generator=g)
    ch = torch.randint(0, 256, (s.cliffs, s.pairs_per_cliff), generator=g)
    rj = (ch + 1) % 256
    ref = torch.log_softmax(torch.randn(s.cliffs, 259, generator=g, dtype=torch.float64), -1)

    def one_prefix() -> torch.Tensor:
        logp = torch.log_softmax(net(prefixes)[0][:, -1].double(), -1)
        rows = torch.arange(s.cliffs).repeat_interleave(s.pairs_per_cliff)
        return single_token_dpo_loss(logp[rows], ref[rows], ch.reshape(-1), rj.reshape(-1), 0.1)

    def two_sequences() -> torch.Tensor:
        rows = torch.arange(s.cliffs).repeat_interleave(s.pairs_per_cliff)
        seq_w = torch.cat([prefixes[rows], ch.reshape(-1, 1)], 1)
        seq_l = torch.cat([prefixes[rows], rj.reshape(-1, 1)], 1)
        out = net(torch.cat([seq_w, seq_l]))[0][:, P - 1].double()
        lp = torch.log_softmax(out, -1)
        n = rows.numel()
        idx = torch.arange(n)
        lw = lp[:n][idx, ch.reshape(-1)] - ref[rows][idx, ch.reshape(-1)]
        ll = lp[n:][idx, rj.reshape(-1)] - ref[rows][idx, rj.reshape(-1)]
        return -torch.nn.functional.logsigmoid(0.1 * (lw - ll)).mean()

    diff = abs(float(one_prefix().detach()) - float(two_sequences().detach()))
    ratios = []
    for _ in range(s.repeats):
        times = []
        for fn in (one_prefix, two_sequences):
            t0 = time.perf_counter()
            for _ in range(3):
                net.zero_grad()
                fn().backward()
            times.append(time.perf_counter() - t0)
        ratios.append(times[1] / times[0])
    return ratios, diff


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    rates = pf3(s)
    ctx.progress("perf", 1, 3)
    scan_times, scan_cost = pf2(s)
    ctx.progress("perf", 2, 3)
    ratios, loss_diff = pf8(s)
    ctx.data.update({"cpu": _cpu(), "pf3_rates": rates, "pf2_times": scan_times, "pf2_cost": scan_cost,
                     "pf8_ratios": ratios, "pf8_loss_abs_diff": loss_diff})
    out = {"pf3_oracle_rollouts_per_s": repeats_estimate(rates, log=True),
           "pf8_speedup": repeats_estimate(ratios, log=True),
           "pf8_loss_abs_diff": Estimate.exact(loss_diff)}
    scan = repeats_estimate(scan_times, log=True)
    if s.scan_positions >= 35:
        out["pf2_tiny_scan_s"] = scan
    else:
        out.update(unjudged({"pf2_tiny_scan_s": scan}, ["pf2_tiny_scan_s"],
                            f"quick times {s.scan_positions} of 35 positions once and extrapolates; judged at full",
                            ctx.data))
    if loss_diff > 1e-6:
        ctx.data["precondition"] = f"precondition not met: PF-8 losses differ by {loss_diff:.2e} (> 1e-6)"
        out.pop("pf8_speedup")
    return out


EXPERIMENT = Experiment(
    id="e172.cliff_perf",
    title="E172 performance: oracle rollout rate, tiny potential scan, one-prefix single-token DPO",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    scale_note="wall-clock on this machine (CPU named in the record), one torch thread; random-initialised tiny "
               "models; PF-1 (SmolLM2) is e172.cliff_perf_smollm2.",
    parallel_safe=False,
    quick_budget_s=15,
)
