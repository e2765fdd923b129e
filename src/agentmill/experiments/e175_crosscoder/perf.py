"""E175 performance: what the crosscoder instruments cost on this machine, measured side by side in one run.

- PF-4: greedy decoding with a residual hook whose positions are inactive during decode (``last_prompt``) against
  no hook: the hook's mask check per block call should cost ≤ 3 %.
- PF-5: greedy decoding with every position routed through a crosscoder (``route(positions="all")``, self
  encoding) against clean decoding: ≤ 15 % slower (a D = 1,024 crosscoder is ≈ 2.4 MFLOP per token against
  ≈ 270 for SmolLM2).
- PF-6: capturing block 15's output by stopping the forward there (a hook that ends the call once it has the
  activation) against a full forward with every hidden state, the way ``store.collect_paired`` collects today:
  time ratio ≤ 0.65 (16 of 30 blocks and no LM head). The store does not use early exit yet; this row says whether
  it would pay. The captured activations must equal the full forward's.
- PF-7: one BatchTopK training step of a D = 1,024 crosscoder on batch 512 of paired d = 576 rows: ≤ 0.25 s.
- PF-9: reading an fp16 activation store back (``ActivationStore.rows``): ≥ 200 MB/s of stored bytes.

PF-7 and PF-9 need no model and are judged at quick. PF-4/5/6 are SmolLM2 claims: quick runs them on a
random-initialised ``tiny:`` stand-in and records the ratios unjudged; full loads SmolLM2. Comparisons are
interleaved (A, B, A, B …) so a change in the machine's load hits both arms alike; the CPU is named in the record.
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.machine import host_cpu
from agentmill.core.stats import Estimate, repeats_estimate
from agentmill.experiments.e175_crosscoder import PAPER
from agentmill.experiments.protocol import Claim, Experiment, RunContext, models_read, unjudged

MODEL_METRICS = ("pf4_hook_overhead", "pf5_route_overhead", "pf6_time_ratio")


@dataclass(frozen=True)
class Setup:
    model: str = "hf:smollm2"
    """The model of PF-4/5/6: ``hf:smollm2`` (judged) or a ``tiny:`` stand-in (recorded unjudged)."""
    layer: int = 15
    """Block whose output is hooked, routed and captured (E175's middle layer for SmolLM2's 30 blocks)."""
    decode_tokens: int = 48
    """Greedy tokens per PF-4/PF-5 generation (batch 1)."""
    capture_batch: int = 8
    """Prompts per PF-6 forward."""
    capture_len: int = 64
    """Tokens per PF-6 prompt."""
    repeats: int = 5
    """Interleaved repeats per comparison (each gives one ratio)."""
    dict_size: int = 1024
    """Crosscoder latents D (PF-5 and PF-7)."""
    cc_d: int = 576
    """Residual width of PF-7's paired rows (SmolLM2's)."""
    cc_batch: int = 512
    """PF-7 rows per step."""
    cc_steps: int = 4
    """PF-7 training steps per timed repeat."""
    store_rows: int = 16384
    """PF-9 paired rows written to and read back from the store (2 × 576 fp16 each: 37.7 MB at 16,384)."""
    seed: int = 0


SETUPS = {
    "smoke": Setup(model="tiny:new?d=32&layers=2&heads=2&max_len=256&seed=1", layer=1, decode_tokens=8,
                   capture_batch=2, capture_len=16, repeats=2, dict_size=64, cc_d=32, cc_batch=64, cc_steps=1,
                   store_rows=512),
    "quick": Setup(model="tiny:new?d=64&layers=4&heads=4&max_len=256&seed=1", layer=2, decode_tokens=16,
                   capture_batch=4, capture_len=32, repeats=3, cc_steps=2, store_rows=4096),
    "full": Setup(),
}

CLAIMS = (
    Claim("E175-PF4", "Decoding with a residual hook whose positions are inactive is at most 3 % slower than "
          "decoding without it.", "[R] performance target", "—", "pf4_hook_overhead", "<=", 0.03),
    Claim("E175-PF5", "Decoding with every position routed through a D = 1,024 crosscoder (self encoding) is at "
          "most 15 % slower than clean decoding.", "[R] performance target", "—", "pf5_route_overhead", "<=", 0.15),
    Claim("E175-PF6", "Capturing block 15 by stopping the forward there takes at most 0.65 of a full forward with "
          "every hidden state.", "[R] performance target", "—", "pf6_time_ratio", "<=", 0.65),
    Claim("E175-PF7", "One BatchTopK crosscoder step (D = 1,024, batch 512, d = 576 × 2) takes at most 0.25 s.",
          "[R] performance target", "—", "pf7_step_s", "<=", 0.25),
    Claim("E175-PF9", "An fp16 activation store reads back at 200 MB/s or more.", "[R] performance target", "—",
          "pf9_read_mb_s", ">=", 200.0),
)


class _Captured(Exception):
    """Raised by the early-exit hook to end a forward once the wanted block's output is in hand."""

    def __init__(self, hidden: Any) -> None:
        super().__init__("captured")
        self.hidden = hidden


def capture_early(lm: Any, ids: Any, layer: int) -> Any:
    """Block ``layer``'s output for ``ids`` [B, T], without running the blocks after it or the LM head."""

    def stop(_layer: int, hidden: Any) -> None:
        raise _Captured(hidden.detach().clone())

    handle = lm.add_hook(layer, stop)
    try:
        lm.forward(ids)
    except _Captured as c:
        return c.hidden
    finally:
        handle.remove()
    raise RuntimeError(f"the hook on block {layer} never fired")


def _timed(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


PROMPT = "Explain in two sentences why the sky looks blue during the day and red at sunset."


def greedy_steps(lm: Any, ids: list[int], steps: int) -> list[int]:
    """``steps`` greedy tokens after ``ids`` through ``lm.forward`` and its KV cache, never stopping at an end of
    turn: every arm decodes the same number of tokens, so the ratios compare equal work."""
    import torch

    out = lm.forward(torch.tensor([ids]))
    toks: list[int] = []
    for _ in range(steps):
        tok = int(out.logits[0, -1].argmax())
        toks.append(tok)
        out = lm.forward(torch.tensor([[tok]]), out.cache)
    return toks


def decode_ratios(lm: Any, s: Setup) -> dict[str, Any]:
    """PF-4 and PF-5: interleaved greedy decodes clean / inactive hook / routed; per-repeat ratios."""
    import torch

    from agentmill.lm.intervene import intervene
    from agentmill.methods.crosscoder.config import CrossCoderConfig
    from agentmill.methods.crosscoder.interventions import route
    from agentmill.methods.crosscoder.model import CrossCoder

    ids = list(lm.render(PROMPT))
    p_len = len(ids)
    cc = CrossCoder(CrossCoderConfig(dict_size=s.dict_size, seed=s.seed), lm.hidden_size)
    cc.threshold = 0.0  # a random crosscoder: θ only decides which latents are kept, not the FLOPs
    for p in cc.parameters():
        p.requires_grad_(False)

    def clean() -> list[int]:
        return greedy_steps(lm, ids, s.decode_tokens)

    def hooked() -> list[int]:
        with intervene(lm, s.layer, lambda h, where: h, "last_prompt", prompt_len=p_len):
            return greedy_steps(lm, ids, s.decode_tokens)

    def routed() -> list[int]:
        with route(lm, cc, layer=s.layer, view=0, positions="all", prompt_len=p_len):
            return greedy_steps(lm, ids, s.decode_tokens)

    with torch.no_grad():
        base = clean()  # warm-up, and the reference the inactive hook must reproduce
        same = hooked() == base
        routed()
        times: dict[str, list[float]] = {"clean": [], "hook": [], "route": []}
        for _ in range(s.repeats):
            for name, fn in (("clean", clean), ("hook", hooked), ("route", routed)):
                times[name].append(_timed(fn))
    hook_r = [h / c for h, c in zip(times["hook"], times["clean"])]
    route_r = [r / c for r, c in zip(times["route"], times["clean"])]
    return {"times": times, "hook_ratios": hook_r, "route_ratios": route_r, "hook_tokens_identical": same,
            "prompt_tokens": p_len, "generated_tokens": len(base)}


def capture_ratios(lm: Any, s: Setup) -> dict[str, Any]:
    """PF-6: early exit at block ``layer`` against a full forward with every hidden state; equality checked."""
    import torch

    rng = np.random.default_rng(s.seed)
    base = list(lm.render(PROMPT))
    rows = [[base[(i + j) % len(base)] for j in range(s.capture_len)] for i in range(s.capture_batch)]
    ids = torch.tensor(rows)
    vocab = getattr(lm, "vocab_size", None)
    if vocab:  # the same shapes with a little variety, inside the vocabulary
        ids[:, ::7] = torch.as_tensor(rng.integers(0, min(int(vocab), 1000), size=ids[:, ::7].shape))

    def full() -> Any:
        return lm.forward(ids, hidden_states=True).hidden_states[s.layer + 1]

    def early() -> Any:
        return capture_early(lm, ids, s.layer)

    with torch.no_grad():
        max_diff = float((full().float() - early().float()).abs().max())
        ratios, walls = [], []
        for _ in range(s.repeats):
            tf, te = _timed(full), _timed(early)
            ratios.append(te / tf)
            walls.append((tf, te))
    return {"ratios": ratios, "walls": walls, "max_abs_diff": max_diff}


def step_times(s: Setup) -> list[float]:
    """PF-7: seconds per BatchTopK step, ``cc_steps`` steps per repeat through ``train_crosscoder``."""
    from agentmill.methods.crosscoder.config import CrossCoderConfig
    from agentmill.methods.crosscoder.train import train_crosscoder

    rng = np.random.default_rng(s.seed)
    rows = rng.standard_normal((4 * s.cc_batch, 2, s.cc_d)).astype(np.float32)
    cfg = CrossCoderConfig(dict_size=s.dict_size, sparsity="batchtopk", batch_size=s.cc_batch, steps=s.cc_steps,
                           seed=s.seed)
    train_crosscoder(rows, CrossCoderConfig(dict_size=s.dict_size, batch_size=s.cc_batch, steps=1, seed=s.seed),
                     scales=(1.0, 1.0))  # warm-up
    out = []
    for _ in range(s.repeats):
        _, log = train_crosscoder(rows, cfg, scales=(1.0, 1.0), log_every=10**9)
        out.append(log.seconds / s.cc_steps)
    return out


def store_rates(s: Setup) -> tuple[list[float], int]:
    """PF-9: MB/s of stored bytes read back by ``ActivationStore.rows`` (a fresh store in a temp directory)."""
    from agentmill.methods.crosscoder.store import ActivationStore

    rng = np.random.default_rng(s.seed)
    n = s.store_rows
    with tempfile.TemporaryDirectory(prefix="e175_pf9_") as tmp:
        st = ActivationStore(Path(tmp) / "store")
        for lo in range(0, n, 4096):
            m = min(4096, n - lo)
            st.write_shard({"x": rng.standard_normal((m, 2, s.cc_d)).astype(np.float16),
                            "doc": np.arange(lo, lo + m), "pos": np.zeros(m), "token": np.zeros(m),
                            "label": np.zeros(m)})
        size = sum(p.stat().st_size for p in st.path.glob("shard_*.safetensors"))
        reader = ActivationStore(st.path)
        reader.rows()  # warm the page cache: the target is the read path, not the disk
        rates = [size / 1e6 / _timed(reader.rows) for _ in range(s.repeats)]
    return rates, size


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    from agentmill.lm import load_lm

    steps = step_times(s)
    ctx.progress("perf", 1, 4)
    rates, size = store_rates(s)
    ctx.progress("perf", 2, 4)
    lm = load_lm(s.model)
    dec = decode_ratios(lm, s)
    ctx.progress("perf", 3, 4)
    cap = capture_ratios(lm, s)
    ctx.progress("perf", 4, 4)
    ctx.data.update({"cpu": host_cpu(), "model": s.model, "layer": s.layer, "pf7_step_s": steps,
                     "pf9_rates_mb_s": rates, "pf9_store_bytes": size, "decode": dec, "capture": cap})
    out: dict[str, Estimate] = {
        "pf7_step_s": repeats_estimate(steps, log=True),
        "pf9_read_mb_s": repeats_estimate(rates, log=True),
        "pf6_time_ratio": repeats_estimate(cap["ratios"], log=True),
        "pf6_max_abs_diff": Estimate.exact(cap["max_abs_diff"]),
    }
    for key, ratios in (("pf4_hook_overhead", dec["hook_ratios"]), ("pf5_route_overhead", dec["route_ratios"])):
        r = repeats_estimate(ratios, log=True)
        out[key] = dataclasses.replace(r, value=r.value - 1, lo=r.lo - 1, hi=r.hi - 1)  # keeps n, level, method
    broken = []
    if not dec["hook_tokens_identical"]:
        broken.append("PF-4: the inactive hook changed the greedy tokens")
    if cap["max_abs_diff"] > 1e-4:
        broken.append(f"PF-6: early-exit activations differ from the full forward's by {cap['max_abs_diff']:.2e}")
    if broken:
        ctx.data["precondition"] = "precondition not met: " + "; ".join(broken)
    if not s.model.startswith("hf:smollm2"):
        out = unjudged(out, MODEL_METRICS, f"{s.model} stands in for SmolLM2: PF-4/5/6 are judged at full", ctx.data)
    return out


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    from agentmill.experiments.plotting import pyplot, save

    times = (data.get("decode") or {}).get("times") or {}
    if not times:
        return []
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5.2, 3.2))
    for i, (name, ts) in enumerate(times.items()):
        ax.plot([i] * len(ts), ts, "o", alpha=0.6)
    ax.set_xticks(range(len(times)), [{"clean": "clean", "hook": "inactive hook", "route": "route(all)"}.get(n, n)
                                      for n in times])
    ax.set_ylabel("seconds per greedy generation")
    ax.set_title(f"E175 PF-4/PF-5 on {data.get('model', '?')}: {data['decode'].get('generated_tokens', '?')} "
                 "tokens, batch 1", fontsize=9)
    fig.tight_layout()
    return [save(fig, out / "pf45_decode_times.png")]


EXPERIMENT = Experiment(
    id="e175.crosscoder_perf",
    title="E175 performance: hook and routing overhead in decoding, early-exit capture, crosscoder step, store read",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    scale_note="wall-clock on this machine (CPU named in the record), one torch thread, comparisons interleaved; "
               "PF-5 routes through a random-initialised D = 1,024 crosscoder; PF-6's early exit is a hook that ends "
               "the forward (the store still collects with full forwards); quick judges PF-7/PF-9 only (tiny "
               "stand-in for PF-4/5/6); PF-1/2/3/8 are E172's.",
    requires=frozenset({"hf"}),
    reads=models_read("model"),
    parallel_safe=False,
    quick_budget_s=10,
)
