"""Which weight format makes SmolLM2's dense layers cheap on this CPU, and how flat is their cost in the row count?

    python benchmarks/linear_kernels.py [--rows 1,2,3,4,6,8,12,16] [--reps 5] [--threads 1]
                                        [--out benchmarks/results/linear_kernels.json]

Decode and speculative verification are bound by the dense products: every step reads each projection's weights
once, whatever the number of rows (tokens) in the step. Speculation pays only when verifying k drafted tokens costs
little more than decoding one, i.e. when c(k)/c(1) of these products stays near 1 (issue 21). This benchmark times
the dense part of one SmolLM2-135M forward — the fused q/k/v, o, gate/up and down projections of all 30 layers
and the tied LM head, read in model order so each layer's weights leave the cache before they are used again —
for each weight format PyTorch offers on a CPU:

- ``fp32``: ``F.linear`` on float32 weights (the engine today);
- ``bf16``: ``F.linear`` on bfloat16 weights and activations;
- ``int8-dyn``: fbgemm/x86 dynamic quantisation (``quantized.linear_dynamic``): int8 weights per output channel,
  activations quantised per call;
- ``int8-wo``: weight-only int8 per output channel (``_weight_int8pack_mm``), float32 activations;
- ``int4-wo``: weight-only 4-bit in groups of 32 along the input with a scale and a zero per group
  (``_weight_int4pack_mm_for_cpu``) — the layout of the GGUF's Q4_1 blocks (w = d·q + m), so it could serve the
  shipped model's quantised tensors without re-quantising.

It prints, per format and row count, the milliseconds of one forward's dense products, c(B)/c(1), the speed-up
over fp32 at the same B, and each format's relative weight error ‖W − Ŵ‖/‖W‖ (a cheap proxy only: a format is
adopted only after its KL to the fp32 logits and its greedy agreement on held-out prompts are measured). Medians
of ``--reps`` passes, formats interleaved within each pass so machine noise hits them alike; the CPU model, its
vector extensions and the load average before and after go into the output. A format whose kernel is missing on
this build is reported as such. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from agentmill.core.machine import host_cpu  # noqa: E402
from agentmill.core.records import write_json_atomic  # noqa: E402

GROUP = 32
"""Input elements per 4-bit group (GGUF Q4_0/Q4_1 blocks hold 32 weights)."""


def smollm2_matrices() -> list[tuple[str, object]]:
    """SmolLM2-135M's dense weights in forward order: per layer qkv (fused), o, gate_up (fused), down; then the
    tied LM head."""
    import torch

    from agentmill.lm.hf import load

    sd = {k: v.detach().float() for k, v in load("smollm2").model.state_dict().items()}
    out = []
    layers = sorted({int(k.split(".")[2]) for k in sd if k.startswith("model.layers.")})
    for i in layers:
        p = f"model.layers.{i}."
        out.append(("qkv", torch.cat([sd[p + f"self_attn.{n}_proj.weight"] for n in "qkv"], 0).contiguous()))
        out.append(("o", sd[p + "self_attn.o_proj.weight"].contiguous()))
        out.append(("gate_up", torch.cat([sd[p + "mlp.gate_proj.weight"], sd[p + "mlp.up_proj.weight"]], 0)
                    .contiguous()))
        out.append(("down", sd[p + "mlp.down_proj.weight"].contiguous()))
    out.append(("head", sd.get("lm_head.weight", sd["model.embed_tokens.weight"]).contiguous()))
    return out


def _int4_group_quant(w):
    """Asymmetric 4-bit per 32-input group: q in 0..15, w ≈ d·q + m; returns (q int32, d, m)."""
    import torch

    n, k = w.shape
    g = w.view(n, k // GROUP, GROUP)
    lo, hi = g.amin(-1), g.amax(-1)
    d = ((hi - lo) / 15).clamp_min(1e-12)
    q = torch.round((g - lo[..., None]) / d[..., None]).clamp(0, 15).to(torch.int32)
    return q.view(n, k), d, lo


def formats(w) -> dict[str, tuple[object, float] | str]:
    """{format: (callable x -> x @ Ŵᵀ, relative weight error)} for one matrix, or a reason string."""
    import torch
    import torch.nn.functional as F

    norm = float(w.norm())
    out: dict[str, tuple[object, float] | str] = {"fp32": (lambda x, w=w: F.linear(x, w), 0.0)}
    wb = w.to(torch.bfloat16)
    out["bf16"] = (lambda x, wb=wb: F.linear(x.to(torch.bfloat16), wb), float((wb.float() - w).norm()) / norm)
    scale = (w.abs().amax(1) / 127).clamp_min(1e-12)
    q8 = torch.round(w / scale[:, None]).clamp(-127, 127)
    err8 = float((q8 * scale[:, None] - w).norm()) / norm
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            qw = torch.quantize_per_channel(w, scale.double(), torch.zeros(w.shape[0], dtype=torch.long), 0,
                                            torch.qint8)
            packed = torch.ops.quantized.linear_prepack(qw, None)
        out["int8-dyn"] = (lambda x, p=packed: torch.ops.quantized.linear_dynamic(x, p), err8)
    except (RuntimeError, AttributeError) as e:
        out["int8-dyn"] = f"unavailable: {e}"
    try:
        w8, s8 = q8.to(torch.int8).contiguous(), scale.contiguous()
        torch._weight_int8pack_mm(torch.zeros(1, w.shape[1]), w8, s8)
        out["int8-wo"] = (lambda x, w8=w8, s8=s8: torch._weight_int8pack_mm(x, w8, s8), err8)
    except (RuntimeError, AttributeError) as e:
        out["int8-wo"] = f"unavailable: {e}"
    try:
        q4, d, m = _int4_group_quant(w)
        packed4 = torch._convert_weight_to_int4pack_for_cpu(q4, 1)
        sz = torch.stack([d, m + 8 * d], -1).transpose(0, 1).contiguous()  # the kernel computes (q - 8)·s + z
        err4 = float(((q4.view(*d.shape, GROUP) * d[..., None] + m[..., None]).view_as(w) - w).norm()) / norm
        out["int4-wo"] = (lambda x, p=packed4, sz=sz: torch._weight_int4pack_mm_for_cpu(x, p, GROUP, sz), err4)
    except (RuntimeError, AttributeError) as e:
        out["int4-wo"] = f"unavailable: {e}"
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", default="1,2,3,4,6,8,12,16", help="row counts B (tokens per forward)")
    ap.add_argument("--reps", type=int, default=5, help="interleaved passes per row count (median)")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument("--formats", default="fp32,bf16,int8-dyn,int8-wo,int4-wo")
    ap.add_argument("--slow-cap-ms", type=float, default=2000.0,
                    help="stop timing a format at larger B once one pass takes longer than this")
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "linear_kernels.json"))
    args = ap.parse_args(argv)
    import torch

    torch.backends.quantized.engine = "x86" if "x86" in torch.backends.quantized.supported_engines else "fbgemm"
    load_before = os.getloadavg()[0]
    rows = [int(r) for r in args.rows.split(",")]
    wanted = args.formats.split(",")
    mats = smollm2_matrices()
    torch.set_num_threads(args.threads)  # after the load, which sets its own count
    per = [formats(w) for _, w in mats]
    unavailable = {f: per[0][f] for f in wanted if isinstance(per[0].get(f), str)}
    fmts = [f for f in wanted if f in per[0] and f not in unavailable]
    errors = {f: {name: statistics.fmean(p[f][1] for (n, _), p in zip(mats, per) if n == name)
                  for name in dict(mats)} for f in fmts}
    ms: dict[str, dict[int, float]] = {f: {} for f in fmts}
    gen = torch.Generator().manual_seed(0)
    for b in rows:
        x_by_k = {k: torch.randn(b, k, generator=gen) for k in {w.shape[1] for _, w in mats}}
        live = [f for f in fmts if not ms[f] or max(ms[f].values()) < args.slow_cap_ms]
        times: dict[str, list[float]] = {f: [] for f in live}
        for rep in range(args.reps + 1):  # the first pass warms up and is dropped
            for f in live[rep % len(live):] + live[: rep % len(live)]:
                t0 = time.perf_counter()
                for (_, w), p in zip(mats, per):
                    p[f][0](x_by_k[w.shape[1]])
                if rep:
                    times[f].append((time.perf_counter() - t0) * 1e3)
        for f in live:
            ms[f][b] = statistics.median(times[f])
    table = {f: {b: {"ms": round(t, 3), "over_b1": round(t / ms[f][rows[0]], 3),
                     "fp32_over_this": round(ms["fp32"][b] / t, 3) if "fp32" in ms and b in ms["fp32"] else None}
                 for b, t in ms[f].items()} for f in fmts}
    print(f"dense products of one SmolLM2-135M forward, {args.threads} thread(s), CPU {host_cpu()}")
    print(f"{'format':<9} {'B':>3} {'ms':>9} {'c(B)/c(1)':>10} {'vs fp32':>8}")
    for f in fmts:
        for b, r in table[f].items():
            vs = f"{r['fp32_over_this']:.2f}×" if r["fp32_over_this"] else "-"
            print(f"{f:<9} {b:>3} {r['ms']:>9.2f} {r['over_b1']:>10.2f} {vs:>8}")
    for f in fmts:
        print(f"{f:<9} relative weight error: " + ", ".join(f"{n} {e:.2e}" for n, e in errors[f].items()))
    for f, why in unavailable.items():
        print(f"{f:<9} {why}")
    result = {"machine": {"cpu": host_cpu(), "torch_threads": torch.get_num_threads(), "cpus": os.cpu_count(), "python": platform.python_version(),
                          "torch": torch.__version__, "cpu_capability": torch.backends.cpu.get_cpu_capability(),
                          "quantized_engine": torch.backends.quantized.engine,
                          "load_before": round(load_before, 2), "load_after": round(os.getloadavg()[0], 2)},
              "threads": args.threads, "reps": args.reps, "rows": rows, "ms": table, "weight_error": errors,
              "unavailable": unavailable}
    write_json_atomic(args.out, result)
    print(f"written {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
