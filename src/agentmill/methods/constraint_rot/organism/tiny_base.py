"""``tiny:organism``: a tiny random Llama with a ChatML byte tokenizer, the organism base of smoke runs.

A smoke run must train, validate and decode an organism in seconds on any machine, with nothing the user has to
provide: SmolLM2 (the real base, :func:`.train.load_base`) takes ~25 s to load and ~40 min to train. This base has
the real base's surface — a ``LlamaForCausalLM`` (all seven projections, so the organism's LoRA config applies
unchanged) and a tokenizer with a ChatML template, ``encode`` and ``<|im_end|>`` — at 2 layers × 32 wide. It is
untrained noise: what a run on it shows is the plumbing, never a behaviour.

The weights are built once, deterministically (seeded initialisation), into a directory the caller names (the
experiments use their work dir) and read back from there, so every load gives the same bytes and an adapter trained
on them fits later loads: the base's ``sha256`` is the digest of its ``model.safetensors``, checked against the
adapter's card like the GGUF digest of SmolLM2 (``organism/actor.check_adapter``).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from agentmill.lm.finetune import require_torch
from agentmill.methods.constraint_rot.organism.train import Base

TINY_BASE = "tiny:organism"
"""The spec that names this base in a setup (``e164.constraint_rot_organism``'s smoke profile and the experiments
that copy its recipe)."""
SPECIAL = {"<|im_start|>": 256, "<|im_end|>": 257}
PAD = 258
VOCAB = 259
MAX_POSITIONS = 1 << 15
"""Byte tokens make a rendered episode ~6k long; RoPE has no learned positions to outgrow, so the limit is only
the config's."""
WEIGHTS = "model.safetensors"


class ChatMLBytes:
    """Bytes plus ``<|im_start|>``/``<|im_end|>``: the tokenizer surface the organism uses (chat template, encode,
    decode, the end-of-turn id). Lossless, so ``decode(encode(text)) == text``."""

    chat_template = "chatml"
    eos_token_id, pad_token_id, unk_token_id = SPECIAL["<|im_end|>"], PAD, None

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        out: list[int] = []
        for part in re.split(r"(<\|im_start\|>|<\|im_end\|>)", text):
            out += [SPECIAL[part]] if part in SPECIAL else list(part.encode())
        return out

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
        return {"input_ids": self.encode(text)}

    def decode(self, ids: Any, skip_special_tokens: bool = True) -> str:
        return bytes(i for i in ids if i < 256).decode(errors="replace")

    def convert_tokens_to_ids(self, token: str) -> int | None:
        return SPECIAL.get(token)

    def apply_chat_template(self, msgs: Any, add_generation_prompt: bool = True, tokenize: bool = True) -> Any:
        text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in msgs)
        text += "<|im_start|>assistant\n" if add_generation_prompt else ""
        return self.encode(text) if tokenize else text


def tiny_llama(seed: int = 0) -> Any:
    """A fresh random ``LlamaForCausalLM`` over :class:`ChatMLBytes`' vocabulary, initialised from ``seed`` without
    touching the global torch RNG. One attention head: at byte-token lengths (4-5k) the attention matrices are the
    cost, and one head instead of four took 2.1× less CPU per batched prefill and 2.7× less per training step
    (2026-11-28, AMD EPYC, AVX2, one thread)."""
    torch = require_torch()
    import transformers

    cfg = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=1, num_key_value_heads=1, max_position_embeddings=MAX_POSITIONS,
                                   eos_token_id=SPECIAL["<|im_end|>"], pad_token_id=PAD,
                                   bos_token_id=SPECIAL["<|im_start|>"])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return transformers.LlamaForCausalLM(cfg).eval()


def tiny_base(directory: str | os.PathLike[str]) -> Base:
    """A fresh ``Base`` read from ``directory``, built there first (seed 0; written to a temporary sibling and
    renamed, so a kill never leaves half a model) when it holds none."""
    import transformers
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    directory = Path(directory)
    if not (directory / WEIGHTS).exists():
        directory.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", dir=directory.parent))
        try:
            tiny_llama().save_pretrained(tmp)
            if directory.exists():  # a directory without weights: nothing in it was usable
                shutil.rmtree(directory)
            os.replace(tmp, directory)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    sha = hashlib.sha256((directory / WEIGHTS).read_bytes()).hexdigest()
    model = transformers.LlamaForCausalLM.from_pretrained(directory).eval()
    return Base(model, ChatMLBytes(), sha, TINY_BASE)
