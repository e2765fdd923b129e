"""int8 weights for the engine's dense products, on PyTorch's fbgemm/x86 dynamic-quantised linear kernel [R].

Decode reads every weight once per step, so bytes are time: int8 weights are a quarter of float32's, and the kernel's
cost stays nearly flat from 1 to 16 rows — the quantity that decides whether verifying drafted tokens pays
(docs/methods/dspark.md, "Weight formats"). Three choices make it usable for exact speculative decoding and keep
its error measured rather than assumed (``benchmarks/engine_weights.py``):

1. **Rows are quantised independently.** The kernel picks one activation scale for its whole input, so a row's
   result would depend on the other rows of the call, and verifying k drafted tokens together would not reproduce
   decoding them one at a time. Each row is divided by its own max |x| and two input columns holding +1 and −1
   (with zero weights) are appended: every row then spans exactly [−1, 1], the kernel's scale and zero point are
   the same for any batch, and as int8 products accumulate exactly in int32, a row's output is bitwise the same
   alone or in any batch (a test).
2. **No int16 saturation.** Without VNNI (AVX2, plain AVX-512) the kernel sums pairs of u8 × s8 products in
   saturating int16: 8-bit activations times 8-bit weights overflow (on the AVX2 host, Gaussian rows at d = 64 came
   out 8 % wrong against 0.3 % expected). There the weights keep 7 bits (|q| ≤ 63, pair sums ≤ 32,130 < 32,767) so
   the activations keep all 8; with VNNI the products accumulate in int32 and both use 8 bits.
3. **Activation smoothing** (SmoothQuant: Xiao et al., arXiv:2211.10438; α = 0.5 their default [P]): a few input
   channels of a transformer's dense products carry most of the magnitude, and a per-row scale set by them leaves
   the other channels a handful of levels. Channel j of the input is divided by
   s_j = max|X_j|^α / max|W_:,j|^(1−α) and column j of W multiplied by it (the product is unchanged in exact
   arithmetic); max|X_j| comes from one float32 prefill of a fixed calibration text (:data:`CALIBRATION_TEXTS`).
4. **Outlier channels apart** (LLM.int8(): Dettmers et al., arXiv:2208.07339 [P], who compute them in 16-bit): the
   ``outliers`` input channels with the largest calibration max |x| go through a second int8 product of their own, so
   their magnitude no longer sets the scale of the others; it keeps the exact integer path, hence the batch
   invariance of point 1, which a float product of those columns would not. Off by default: the second product's
   fixed cost per matmul ate the whole speed gain on the AVX2 host (``EngineConfig.int8_outliers``).

On the exploratory prompts (docs/LOG.md, 2026-11-29) mean KL to the float32 engine went 0.087 nats (per-tensor
scheme) → 0.037 (points 1–2) → 0.020 (3) → 0.005 (4, 32 channels); on held-out prompts the default (1–3) measured
0.027 and 1–4 0.012, both short of the rule for serving by default (KL ≤ 0.01, top-1 ≥ 0.97).
"""

from __future__ import annotations

import warnings
from typing import Any

CALIBRATION_TEXTS = (
    "Explain in two sentences why the sky looks blue during the day and red at sunset.",
    "def merge_sorted(a, b):\n    out, i, j = [], 0, 0\n    while i < len(a) and j < len(b):\n        "
    "if a[i] <= b[j]:\n            out.append(a[i]); i += 1\n        else:\n            out.append(b[j]); j += 1\n"
    "    return out + a[i:] + b[j:]",
    "A train leaves at 14:05 and arrives at 17:50. How long is the journey in minutes? Show the steps.",
    "Write a short, polite email declining a meeting invitation for Thursday and proposing Friday morning.",
    "List three differences between TCP and UDP, then say which one a video call would use and why.",
    "The committee met on 3 March 2024 and approved the budget of 1,250,000 EUR with 7 votes to 2.",
    '{"name": "search_files", "arguments": {"query": "KeyError in cache.py", "max_results": 5}}',
    "Translate to French: The library opens at nine and closes at six, except on Sundays.",
)
"""Mixed-domain text (prose, code, arithmetic, tool-call JSON) whose float32 prefill sets the smoothing scales. Fixed
here, so a given model and α always quantise to the same weights."""


def has_vnni() -> bool:
    """Whether this CPU has VNNI (int8 dot products accumulating in int32: no int16 saturation)."""
    from agentmill.core.machine import host_cpu

    return any(f in host_cpu()["flags"] for f in ("avx512_vnni", "avx_vnni"))


class _RowQuantized:
    """One fbgemm int8 product with rows quantised independently (point 1 of the module docstring)."""

    PAD = 8
    """Appended input columns (+1, −1, then zeros): keeps the packed width a multiple of 8."""

    def __init__(self, w: Any, levels: int) -> None:
        import torch

        scale = (w.abs().amax(1) / levels).clamp_min(1e-12).double()
        wide = torch.cat([w, w.new_zeros((w.shape[0], self.PAD))], 1)
        with warnings.catch_warnings():  # quantised tensor constructors warn of a future deprecation
            warnings.simplefilter("ignore")
            q = torch.clamp(torch.round(wide / scale[:, None].float()), -levels, levels)
            qw = torch._make_per_channel_quantized_tensor(q.to(torch.int8), scale,
                                                          torch.zeros(w.shape[0], dtype=torch.long), 0)
            self.packed = torch.ops.quantized.linear_prepack(qw, None)
        self.dequantized = qw.dequantize()[:, : w.shape[1]]  # for the owner's error measure; it deletes it
        tail = torch.zeros(self.PAD)
        tail[0], tail[1] = 1.0, -1.0
        self._tail = tail

    def __call__(self, x: Any) -> Any:
        import torch

        a = x.abs().amax(1, keepdim=True).clamp_min(1e-30)
        xe = torch.cat([x / a, self._tail.expand(x.shape[0], -1)], 1)
        return torch.ops.quantized.linear_dynamic(xe, self.packed, False) * a


class Int8Linear:
    """``x @ Wᵀ`` with int8 weights per output channel and 8-bit activation rows (see the module docstring).

    ``outliers``: input channels computed in a second int8 product of their own (point 4), ``smooth``: per-channel
    scales of the remaining channels (point 3)."""

    def __init__(self, w: Any, *, smooth: Any = None, outliers: Any = None, weight_levels: int | None = None) -> None:
        import torch

        if "x86" in torch.backends.quantized.supported_engines:
            torch.backends.quantized.engine = "x86"
        w = w.detach().float()
        n_in = w.shape[1]
        out_idx = torch.as_tensor([] if outliers is None else outliers, dtype=torch.long)
        mask = torch.ones(n_in, dtype=torch.bool)
        mask[out_idx] = False
        self.keep = torch.nonzero(mask)[:, 0] if len(out_idx) else None
        self.outliers = out_idx if len(out_idx) else None
        self.smooth = None if smooth is None else smooth.detach().float().clamp_min(1e-5)
        wk = w if self.keep is None else w[:, self.keep]
        if self.smooth is not None and self.smooth.shape[0] != wk.shape[1]:
            raise ValueError(f"smooth has {self.smooth.shape[0]} scales for {wk.shape[1]} input channels")
        self.weight_levels = weight_levels or (127 if has_vnni() else 63)
        self.main = _RowQuantized((wk if self.smooth is None else wk * self.smooth[None, :]).contiguous(),
                                  self.weight_levels)
        self.side = None if self.outliers is None else _RowQuantized(w[:, self.outliers].contiguous(),
                                                                     self.weight_levels)
        self.shape = tuple(w.shape)
        deq = torch.empty_like(w)
        main = self.main.dequantized if self.smooth is None else self.main.dequantized / self.smooth[None, :]
        if self.keep is None:
            deq = main
        else:
            deq[:, self.keep] = main
            deq[:, self.outliers] = self.side.dequantized
        self.rel_error = float((deq - w).norm() / w.norm().clamp_min(1e-30))
        """‖W − Ŵ‖ / ‖W‖ of the packed weights (a cheap proxy; the logits' KL is what counts)."""
        for part in (self.main, self.side):  # a float copy of every weight would undo the memory int8 saves
            if part is not None:
                del part.dequantized

    def __call__(self, x: Any, b: Any = None) -> Any:
        x = x.float()
        xk = x if self.keep is None else x.index_select(1, self.keep)
        y = self.main(xk if self.smooth is None else xk / self.smooth)
        if self.side is not None:
            y = y + self.side(x.index_select(1, self.outliers))
        return y if b is None else y + b


def smoothing_scales(act_absmax: Any, w: Any, alpha: float) -> Any:
    """s_j = max|X_j|^α / max|W_:,j|^(1−α), clamped away from 0 (SmoothQuant's per-channel migration)."""
    wmax = w.detach().float().abs().amax(0).clamp_min(1e-5)
    return (act_absmax.float().clamp_min(1e-5) ** alpha / wmax ** (1 - alpha)).clamp_min(1e-5)


def calibration_ids(tokenizer: Any, vocab_size: int) -> list[list[int]]:
    """Token ids of :data:`CALIBRATION_TEXTS` (as chat turns when the tokenizer has a template); seeded random ids
    when there is no tokenizer."""
    if tokenizer is None:
        import numpy as np

        rng = np.random.default_rng(0)
        return [rng.integers(0, vocab_size, 64).tolist() for _ in CALIBRATION_TEXTS]
    out = []
    for text in CALIBRATION_TEXTS:
        if getattr(tokenizer, "chat_template", None) or hasattr(tokenizer, "apply_chat_template"):
            ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                                tokenize=True)
            if isinstance(ids, dict) or hasattr(ids, "input_ids"):
                ids = ids["input_ids"]
        else:
            ids = tokenizer.encode(text)
        out.append([int(t) for t in ids][:256])
    return out


def quantize_int8(engine: Any, alpha: float, outliers: int = 0) -> dict[str, Any]:
    """Replace the engine's dense weights (q/k/v, o, gate/up, down, LM head) by :class:`Int8Linear`s, smoothed with
    ``alpha`` (0 = no smoothing) and with the ``outliers`` largest input channels in a product of their own, both
    from one float32 prefill of the calibration text. Returns what was done."""
    from agentmill.lm.engine.model import RaggedBatch

    m = engine.model
    names = ("qkv", "o", "gate_up", "down")
    stats: dict[int, Any] = {}
    if alpha > 0 or outliers > 0:
        m._record = stats
        try:
            for ids in calibration_ids(engine.tokenizer, engine.vocab_size):
                s = engine.new_sequence()
                try:
                    engine.forward(RaggedBatch().add(s, ids, "all"))
                finally:
                    engine.free(s)
        finally:
            m._record = None

    def q(w: Any) -> Int8Linear:
        import torch

        if not stats:
            return Int8Linear(w)
        amax = stats[id(w)]
        k = min(outliers, w.shape[1] // 4)
        idx = torch.argsort(amax, descending=True)[:k] if k > 0 else None
        rest = slice(None) if idx is None else torch.isin(torch.arange(w.shape[1]), idx, invert=True)
        smooth = smoothing_scales(amax[rest], w[:, rest], alpha) if alpha > 0 else None
        return Int8Linear(w, outliers=idx, smooth=smooth)

    for L in m.layers:
        for n in names:
            L[n] = q(L[n])
    m.lm_head = q(m.lm_head)  # a quantised copy when tied: the embedding lookup stays exact
    return {"alpha": alpha, "outliers": outliers, "weight_levels": m.lm_head.weight_levels,
            "calibration_texts": len(CALIBRATION_TEXTS)}
