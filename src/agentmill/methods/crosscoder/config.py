"""Configuration of a crosscoder: sparsity, code normalisation, partition, loss and optimiser (frozen dataclasses).

Values carry their source tag: [P] stated by the paper or its public code, [R] chosen here where the sources are
silent (docs/methods/crosscoder.md lists them)."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

SPARSITIES = ("l1", "topk", "batchtopk")
CODE_NORMS = ("crosscoder_sum", "sae_concat", "none")
LOSSES = ("sum_mse", "e175")


@dataclass(frozen=True)
class Partition:
    """Latents split by index into A-exclusive, B-exclusive and shared blocks (DFC; default 5/5/90 [P])."""

    a_excl: float = 0.05
    """Fraction of latents that read and write model A only: indices [0, n_A), n_A = floor(a_excl * D) [P]."""
    b_excl: float = 0.05
    """Fraction that read and write model B only: indices [n_A, n_A + n_B) [P]."""
    tied_shared: int = 0
    """How many shared latents (the first of the shared block) have one decoder tied across models."""
    tied_penalty: float = 0.1
    """Sparsity weight multiplier of the tied latents [R]."""

    def sizes(self, dict_size: int) -> tuple[int, int]:
        """``(n_A, n_B)`` for ``dict_size`` latents; raises on fractions that leave no shared block."""
        if self.a_excl < 0 or self.b_excl < 0 or self.a_excl + self.b_excl >= 1:
            raise ValueError(f"partition: need a_excl, b_excl >= 0 and a_excl + b_excl < 1, got a_excl="
                             f"{self.a_excl}, b_excl={self.b_excl}")
        n_a, n_b = int(self.a_excl * dict_size), int(self.b_excl * dict_size)  # E175 int(dict_size * pct) [P]
        if self.tied_shared < 0 or self.tied_shared > dict_size - n_a - n_b:
            raise ValueError(f"partition: tied_shared={self.tied_shared} exceeds the shared block "
                             f"({dict_size - n_a - n_b} latents)")
        return n_a, n_b


@dataclass(frozen=True)
class CrossCoderConfig:
    """One crosscoder: architecture, sparsity and training recipe (agentmill defaults; ``e175()`` for the paper's)."""

    dict_size: int = 1024
    """Number of latents D."""
    sparsity: Literal["l1", "topk", "batchtopk"] = "batchtopk"
    """``l1`` (Lindsey et al.), ``topk`` (per row, E175 [P]) or ``batchtopk`` (over the batch, with an inference
    threshold)."""
    k: int = 32
    """Active latents per row (topk) or on average per row (batchtopk)."""
    l1_coeff: float = 2.0
    """λ of the ``l1`` sparsity term, ramped from 0 over the first 5 % of steps (ckkissane default_cfg [P])."""
    code_norm: Literal["crosscoder_sum", "sae_concat", "none"] = "crosscoder_sum"
    """How a latent's size c_i is measured: Σ_m ‖d_i^m‖, ‖[d_i^A; d_i^B]‖ or 1 (dictionary_learning [P])."""
    partition: Partition | None = None
    """Exclusive/shared blocks (DFC) or None (plain crosscoder)."""
    loss: Literal["sum_mse", "e175"] = "sum_mse"
    """``sum_mse``: mean over rows of Σ_m ‖x^m − x̂^m‖²; ``e175``: element-mean MSE plus E175's L1 terms [P]."""
    lambda_shared: float = 1e-3
    """E175 loss: weight of mean |f_shared| [P]."""
    lambda_excl: float = 1e-3
    """E175 loss: weight of ½(mean |f_(A-excl ∪ shared)| + mean |f_(B-excl ∪ shared)|) [P]."""
    auxk_alpha: float = 1 / 32
    """Weight of the AuxK loss on dead latents (dictionary_learning default [P]); 0 turns it off."""
    k_aux: int | None = None
    """Dead latents used by AuxK; None: min(512, d / 2) [P]."""
    dead_window: int = 50_000
    """A latent that has not fired in this many rows is dead for AuxK [R: CPU runs see fewer tokens]."""
    threshold_beta: float = 0.999
    """EMA factor of the BatchTopK inference threshold θ [P]."""
    threshold_start_frac: float = 0.25
    """θ is tracked from this fraction of steps on [R: dictionary_learning starts at step 1,000]."""
    lr: float | None = None
    """Adam learning rate; None: 2e-4 / sqrt(D / 2^14) (dictionary_learning auto-scaling [P])."""
    batch_size: int = 512
    """Rows per step."""
    steps: int = 2000
    """Optimiser steps."""
    warmup: int = 100
    """Linear warm-up steps."""
    decay_start_frac: float = 0.8
    """Linear decay to 0 over the last 20 % of steps (dictionary_learning decay_start [P])."""
    grad_clip: float = 1.0
    """Gradient-norm clip."""
    normalize: bool = True
    """Scale each model's rows by s_m = sqrt(d / E‖h^m‖²) before training [R: E175 does not normalise]."""
    decoder_init_norm: float = 0.08
    """Norm of each decoder row per model at initialisation (ckkissane [P])."""
    seed: int = 0
    """Initialisation and batch-order seed."""

    def __post_init__(self) -> None:
        if self.sparsity not in SPARSITIES:
            raise ValueError(f"sparsity must be one of {SPARSITIES}, got {self.sparsity!r}")
        if self.code_norm not in CODE_NORMS:
            raise ValueError(f"code_norm must be one of {CODE_NORMS}, got {self.code_norm!r}")
        if self.loss not in LOSSES:
            raise ValueError(f"loss must be one of {LOSSES}, got {self.loss!r}")
        if self.dict_size < 2:
            raise ValueError(f"dict_size must be >= 2, got {self.dict_size}")
        if self.sparsity != "l1" and not 1 <= self.k < self.dict_size:
            raise ValueError(f"k must satisfy 1 <= k < dict_size={self.dict_size}, got k={self.k}")
        if self.partition is not None:
            self.partition.sizes(self.dict_size)

    @property
    def learning_rate(self) -> float:
        return self.lr if self.lr is not None else 2e-4 / math.sqrt(self.dict_size / 2 ** 14)

    @classmethod
    def e175(cls, p: float = 0.10, k: int = 45, dict_size: int = 8192, lambda_excl: float = 1e-3) -> CrossCoderConfig:
        """E175's DFC recipe (`dfc.py`, `train.py` [P]): per-row TopK ranked by a alone, partition (p, p), no
        normalisation, no AuxK, element-mean MSE + λ_sh·mean|f_shared| + λ_excl·½(…), Adam 1e-4, batch 1,024,
        9,000 steps, grad-clip 1.0."""
        return cls(dict_size=dict_size, sparsity="topk", k=k, code_norm="none", partition=Partition(p, p),
                   loss="e175", lambda_shared=1e-3, lambda_excl=lambda_excl, auxk_alpha=0.0, lr=1e-4,
                   batch_size=1024, steps=9000, warmup=0, decay_start_frac=1.0, normalize=False)

    def scaled(self, **changes: object) -> CrossCoderConfig:
        """A copy with ``changes`` (the experiments' smaller sizes)."""
        return replace(self, **changes)  # type: ignore[arg-type]
