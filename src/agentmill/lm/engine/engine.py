"""``LlamaEngine``: the ragged model plus its KV pool, behind the ``TargetModel`` surface [R].

Why an engine of our own: transformers' caches cannot hold ragged per-request lengths in one batch or roll back
rejected tokens cheaply, and speculative decoding needs both (plus plain autoregressive decoding through the same
code path as its baseline).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentmill.core.machine import capped_threads
from agentmill.lm.engine.config import EngineConfig, LlamaConfig
from agentmill.lm.engine.kv import KVPool
from agentmill.lm.engine.model import ForwardOut, LlamaForward, RaggedBatch


@dataclass(frozen=True)
class SamplingParams:
    """Per-request sampling; ``temperature == 0`` is greedy."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    max_tokens: int = 128
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        if not 0 <= self.temperature <= 2:
            raise ValueError(f"temperature must be in [0, 2], got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0 or self.max_tokens < 1:
            raise ValueError("top_k must be >= 0 and max_tokens >= 1")


class LlamaEngine:
    """A Llama-family target with per-request KV caches. One thread owns an engine."""

    def __init__(self, cfg: LlamaConfig, weights: dict[str, Any], ecfg: EngineConfig | None = None, *,
                 tokenizer: Any = None, eos_token_ids: tuple[int, ...] = (), fingerprint: str = ""):
        import torch

        ecfg = ecfg or EngineConfig()
        self.model_config, self.engine_config = cfg, ecfg
        self.model = LlamaForward(cfg, weights, ecfg)
        self.kv = KVPool(cfg.num_layers, cfg.num_kv_heads, cfg.head_dim, dtype=self.model.dtype,
                         budget_bytes=ecfg.kv_budget_bytes,
                         max_len=min(ecfg.max_model_len, cfg.max_position_embeddings))
        self.tokenizer = tokenizer
        self.eos_token_ids = tuple(eos_token_ids)
        self._threads = capped_threads(ecfg.threads)
        torch.set_num_threads(self._threads)
        self.quantization: dict[str, Any] | None = None
        if ecfg.weights == "int8":
            from agentmill.lm.engine.quant import quantize_int8

            self.quantization = quantize_int8(self, ecfg.int8_smooth, ecfg.int8_outliers)
        fmt = ecfg.dtype if ecfg.weights == "dense" else \
            f"{ecfg.dtype}:{ecfg.weights}-s{ecfg.int8_smooth:g}-o{ecfg.int8_outliers}"
        self.fingerprint = f"{fingerprint}:{fmt}" if fingerprint else fmt

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_hf_model(cls, model: Any, ecfg: EngineConfig | None = None, *, tokenizer: Any = None,
                      fingerprint: str = "") -> LlamaEngine:
        """Take the weights of a loaded transformers ``LlamaForCausalLM`` (the engine keeps its own copy)."""
        ecfg = ecfg or EngineConfig()
        cfg = LlamaConfig.from_hf(model.config)
        eos = getattr(model.config, "eos_token_id", None)
        eos_ids = tuple(eos) if isinstance(eos, list | tuple) else (() if eos is None else (int(eos),))
        return cls(cfg, dict(model.state_dict()), ecfg, tokenizer=tokenizer, eos_token_ids=eos_ids,
                   fingerprint=fingerprint)

    @classmethod
    def smollm2_135m(cls, ecfg: EngineConfig | None = None) -> LlamaEngine:
        """The embedded SmolLM2-135M-Instruct, weights from the lm layer's verified safetensors cache."""
        from agentmill.lm.hf import load

        ecfg = ecfg or EngineConfig()
        lm = load("smollm2")
        return cls.from_hf_model(lm.model, ecfg, tokenizer=lm.tokenizer,
                                 fingerprint=str(lm.info.get("gguf_sha256", "smollm2"))[:16])

    # ------------------------------------------------------------------ TargetModel
    @property
    def vocab_size(self) -> int:
        return self.model_config.vocab_size

    def new_sequence(self) -> int:
        return self.kv.new_sequence()

    def free(self, seq: int) -> None:
        self.kv.free(seq)

    def seq_len(self, seq: int) -> int:
        return self.kv.seq_len(seq)

    def truncate(self, seq: int, length: int) -> None:
        self.kv.truncate(seq, length)

    def forward(self, batch: RaggedBatch) -> ForwardOut:
        import torch

        with torch.inference_mode():
            return self.model.forward(batch, self.kv)

    # ------------------------------------------------------------------ reference AR loop
    def generate(self, prompts: list[list[int]], params: SamplingParams = SamplingParams()) -> list[list[int]]:
        """Plain autoregressive decoding of every prompt together (one ragged forward per step)."""
        import torch

        from agentmill.lm.engine.sampling import sample_rows

        seqs = [self.new_sequence() for _ in prompts]
        gens = [torch.Generator().manual_seed(params.seed + i) if params.seed is not None else None
                for i in range(len(prompts))]
        outs: list[list[int]] = [[] for _ in prompts]
        try:
            batch = RaggedBatch()
            for s, p in zip(seqs, prompts):
                batch.add(s, p, "last")
            fo = self.forward(batch)
            active = list(range(len(prompts)))
            stop_ids = set(params.stop_token_ids) | (set() if params.ignore_eos else set(self.eos_token_ids))
            while active:
                toks = sample_rows(fo.logits, params, [gens[i] for i in active])
                nxt = []
                for i, t in zip(active, toks):
                    if t in stop_ids:
                        continue
                    outs[i].append(t)
                    if len(outs[i]) < params.max_tokens and self.seq_len(seqs[i]) + 1 < self.kv.max_len:
                        nxt.append(i)
                active = nxt
                if not active:
                    break
                batch = RaggedBatch()
                for i in active:
                    batch.add(seqs[i], [outs[i][-1]], "last")
                fo = self.forward(batch)
        finally:
            for s in seqs:
                self.free(s)
        return outs
