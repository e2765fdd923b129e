"""E172 PF-1: potential at 8 positions of a 40-token SmolLM2 trace, n = 16, by forks against the naive path.

Fork scan (``PotentialEstimator.fork_counts``): one teacher-forced pass over prompt + trace keeps the KV cache and
the logits at every position; each scored position copies the cache once, expands it to n rows and decodes them.
Naive path (``PotentialEstimator.naive_counts``): per position, prompt + prefix repeated n times and prefilled as one
batch (what ``generate(num_return_sequences=n)`` does), then decoded with the same sampler. Both draw row j of
position t from ``stream_rng(key, t·n + j)``, so the counts must be identical; the naive path re-encodes n·(P+t)
tokens per position that the fork path never does. Target ≥ 3× faster [R] (a performance target of this project's
design, docs/methods/cliff_tokens.md).

Full: ``hf:smollm2`` (the run's ``--model``), a 2-shot 4-term addition prompt and the first 40 tokens of the
problem's worked solution as the trace (teacher-forced; continuations finish the answer), T = 0.7 (CT-10's policy),
continuations stop at the completed ``Answer:`` line or at 56 tokens of trace + continuation. Quick and smoke: the
same comparison on a random-initialised ``tiny:`` model (no model load), recorded unjudged. Wall clock, run alone
(``parallel_safe=False``), one repeat of each path (the full comparison took 10 min at load 4–5 here); the CI is a
bootstrap over the 8 positions of the ratio of summed times, with the shared teacher-forced pass on the fork side.
"""

from __future__ import annotations

import os
import platform
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate, bootstrap_ci
from agentmill.experiments.e172_cliff_tokens import PAPER
from agentmill.experiments.protocol import Claim, Experiment, RunContext, unjudged


@dataclass(frozen=True)
class Setup:
    substrate: str = "model"
    """``model``: the run's ``--model`` (hf:smollm2 by default); ``tiny``: a random-initialised TinyLM (no load)."""
    positions: int = 8
    """Scored positions, evenly spaced over the trace (0, T/8, …)."""
    n: int = 16
    """Continuations per position."""
    trace_tokens: int = 40
    """Trace length in tokens."""
    max_total_len: int = 56
    """Absolute cap on trace + continuation tokens."""
    temperature: float = 0.7
    level: int = 4
    """Arithmetic level of the prompt (4 = four 2-digit terms: a worked solution of ≥ 40 tokens)."""
    seed: int = 0


SETUPS = {"smoke": Setup(substrate="tiny", positions=2, n=4, trace_tokens=12, max_total_len=16),
          "quick": Setup(substrate="tiny", positions=4, n=8, max_total_len=48),
          "full": Setup()}

CLAIMS = (
    Claim("E172-PF1", "Potential at 8 positions of a 40-token SmolLM2 trace (n = 16) by forks of one teacher-forced "
          "pass is at least 3x faster than re-prefilling prompt + prefix n times per position.",
          "[R] performance target", "—", "pf1_speedup", ">=", 3.0),
    Claim("E172-PF1-counts", "The fork scan and the naive re-prefill path give identical counts at every position "
          "with the same RNG streams.", "[D] same law, same streams", "—", "pf1_identical_share", ">=", 1.0,
          judge_on="exact", exact_why="a comparison of integer counts drawn from the same seeded streams; no sampling "
          "error separates the two paths"),
)
TINY_NOTE = ("quick/smoke: a random-initialised tiny model stands in for SmolLM2 (no model load); observed values "
             "recorded, judged at full on hf:smollm2")


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _tiny_case(s: Setup) -> tuple[Any, list[int], list[int], Any, Any, str]:
    from agentmill.lm.fork import WhiteBoxForker
    from agentmill.lm.tiny import TinyConfig, TinyLM

    lm = TinyLM(TinyConfig(layers=2, d=64, heads=4, max_len=80, seed=s.seed))
    prompt = [256] + list(b"Question: What is 23 + 45 + 17 + 30?\nSolution:")[: 80 - s.max_total_len - 1]
    trace = list(b" 23 + 45 = 68. 68 + 17 = 85. 85 + 30 = 115. Answer: 115\n")[: s.trace_tokens]
    return WhiteBoxForker(lm), prompt, trace, (lambda ids: bool(ids) and int(ids[-1]) % 2 == 0), None, \
        "tiny: random-initialised TinyLM 2x64 (stand-in)"


def _model_case(s: Setup, ctx: RunContext) -> tuple[Any, list[int], list[int], Any, Any, str]:
    from agentmill.envs.arithmetic import STOP_REGEX, example_pair, make_task
    from agentmill.lm.fork import WhiteBoxForker

    lm = ctx.load_lm()
    lm = getattr(lm, "lm", lm)
    task = make_task(s.level, 172 + s.seed, 0)
    prompt = lm.render(task.completion_prompt(example_pair(s.level, 172 + s.seed, 0)))
    trace = lm.encode(" " + task.worked_solution() + "\n")[: s.trace_tokens]
    if len(trace) < s.trace_tokens:
        raise ValueError(f"the level-{s.level} worked solution has {len(trace)} tokens, fewer than {s.trace_tokens}")
    stop_re = re.compile(STOP_REGEX)

    def verifier(ids: list[int]) -> bool:
        return task.verify(lm.decode(ids)).value == 1.0

    def stop(ids: list[int]) -> bool:
        return "\n" in lm.decode(ids[-1:]) and bool(stop_re.search(lm.decode(ids)))

    return WhiteBoxForker(lm), prompt, trace, verifier, stop, f"{ctx.model} (SmolLM2-135M-Instruct fp32)"


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    import torch

    from agentmill.methods.cliff_tokens.potential import PotentialConfig, PotentialEstimator

    torch.manual_seed(s.seed)
    src, prompt, trace, verifier, stop, substrate = (_tiny_case(s) if s.substrate == "tiny"
                                                     else _model_case(s, ctx))
    positions = [int(round(i * s.trace_tokens / s.positions)) for i in range(s.positions)]
    cfg = PotentialConfig(n=s.n, temperature=s.temperature, max_total_len=s.max_total_len, early_stop_zeros=0,
                          seed=s.seed)
    key = (s.seed, 1)
    load0 = os.getloadavg()[0]
    # warm-up: one short forward so neither path pays torch's first-call costs
    src.lm.forward(torch.tensor([prompt[:8]]))
    fork = PotentialEstimator(src, verifier, cfg, stop=stop)
    t0 = time.perf_counter()
    k_fork = fork.fork_counts(prompt, trace, positions, s.n, key)
    fork_total = time.perf_counter() - t0
    fork_t = dict(fork.last_timings)
    ctx.progress("pf1", 1, 2)
    naive = PotentialEstimator(src, verifier, cfg, stop=stop)
    t0 = time.perf_counter()
    k_naive = naive.naive_counts(prompt, trace, positions, s.n, key)
    naive_total = time.perf_counter() - t0
    naive_t = dict(naive.last_timings)
    ctx.progress("pf1", 2, 2)
    fp, npos = np.asarray(fork_t["per_position_s"]), np.asarray(naive_t["per_position_s"])
    pre = float(fork_t["prefill_s"])

    def ratio(idx: np.ndarray) -> float:
        i = np.asarray(idx, dtype=int)
        return float(npos[i].sum() / (fp[i].sum() + pre * len(i) / len(fp)))

    speed = bootstrap_ci(np.arange(len(fp), dtype=float), ratio, n_boot=2000, seed=s.seed)
    same = [a == b for a, b in zip(k_fork, k_naive)]
    ctx.data.update({"cpu": cpu_name(), "substrate": substrate, "load_avg_start": load0,
                     "load_avg_end": os.getloadavg()[0], "torch_threads": torch.get_num_threads(),
                     "prompt_tokens": len(prompt), "trace_tokens": len(trace), "positions": positions,
                     "counts_fork": [list(x) for x in k_fork], "counts_naive": [list(x) for x in k_naive],
                     "fork_prefill_s": pre, "fork_per_position_s": fp.tolist(), "naive_per_position_s": npos.tolist(),
                     "fork_total_s": fork_total, "naive_total_s": naive_total,
                     "fork_counters": fork.counters.to_dict(), "naive_counters": naive.counters.to_dict(),
                     "speedup_point_total": naive_total / fork_total})
    out = {"pf1_speedup": speed,
           "pf1_identical_share": Estimate.exact(float(np.mean(same)), n=len(same)),
           "pf1_fork_s": Estimate.exact(fork_total, n=len(fp)),
           "pf1_naive_s": Estimate.exact(naive_total, n=len(fp)),
           "pf1_naive_prefill_tokens": Estimate.exact(float(naive.counters.prefill_tokens)),
           "pf1_fork_prefill_tokens": Estimate.exact(float(fork.counters.prefill_tokens))}
    if s.substrate == "tiny":
        return unjudged(out, [c.metric for c in CLAIMS], TINY_NOTE, ctx.data)
    return out


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    from agentmill.experiments.plotting import pyplot, save

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.2, 3.2))
    pos = data["positions"]
    ax.plot(pos, data["naive_per_position_s"], "o-", label="naive: re-prefill n x (P + t), then decode")
    ax.plot(pos, data["fork_per_position_s"], "s-", label=f"fork (+ {data['fork_prefill_s']:.2f} s shared pass)")
    ax.set_xlabel("scored position t")
    ax.set_ylabel("wall seconds")
    ax.set_title(f"PF-1 on {data['substrate'].split(' (')[0]}: {data['speedup_point_total']:.2f}x", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return [save(fig, out / "pf1_times.png")]


EXPERIMENT = Experiment(
    id="e172.cliff_perf_smollm2",
    title="E172 PF-1: fork scan vs naive re-prefill potential estimation on SmolLM2",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    scale_note="wall clock on this machine (CPU and load average in the record), one torch thread, one repeat per "
               "path; SmolLM2-135M fp32 at full, a random-initialised tiny model at quick (unjudged); a "
               "teacher-forced worked solution as the 40-token trace; temperature-only sampling.",
    uses_model=True,
    requires=frozenset({"hf"}),
    parallel_safe=False,
    quick_budget_s=5,
)
