"""A ragged Llama forward pass [R]; also Qwen2, which adds q/k/v biases.

Dense work (projections, MLP, LM head) runs once on the flattened new tokens of every request, ``[T_total, d]``;
attention runs per request over that request's own KV, causal among its new tokens. Requests therefore never pad
to each other's lengths, and a request can be prefilling a chunk while others verify drafts in the same forward.

Dense products use ``F.linear`` (weight as stored): on this CPU ``x @ W.T`` with a few rows took 4-5x longer.
The maths follows the transformers Llama implementation (RMSNorm in float32 then cast, rotate-half RoPE, grouped
query attention, SwiGLU); equality with it is a test, not an assumption.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from agentmill.lm.engine.config import EngineConfig, LlamaConfig
from agentmill.lm.engine.kv import KVPool
from agentmill.lm.engine.quant import Int8Linear


@dataclass
class RaggedItem:
    """New tokens of one sequence and which of their rows need logits."""

    seq: int
    tokens: list[int]
    logits: Literal["last", "all", "none"] = "last"


@dataclass
class RaggedBatch:
    items: list[RaggedItem] = field(default_factory=list)

    def add(self, seq: int, tokens: list[int], logits: Literal["last", "all", "none"] = "last") -> RaggedBatch:
        if not tokens:
            raise ValueError(f"sequence {seq}: a batch item needs at least one token")
        self.items.append(RaggedItem(seq, list(tokens), logits))
        return self

    @property
    def total_tokens(self) -> int:
        return sum(len(it.tokens) for it in self.items)


@dataclass
class ForwardOut:
    logits: Any                 # [rows, V] float32: the requested rows, in item order
    rows: list[tuple[int, int]]  # (item index, token offset within the item) of each logits row
    taps: Any | None = None      # [T_total, m*d]
    final_hidden: Any | None = None


ROW_EXACT_MAX = 16
"""Longest block attended row by row when ``row_exact`` (verify blocks; longer prefills use one masked call)."""


class LlamaForward:
    """Weights plus the ragged forward; the KV lives in a ``KVPool`` passed in."""

    def __init__(self, cfg: LlamaConfig, weights: dict[str, Any], ecfg: EngineConfig):
        import torch

        self.cfg, self.ecfg = cfg, ecfg
        self.dtype = getattr(torch, ecfg.dtype)
        w = {k: v.detach().to(self.dtype).contiguous() for k, v in weights.items()}
        self.embed = w["model.embed_tokens.weight"]
        self.lm_head = self.embed if cfg.tie_word_embeddings or "lm_head.weight" not in w else w["lm_head.weight"]
        self.final_norm = w["model.norm.weight"]
        self.layers = []
        for i in range(cfg.num_layers):
            p = f"model.layers.{i}."
            # q, k, v fused into one matmul: one GEMM over the flattened tokens instead of three.
            qkv = torch.cat([w[p + "self_attn.q_proj.weight"], w[p + "self_attn.k_proj.weight"],
                             w[p + "self_attn.v_proj.weight"]], 0)
            qkv_bias = torch.cat([w[p + "self_attn.q_proj.bias"], w[p + "self_attn.k_proj.bias"],
                                  w[p + "self_attn.v_proj.bias"]], 0) if cfg.qkv_bias else None
            gate_up = torch.cat([w[p + "mlp.gate_proj.weight"], w[p + "mlp.up_proj.weight"]], 0)
            self.layers.append({
                "in_norm": w[p + "input_layernorm.weight"], "qkv": qkv, "qkv_bias": qkv_bias,
                "o": w[p + "self_attn.o_proj.weight"],
                "post_norm": w[p + "post_attention_layernorm.weight"], "gate_up": gate_up,
                "down": w[p + "mlp.down_proj.weight"],
            })
        self.row_exact = ecfg.weights == "int8"
        """Verify blocks (≤ ``ROW_EXACT_MAX`` new tokens) attend one token at a time. With int8 weights every dense
        product is bitwise batch-invariant, but the activations are re-quantised at every layer, so the ~1e-7
        difference between a masked block attention and one-row attention can cross a rounding step and grow: on
        SmolLM2, 14 of 15 speculative greedy decodes left plain decoding within 1–31 tokens (2026-11-29). Attending
        row by row makes a verified token's whole forward the one plain decoding computes."""
        self.head_weight = self.lm_head
        """The LM head's weight in ``dtype`` (a drafter shares it; ``lm_head`` may become an int8 copy)."""
        self._record: dict[int, Any] | None = None
        """While set (int8 calibration), each dense product's input max |x| per channel, keyed by id(weight)."""
        hd = cfg.head_dim
        self.inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))

    # ------------------------------------------------------------------ pieces
    def _rms(self, x: Any, weight: Any) -> Any:
        import torch

        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.cfg.rms_norm_eps)
        return weight * xf.to(self.dtype)

    def _rope(self, positions: Any) -> tuple[Any, Any]:
        import torch

        freqs = positions.float()[:, None] * self.inv_freq[None, :]
        emb = torch.cat([freqs, freqs], -1)
        return emb.cos().to(self.dtype), emb.sin().to(self.dtype)

    @staticmethod
    def _rotate(x: Any, cos: Any, sin: Any) -> Any:
        import torch

        half = x.shape[-1] // 2
        rot = torch.cat([-x[..., half:], x[..., :half]], -1)
        return x * cos + rot * sin

    def _lin(self, x: Any, w: Any, b: Any = None) -> Any:
        """``F.linear`` with 2- or 3-row inputs padded to 4 rows. On this CPU the GEMM kernels chosen for 2–3 rows
        were slower than for 4 (LM head: 24.6 / 37.9 ms vs 19.9 ms for 4 rows and 10.6 ms for 1; a whole 2-token
        forward cost more than a 4-token one), which would tax exactly the short verify blocks (ℓ = 1, 2) that a
        scheduler picks under load and the MTP-1-like baseline."""
        import torch
        import torch.nn.functional as F

        if isinstance(w, Int8Linear):
            return w(x, b)
        if self._record is not None:
            a = x.detach().abs().amax(0).float()
            self._record[id(w)] = torch.maximum(self._record[id(w)], a) if id(w) in self._record else a
        n = x.shape[0]
        if n in (2, 3):
            return F.linear(torch.cat([x, x.new_zeros((4 - n, x.shape[1]))]), w, b)[:n]
        return F.linear(x, w, b)

    def _head(self, x: Any) -> Any:
        return self._lin(x, self.lm_head).float()

    # ------------------------------------------------------------------ forward
    def forward(self, batch: RaggedBatch, kv: KVPool) -> ForwardOut:
        """Run every item's new tokens, appending their K/V to ``kv``; returns the requested logits rows."""
        import torch
        import torch.nn.functional as F

        cfg = self.cfg
        if not batch.items:
            raise ValueError("empty batch")
        starts = [kv.seq_len(it.seq) for it in batch.items]
        for it in batch.items:
            kv.reserve(it.seq, len(it.tokens))
        tokens = torch.tensor([t for it in batch.items for t in it.tokens], dtype=torch.long)
        if int(tokens.max()) >= cfg.vocab_size or int(tokens.min()) < 0:
            raise ValueError(f"token id out of range [0, {cfg.vocab_size})")
        positions = torch.cat([torch.arange(s, s + len(it.tokens)) for s, it in zip(starts, batch.items)])
        offsets = [0]
        for it in batch.items:
            offsets.append(offsets[-1] + len(it.tokens))
        cos, sin = self._rope(positions)
        cos, sin = cos[:, None, :], sin[:, None, :]                      # [T, 1, hd]
        h = self.embed[tokens]                                           # [T, d]
        taps = [h] if -1 in self.ecfg.tap_layers else []
        nq, nkv, hd = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        for li, L in enumerate(self.layers):
            x = self._rms(h, L["in_norm"])
            qkv = self._lin(x, L["qkv"], L["qkv_bias"])
            q = qkv[:, : nq * hd].view(-1, nq, hd)
            k = qkv[:, nq * hd: (nq + nkv) * hd].view(-1, nkv, hd)
            v = qkv[:, (nq + nkv) * hd:].view(-1, nkv, hd)
            q, k = self._rotate(q, cos, sin), self._rotate(k, cos, sin)
            out = torch.empty((tokens.shape[0], nq, hd), dtype=self.dtype)
            for j, it in enumerate(batch.items):
                a, b, s = offsets[j], offsets[j + 1], starts[j]
                kv.write(it.seq, li, s, k[a:b].transpose(0, 1), v[a:b].transpose(0, 1))
                K, V = kv.view(it.seq, li, s + (b - a))                  # [nkv, s+n, hd]
                qj = q[a:b].transpose(0, 1)                              # [nq, n, hd]
                n = b - a
                if n == 1:
                    o = F.scaled_dot_product_attention(qj[None], K[None], V[None], enable_gqa=nkv != nq)
                elif self.row_exact and n <= ROW_EXACT_MAX:
                    # Each new token alone over its own prefix: the very call plain decoding makes for it, so its
                    # output is bitwise the same (see ``row_exact``).
                    o = torch.cat([F.scaled_dot_product_attention(qj[None, :, i: i + 1], K[None, :, : s + i + 1],
                                                                  V[None, :, : s + i + 1], enable_gqa=nkv != nq)
                                   for i in range(n)], 2)
                else:
                    # new token i sees every cached position and new tokens 0..i
                    mask = torch.ones((n, s + n), dtype=torch.bool).tril(diagonal=s)
                    o = F.scaled_dot_product_attention(qj[None], K[None], V[None], attn_mask=mask,
                                                       enable_gqa=nkv != nq)
                out[a:b] = o[0].transpose(0, 1)
            h = h + self._lin(out.reshape(-1, nq * hd), L["o"])
            x = self._rms(h, L["post_norm"])
            gu = self._lin(x, L["gate_up"])
            gate, up = gu[:, : cfg.intermediate_size], gu[:, cfg.intermediate_size:]
            h = h + self._lin(F.silu(gate) * up, L["down"])
            if li in self.ecfg.tap_layers:
                taps.append(h)
        for j, it in enumerate(batch.items):
            kv.set_length(it.seq, starts[j] + len(it.tokens))
        final = self._rms(h, self.final_norm)
        rows: list[tuple[int, int]] = []
        idx: list[int] = []
        for j, it in enumerate(batch.items):
            n = len(it.tokens)
            offs = range(n) if it.logits == "all" else [n - 1] if it.logits == "last" else []
            for o in offs:
                rows.append((j, o))
                idx.append(offsets[j] + o)
        logits = self._head(final[idx]) if idx else torch.zeros((0, cfg.vocab_size))
        return ForwardOut(logits=logits, rows=rows, taps=torch.cat(taps, -1) if taps else None,
                          final_hidden=final if self.ecfg.return_final_hidden else None)
