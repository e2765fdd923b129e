"""A (policy, reference) pair of transformers models for log-ratio scoring ([R]; docs/methods/progress_advantage.md).

Two ways to get a pair:

- **One copy with a LoRA adapter** (default): the policy is base + LoRA (peft), the reference is the *same
  weights* with the adapter disabled (``PeftModel.disable_adapter()``), so only one model sits in memory (PERF-6
  target: ≤ 0.6× the memory of two copies). The adapter is new (LoRA B = 0, so policy == reference until trained)
  or loaded from a folder saved by :meth:`HFPair.save_adapter`.
- **Two full models** (``second_model=``): the policy is another local model; the tokenizers must be equal.

Both views implement the white-box LM surface the scorer and the decode loop use (``encode``, ``render``,
``forward``, ``logprobs``, ``generate``, ``max_positions``...). The pair loads its *own* copy of the base model
(never the process-wide cached ``load_lm`` object): wrapping a model in peft modifies it in place.

Scoring-time rules (progress_advantage README, Caveats): fp32 logits, ``model.eval()``, LoRA dropout 0 — log-ratios
between a LoRA copy and its base are small, and bf16 rounding or dropout noise can exceed them.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentmill.lm.base import Completion, ForwardOutput, GenerateConfig, MissingExtraError, Prompt


@dataclass(frozen=True)
class LoRASettings:
    """LoRA hyperparameters of a new adapter ([R] defaults)."""

    r: int = 8
    """Rank (r = 8 [R])."""
    alpha: int = 16
    """Scaling numerator α (update scale α/r = 2; [R])."""
    dropout: float = 0.0
    """LoRA dropout; 0 so that scoring is deterministic (README caveats)."""
    target_modules: tuple[str, ...] = ("q_proj", "v_proj")
    """Modules that get adapters: attention query/value projections (Llama naming, as in SmolLM2)."""
    seed: int = 0
    """torch seed for the adapter's A-matrix initialisation."""


def _peft() -> Any:
    try:
        import peft
    except ImportError as e:
        raise MissingExtraError("peft", "HFPair with a LoRA adapter (peft)") from e
    return peft


class _View:
    """One side of an :class:`HFPair`: the shared HFLM with the adapter forced on or off around every forward."""

    def __init__(self, pair: HFPair, lm: Any, adapter_on: bool | None, spec: str) -> None:
        self._pair, self._lm, self._on, self.spec = pair, lm, adapter_on, spec

    def __getattr__(self, name: str) -> Any:  # encode, decode, render, tokenizer, pad_id, max_positions, ...
        return getattr(self._lm, name)

    def __repr__(self) -> str:
        return f"HFPair view {self.spec!r}"

    @contextlib.contextmanager
    def _mode(self) -> Iterator[None]:
        if self._on is False:
            with self._pair.peft_model.disable_adapter():
                yield
        else:
            yield

    def forward(self, input_ids: Any, cache: Any | None = None, **kw: Any) -> ForwardOutput:
        with self._mode():
            return type(self._lm).forward(self, input_ids, cache, **kw)

    def logprobs(self, prompt: Prompt, continuation: str) -> Any:
        return type(self._lm).logprobs(self, prompt, continuation)

    def generate(self, prompts: Sequence[Prompt], config: GenerateConfig = GenerateConfig()) -> list[Completion]:
        return type(self._lm).generate(self, prompts, config)


class HFPair:
    """A policy/reference pair over one base model (+ LoRA) or two models. ``policy`` and ``reference`` are LMs.

    ``base`` is the part after ``hf:`` (default the embedded SmolLM2). ``adapter``: None (no adapter: then
    ``second_model`` must be given), ``"new"`` (a fresh LoRA, B = 0) or a folder written by :meth:`save_adapter`.
    """

    def __init__(self, base: str = "smollm2", adapter: str | os.PathLike[str] | None = "new", *,
                 second_model: str | None = None, lora: LoRASettings = LoRASettings(), threads: int | None = None,
                 ) -> None:
        from agentmill.lm import hf

        if (adapter is None) == (second_model is None):
            raise ValueError("HFPair needs exactly one of adapter= (LoRA over one copy) or second_model= (two models)")
        self.base_spec = f"hf:{base}"
        self.lora = lora
        self.adapter_source = None if adapter is None else str(adapter)
        self._lm = hf.load_uncached(base, dtype="float32", threads=threads, max_batch=16)
        self.peft_model: Any = None
        if second_model is not None:
            other = hf.load_uncached(second_model, dtype="float32", threads=threads, max_batch=16)
            from agentmill.lm.scoring import tokenizer_fingerprint

            if tokenizer_fingerprint(other) != tokenizer_fingerprint(self._lm):
                raise ValueError(f"HFPair: the tokenizers of hf:{base} and hf:{second_model} differ (vocabulary, "
                                 "special tokens or chat template); a token-level log-ratio needs one tokenizer")
            self.policy: Any = other
            self.reference: Any = self._lm
            return
        peft = _peft()
        import torch

        if str(adapter) == "new":
            torch.manual_seed(lora.seed)
            cfg = peft.LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                                  target_modules=list(lora.target_modules), bias="none", task_type="CAUSAL_LM")
            self.peft_model = peft.get_peft_model(self._lm.model, cfg)
        else:
            path = Path(adapter).expanduser()  # type: ignore[arg-type]
            if not (path / "adapter_config.json").exists():
                raise ValueError(f"HFPair: {path} holds no adapter_config.json (save one with save_adapter)")
            self.peft_model = peft.PeftModel.from_pretrained(self._lm.model, str(path), is_trainable=True)
        self.peft_model.eval()
        self._lm.model = self.peft_model
        tag = "new" if str(adapter) == "new" else Path(adapter).name  # type: ignore[arg-type]
        self.policy = _View(self, self._lm, True, f"{self.base_spec}+adapter={tag}")
        self.reference = _View(self, self._lm, False, self.base_spec)

    def trainable_parameters(self) -> list[Any]:
        """The LoRA parameters (what a trainer should optimise); empty for a two-model pair."""
        if self.peft_model is None:
            return []
        return [p for p in self.peft_model.parameters() if p.requires_grad]

    def save_adapter(self, path: str | os.PathLike[str]) -> Path:
        """Write the adapter atomically: a temporary folder, then a rename (a kill never leaves half an adapter)."""
        if self.peft_model is None:
            raise ValueError("HFPair.save_adapter: this pair has no adapter (two full models)")
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
        try:
            self.peft_model.save_pretrained(str(tmp))
            if path.exists():
                shutil.rmtree(path)
            os.replace(tmp, path)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
        return path
