"""Configuration of the ragged Llama engine [R].

``LlamaConfig`` is the architecture, read from a transformers config; ``EngineConfig`` is how the engine runs it.
Two members of the family are read: Llama (SmolLM2) and Qwen2 (Qwen2.5-Coder), which is Llama plus biases on the
q, k and v projections (transformers' ``Qwen2Attention``: ``bias=True`` on those three, none on ``o_proj`` or the
MLP), a larger RoPE base and optional sliding-window layers, which the engine refuses rather than ignores.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal


@dataclass(frozen=True)
class LlamaConfig:
    """The Llama-family architecture: RMSNorm, RoPE, grouped-query attention, SwiGLU MLP."""

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    max_position_embeddings: int
    tie_word_embeddings: bool
    qkv_bias: bool = False
    """Additive biases on the q, k and v projections (Qwen2); Llama has none."""
    model_type: str = "llama"

    @classmethod
    def from_hf(cls, cfg: Any) -> LlamaConfig:
        """Read a transformers ``LlamaConfig`` or ``Qwen2Config``; refuse what this engine does not implement (rather
        than drift)."""
        model_type = getattr(cfg, "model_type", "llama")
        if model_type not in ("llama", "qwen2"):
            raise ValueError(f"the engine runs Llama and Qwen2 models, got model_type={model_type!r}")
        if model_type == "qwen2" and (getattr(cfg, "use_sliding_window", False)
                                      or "sliding_attention" in (getattr(cfg, "layer_types", None) or ())):
            raise ValueError("Qwen2 sliding-window attention is not implemented by the engine")
        scaling = getattr(cfg, "rope_scaling", None)
        rope_type = (scaling or {}).get("rope_type", (scaling or {}).get("type", "default"))
        if rope_type != "default":
            raise ValueError(f"rope scaling {rope_type!r} is not implemented by the engine")
        if (model_type == "llama" and getattr(cfg, "attention_bias", False)) or getattr(cfg, "mlp_bias", False):
            raise ValueError("attention/MLP biases are not implemented by the engine")
        if getattr(cfg, "hidden_act", "silu") != "silu":
            raise ValueError(f"hidden_act {cfg.hidden_act!r} is not implemented by the engine (SwiGLU uses silu)")
        heads = int(cfg.num_attention_heads)
        theta = getattr(cfg, "rope_theta", None)
        if theta is None:  # transformers >= 5 keeps it in rope_parameters
            theta = (getattr(cfg, "rope_parameters", None) or {}).get("rope_theta", 10000.0)
        return cls(
            vocab_size=int(cfg.vocab_size),
            hidden_size=int(cfg.hidden_size),
            intermediate_size=int(cfg.intermediate_size),
            num_layers=int(cfg.num_hidden_layers),
            num_heads=heads,
            num_kv_heads=int(getattr(cfg, "num_key_value_heads", None) or heads),
            head_dim=int(getattr(cfg, "head_dim", None) or cfg.hidden_size // heads),
            rms_norm_eps=float(cfg.rms_norm_eps),
            rope_theta=float(theta),
            max_position_embeddings=int(cfg.max_position_embeddings),
            tie_word_embeddings=bool(getattr(cfg, "tie_word_embeddings", False)),
            qkv_bias=model_type == "qwen2",
            model_type=model_type,
        )

    @property
    def kv_bytes_per_token(self) -> int:
        """fp32 bytes of K and V for one token over all layers (SmolLM2-135M: 30 × 2 × 3 × 64 × 4 = 46 080)."""
        return self.num_layers * 2 * self.num_kv_heads * self.head_dim * 4


@dataclass(frozen=True)
class EngineConfig:
    """How the engine runs a model."""

    dtype: Literal["float32", "bfloat16", "float64"] = "float32"
    """Weights, activations and KV; logits are always returned as float32."""
    weights: Literal["dense", "int8"] = "dense"
    """Format of the dense products' weights (q/k/v, o, gate/up, down, LM head). ``dense``: stored in ``dtype``.
    ``int8``: int8 per output channel with activations quantised per call (PyTorch's fbgemm/x86 dynamic linear;
    float32 only); the embedding lookup, norms, attention and KV stay in ``dtype``. Decode reads the weights once
    per step, so a quarter of the bytes is most of the speed (``lm/engine/quant.py``)."""
    int8_smooth: float = 0.5
    """SmoothQuant's α for ``int8`` (0 = no smoothing): per-input-channel scales from a float32 calibration prefill."""
    int8_outliers: int = 0
    """Input channels of each int8 product (largest calibration max |x|) computed in a product of their own. 32 halves
    the KL to float32 on SmolLM2 (0.027 → 0.012 nats) but its second product per matmul costs the whole speed gain
    on a 2-core AVX2 host (57 ms per decode step, as float32; 37 ms without), so it is off by default."""
    threads: int = 1
    """torch intra-op threads set by the engine before its forwards (one forward thread; 2 cores here)."""
    max_model_len: int = 2048
    """Longest sequence (prompt + generation) a request may reach."""
    kv_budget_bytes: int = 4 << 30
    """Byte budget of all KV caches together; allocation beyond it raises ``KVBudgetError``."""
    attention: Literal["per_request", "padded"] = "per_request"
    """Per-request SDPA over each request's own KV, or one padded batch (must agree within 1e-5 in fp32)."""
    tap_layers: tuple[int, ...] = ()
    """Hidden states returned per token: -1 = embeddings, i = output of layer i (DeepSpec's convention)."""
    return_final_hidden: bool = False
    """Also return the final-norm hidden state of every token (the drafter's feature cache)."""

    def __post_init__(self) -> None:
        if self.dtype not in ("float32", "bfloat16", "float64"):
            raise ValueError(f"dtype must be float32, bfloat16 or float64, got {self.dtype!r}")
        if self.threads < 1 or self.max_model_len < 1 or self.kv_budget_bytes < 1:
            raise ValueError("threads, max_model_len and kv_budget_bytes must be positive")
        if self.weights not in ("dense", "int8"):
            raise ValueError(f"weights must be dense or int8, got {self.weights!r}")
        if self.int8_outliers < 0:
            raise ValueError(f"int8_outliers must be >= 0, got {self.int8_outliers}")
        if not 0.0 <= self.int8_smooth <= 1.0:
            raise ValueError(f"int8_smooth must be in [0, 1], got {self.int8_smooth}")
        if self.weights == "int8" and self.dtype != "float32":
            raise ValueError(f"int8 weights run with float32 activations, got dtype={self.dtype!r}")
        if self.attention not in ("per_request", "padded"):
            raise ValueError(f"attention must be per_request or padded, got {self.attention!r}")
