"""The one LoRA supervised fine-tuning loop (ARCHITECTURE.md §3, "model organisms").

Every model organism in the project — a small base model fine-tuned here on CPU to have exactly the behaviour a
paper's effect needs — trains through this module, so the properties that make a 45–90 minute CPU training safe to
run and to reuse are written once:

- **loss masks**: an :class:`Example` carries ``labels`` that are -100 outside the trained span, and optionally a
  second mask (``aux_labels``) whose mean loss is added with weight ``TrainCfg.aux_weight`` (:func:`weighted_loss`);
- **one schedule**: AdamW, linear warmup over ``warmup_share`` of the steps, then cosine decay to 0 (:func:`lr_factor`);
- **checkpoints every optimiser step, resumed bit for bit**: the LoRA weights, the optimiser and scheduler state and
  the torch RNG (dropout) go into one safetensors file with a JSON header (:func:`save_checkpoint`), so a killed
  run continues where it stopped and ends with the same weights and losses as an uninterrupted one;
- **snapshots**: adapters saved at chosen steps, beside the final one;
- **content-addressed adapters**: an adapter lives under ``<root>/<content_key(data, hyper-parameters, base)>`` and
  is trained once (:func:`obtain_adapter`); a directory holding its card is finished, and never overwritten;
- **safetensors only**: adapters, snapshots and checkpoints; nothing here pickles or unpickles;
- **validation gates before use**: a validation callable's gate results are stored in the adapter's card
  (:func:`validate_adapter`), and :func:`validated_adapter` hands an adapter out only when every gate passed —
  otherwise an :class:`Admission` saying "precondition not met" and which gates failed.

What a method keeps for itself: how its data are rendered into token ids and masks, its card's fields, its gates.
torch, peft and safetensors are imported inside the functions that need them.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from agentmill.core.paths import cache_root
from agentmill.core.records import atomic_target, write_json_atomic
from agentmill.lm.base import MissingExtraError

CARD_FILE = "adapter_card.json"
"""The default card name; a method may keep its own (the ConstraintRot organism's is ``organism_card.json``)."""
ADAPTER_FILE = "adapter_model.safetensors"
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
IGNORE = -100
"""The label of a position that carries no loss (the ``ignore_index`` of torch's cross-entropy and of transformers)."""


def require_torch() -> Any:
    try:
        import torch
    except ImportError as e:
        raise MissingExtraError("hf", "LoRA fine-tuning (torch)") from e
    return torch


def require_peft() -> Any:
    try:
        import peft
    except ImportError as e:
        raise MissingExtraError("peft", "LoRA fine-tuning (peft)") from e
    return peft


# ---------------------------------------------------------------------------------------------------- configuration
@dataclass(frozen=True)
class LoraCfg:
    """A LoRA on a Llama-style block. Its ``repr`` enters content addresses, so the class name and field order are
    part of every recorded adapter key: rename nothing here."""

    r: int = 16
    """Rank (low rank per LoRA, arXiv 2106.09685)."""
    alpha: int = 32
    """``lora_alpha``; update scale α/r = 2."""
    dropout: float = 0.05
    """``lora_dropout`` during training; inference may merge the weights, after which no dropout applies."""
    target_modules: tuple[str, ...] = LORA_TARGETS
    """All seven linear projections of a Llama block (all linear layers per QLoRA, arXiv 2305.14314)."""

    def __post_init__(self) -> None:
        if self.r < 1 or self.alpha <= 0:
            raise ValueError(f"LoraCfg: r must be >= 1 and alpha > 0, got r={self.r}, alpha={self.alpha}")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"LoraCfg.dropout must be in [0, 1), got {self.dropout}")
        if not self.target_modules:
            raise ValueError("LoraCfg.target_modules must not be empty")

    def peft_config(self) -> Any:
        peft = require_peft()
        return peft.LoraConfig(r=self.r, lora_alpha=self.alpha, lora_dropout=self.dropout,
                               target_modules=list(self.target_modules), bias="none", task_type="CAUSAL_LM")


@dataclass(frozen=True)
class TrainCfg:
    """The optimisation of :func:`train_lora`: AdamW, warmup then cosine, gradient accumulation."""

    lr: float = 3e-4
    """Peak AdamW learning rate."""
    epochs: float = 1.0
    """Passes over the data (fractions allowed: the order is cut after ``epochs × len(examples)`` examples)."""
    micro_batch: int = 2
    """Examples per forward pass (right-padded to the longest)."""
    grad_accum: int = 4
    """Micro-batches per optimiser step (effective batch = ``micro_batch × grad_accum``)."""
    seed: int = 0
    """Seeds the LoRA initialisation, dropout and the example order."""
    dtype: Literal["fp32", "bf16"] = "fp32"
    """``bf16`` trains under CPU autocast; the master weights and the optimiser stay fp32."""
    aux_weight: float = 0.0
    """Weight of the mean loss on ``Example.aux_labels`` beside the mean loss on ``labels``; 0 = labels only."""
    warmup_share: float = 0.05
    """Share of the optimiser steps spent in linear warmup (at least one step)."""
    weight_decay: float = 0.0

    def __post_init__(self) -> None:
        for name in ("micro_batch", "grad_accum"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be a positive int, got {v!r}")
        if not self.lr > 0 or not self.epochs > 0:
            raise ValueError(f"lr and epochs must be > 0, got lr={self.lr}, epochs={self.epochs}")
        if not self.aux_weight >= 0:
            raise ValueError(f"aux_weight must be >= 0, got {self.aux_weight}")
        if self.dtype not in ("fp32", "bf16"):
            raise ValueError(f"dtype must be 'fp32' or 'bf16', got {self.dtype!r}")
        if not 0.0 <= self.warmup_share < 1.0:
            raise ValueError(f"warmup_share must be in [0, 1), got {self.warmup_share}")

    def plan(self, n_examples: int) -> tuple[int, int, int]:
        """(micro-batches, optimiser steps, warmup steps) for ``n_examples`` examples."""
        n_micro = max(1, math.ceil(self.epochs * n_examples / self.micro_batch))
        steps = math.ceil(n_micro / self.grad_accum)
        return n_micro, steps, max(1, round(self.warmup_share * steps))


# ---------------------------------------------------------------------------------------------------- loss masks
@dataclass(frozen=True)
class Example:
    """One tokenised training example. ``labels[i]`` is the token ``ids[i]`` when position ``i`` is trained and
    :data:`IGNORE` (-100) otherwise; the model predicts position ``i`` from the positions before it, so a label at
    the first position is never used. ``aux_labels``, when given, is a second mask of the same length whose mean
    loss enters with ``TrainCfg.aux_weight`` (e.g. earlier turns of a transcript that are also worth learning)."""

    ids: Sequence[int]
    labels: Sequence[int]
    aux_labels: Sequence[int] | None = None

    def __post_init__(self) -> None:
        if not self.ids:
            raise ValueError("Example.ids must not be empty")
        if len(self.labels) != len(self.ids):
            raise ValueError(f"Example: {len(self.labels)} labels for {len(self.ids)} ids")
        if self.aux_labels is not None and len(self.aux_labels) != len(self.ids):
            raise ValueError(f"Example: {len(self.aux_labels)} aux_labels for {len(self.ids)} ids")

    @classmethod
    def completion(cls, prompt: Sequence[int], target: Sequence[int]) -> Example:
        """``prompt + target`` with the loss on the target alone."""
        return cls(list(prompt) + list(target), [IGNORE] * len(prompt) + list(target))


def weighted_loss(logits: Any, labels: Any, aux_labels: Any, aux_weight: float) -> Any:
    """Mean next-token loss on ``labels`` + ``aux_weight`` × mean next-token loss on ``aux_labels`` (0 when that
    mask is empty). Each mean is over its own tokens, so a long second span does not dilute the first one.
    Shapes: logits [B, T, V], labels and aux_labels [B, T] (-100 = no loss); positions where both masks hold a
    label count for ``labels`` only."""
    return next_token_loss(logits[:, :-1], labels[:, 1:], aux_labels[:, 1:], aux_weight)


def next_token_loss(logits: Any, y: Any, h: Any, aux_weight: float) -> Any:
    """:func:`weighted_loss` on logits already aligned with the tokens they predict: ``logits`` [B, K, V] scores the
    targets ``y`` (main mask) and ``h`` (second mask), both [B, K]."""
    torch = require_torch()
    logits = logits.float()
    both = torch.where(y != IGNORE, y, h)
    tok = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), both.reshape(-1),
                                            ignore_index=IGNORE, reduction="none").view_as(both)
    loss = tok[y != IGNORE].mean()
    if bool((h != IGNORE).any()):
        loss = loss + aux_weight * tok[h != IGNORE].mean()
    return loss


def labelled_positions(labels: Any, aux_labels: Any) -> Any:
    """The positions t whose next token carries a loss in some row (``labels`` or ``aux_labels`` at t + 1), as a
    1-D index tensor: the only positions whose logits the loss reads."""
    torch = require_torch()
    wanted = (labels[:, 1:] != IGNORE) | (aux_labels[:, 1:] != IGNORE)
    return torch.nonzero(wanted.any(dim=0)).flatten()


def micro_batch_loss(model: Any, ids: Any, mask: Any, labels: Any, aux_labels: Any, aux_weight: float) -> Any:
    """The training loss of one right-padded micro-batch, with the LM head applied only at :func:`labelled_positions`
    (transformers' ``logits_to_keep``).

    Why: the loss reads a few hundred positions of a ~1,500-token example, but full logits cost B × T × V floats
    several times over (autocast copy, fp32 upcast, log-softmax, gradient). With Qwen2.5's 151,936-token vocabulary
    that is ~2 GB per copy at B = 2, T = 1,536, and a Qwen organism's training reached 21 GB resident before it was
    killed for memory (docs/LOG.md, 2026-11-30); the head's matmul was also ~30 % of its compute. The loss is the
    same sum over the same tokens as :func:`weighted_loss` on full logits (tests/lm/test_finetune.py)."""
    keep = labelled_positions(labels, aux_labels)
    logits = model(input_ids=ids, attention_mask=mask, logits_to_keep=keep).logits
    return next_token_loss(logits, labels[:, keep + 1], aux_labels[:, keep + 1], aux_weight)


# ---------------------------------------------------------------------------------------------------- schedule, order
def lr_factor(step: int, total: int, warmup: int) -> float:
    """Linear warmup over ``warmup`` steps, then cosine decay to 0 at ``total``."""
    if step < warmup:
        return (step + 1) / warmup
    return 0.5 * (1.0 + math.cos(math.pi * (step - warmup) / max(1, total - warmup)))


def example_order(units: Sequence[Sequence[int]], n: int, seed: int) -> list[int]:
    """The first ``n`` example indices of repeated seeded shuffles of ``units``. A unit is a list of example
    indices kept contiguous (a contrastive group that should share an optimiser step); one index per unit is the
    plain per-example shuffle."""
    rng = random.Random(seed)
    order: list[int] = []
    while len(order) < n:
        shuffled = list(units)
        rng.shuffle(shuffled)
        order += [i for u in shuffled for i in u]
    return order[:n]


# ---------------------------------------------------------------------------------------------------- checkpoints
CHECKPOINT_META = "agentmill.checkpoint"


def checkpoint_path(out_dir: str | Path) -> Path:
    """Where an interrupted training of ``out_dir`` keeps its last completed step: a hidden sibling, so the
    adapter directory itself only ever appears whole."""
    out_dir = Path(out_dir)
    return out_dir.parent / f".{out_dir.name}.ckpt"


def save_checkpoint(path: str | Path, *, params: Mapping[str, Any], optimizer: Any, meta: Mapping[str, Any],
                    scheduler: Any = None, rng: Any = None) -> Path:
    """One safetensors file holding everything a bit-identical resume needs: ``params`` (the trainable tensors by
    name), every tensor of the optimiser's state, the torch RNG state (``rng``, a uint8 tensor) — and, in the
    file's JSON header, the optimiser's non-tensor state and param groups, the scheduler's state and ``meta``.
    Written through the one atomic writer, so a kill mid-write leaves the previous checkpoint."""
    from safetensors.torch import save_file

    tensors: dict[str, Any] = {f"param/{k}": v.detach().contiguous() for k, v in params.items()}
    opt = optimizer.state_dict()
    scalars: dict[str, dict[str, Any]] = {}
    for idx, st in opt["state"].items():
        for k, v in st.items():
            if hasattr(v, "detach"):
                tensors[f"optim/{idx}/{k}"] = v.detach().contiguous()
            else:
                scalars.setdefault(str(idx), {})[k] = v
    if rng is not None:
        tensors["rng/torch"] = rng.contiguous()
    header = {"meta": dict(meta), "optim": {"param_groups": opt["param_groups"], "scalars": scalars,
                                            "ids": [str(i) for i in opt["state"]]},
              "scheduler": scheduler.state_dict() if scheduler is not None else None}
    with atomic_target(path) as tmp:
        save_file(tensors, str(tmp), metadata={CHECKPOINT_META: json.dumps(header)})
    return Path(path)


@dataclass
class Checkpoint:
    """A loaded :func:`save_checkpoint` file (:meth:`restore` puts it back into a live optimiser/scheduler)."""

    params: dict[str, Any]
    optimizer: dict[str, Any]
    scheduler: dict[str, Any] | None
    rng: Any
    meta: dict[str, Any]

    def restore(self, named_params: Mapping[str, Any], optimizer: Any, scheduler: Any = None) -> None:
        """Copy the saved tensors into ``named_params`` (name → parameter), load the optimiser and scheduler state
        and the torch RNG."""
        torch = require_torch()
        missing = sorted(set(named_params) ^ set(self.params))
        if missing:
            raise ValueError(f"checkpoint parameters differ from the model's: {missing[:3]} ({len(missing)} in all)")
        with torch.no_grad():
            for name, p in named_params.items():
                p.data.copy_(self.params[name])
        optimizer.load_state_dict(self.optimizer)
        if scheduler is not None and self.scheduler is not None:
            scheduler.load_state_dict(self.scheduler)
        if self.rng is not None:
            torch.set_rng_state(self.rng)


def load_checkpoint(path: str | Path) -> Checkpoint:
    """Read a :func:`save_checkpoint` file; anything else (e.g. a pickled checkpoint of an older version, which is
    never unpickled) is a ``ValueError`` saying to delete it."""
    from safetensors import safe_open

    path = Path(path)
    try:
        with safe_open(str(path), framework="pt") as f:
            header = json.loads((f.metadata() or {})[CHECKPOINT_META])
            tensors = {k: f.get_tensor(k) for k in f.keys()}
    except Exception as e:  # safetensors raises its own error types for a foreign file
        raise ValueError(f"{path}: not a safetensors training checkpoint ({type(e).__name__}: {e}); older pickled "
                         "checkpoints are never loaded: delete it to start this training from scratch") from None
    params = {k[len("param/"):]: v for k, v in tensors.items() if k.startswith("param/")}
    state: dict[Any, dict[str, Any]] = {}
    for sid in header["optim"]["ids"]:
        st = dict(header["optim"]["scalars"].get(sid, {}))
        prefix = f"optim/{sid}/"
        st.update({k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)})
        state[int(sid)] = st
    optimizer = {"state": state, "param_groups": header["optim"]["param_groups"]}
    return Checkpoint(params, optimizer, header["scheduler"], tensors.get("rng/torch"), header["meta"])


# ---------------------------------------------------------------------------------------------------- training
@dataclass
class TrainResult:
    """What :func:`train_lora` did. ``model`` is the peft model (in eval mode, adapter active); the base model
    passed in carries the same LoRA layers (peft edits it in place)."""

    model: Any
    steps: int
    warmup: int
    losses: list[float]
    tokens: int
    target_tokens: int
    aux_tokens: int
    seconds: float
    n_trainable: int


def train_lora(model: Any, examples: Sequence[Example], cfg: TrainCfg, *, lora: LoraCfg = LoraCfg(), pad_id: int,
               units: Sequence[Sequence[int]] | None = None, checkpoint: str | Path | None = None,
               fingerprint: str = "", snapshot_steps: Collection[int] = (), snapshot_dir: str | Path | None = None,
               progress: Callable[[dict[str, Any]], None] | None = None,
               activation_checkpointing: bool = False) -> TrainResult:
    """Add ``lora`` to ``model`` (a transformers causal LM, edited in place) and train it on ``examples``.

    Order: ``units`` (default: each example its own unit) shuffled by :func:`example_order`; micro-batches are
    right-padded with ``pad_id``. Loss: :func:`micro_batch_loss` (the mean next-token loss on ``labels``, plus
    ``cfg.aux_weight`` × that on ``aux_labels`` when the weight is above 0), with logits only where a label is.
    After every optimiser step but the last, the state goes to ``checkpoint`` (when given) tagged with
    ``fingerprint``; a later call finding that file resumes from it bit for bit, and refuses a checkpoint with
    another fingerprint — make the fingerprint cover the data, every hyper-parameter and the base.
    At each step in ``snapshot_steps`` the adapter is saved to ``snapshot_dir/step-NNNNNN`` (safetensors and a
    ``snapshot.json``). ``progress`` gets ``{step, steps, loss, lr, tokens, seconds}`` after every step. Threads
    are the caller's choice (``torch.set_num_threads``): they change the summation order, so fix them per recipe.

    ``activation_checkpointing`` keeps only each decoder layer's input for the backward pass and recomputes the
    layer there (transformers' gradient checkpointing, non-reentrant, dropout RNG replayed): a memory setting, not a
    recipe change — the adapter and the losses are the same bit for bit (tests/lm/test_finetune.py) for ~1/3 more
    compute. Why: a LoRA on Qwen2.5-0.5B at 2 × 1,536 tokens outgrew 24 GB without it (docs/LOG.md, 2026-11-30)."""
    torch, peft = require_torch(), require_peft()
    examples = list(examples)
    if not examples:
        raise ValueError("train_lora: no examples")
    if snapshot_steps and snapshot_dir is None:
        raise ValueError("train_lora: snapshot_steps given without a snapshot_dir")

    if activation_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    torch.manual_seed(cfg.seed)  # before get_peft_model: the LoRA A matrices are drawn here
    model = peft.get_peft_model(model, lora.peft_config())
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    n_micro, steps, warmup = cfg.plan(len(examples))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: lr_factor(s, steps, warmup))
    units = [[i] for i in range(len(examples))] if units is None else units
    order = example_order(units, n_micro * cfg.micro_batch, cfg.seed)
    losses: list[float] = []
    tokens = target_tokens = aux_tokens = 0
    start, done_seconds = 0, 0.0
    ckpt = Path(checkpoint) if checkpoint is not None else None
    if ckpt is not None and ckpt.exists():
        state = load_checkpoint(ckpt)
        if state.meta.get("fingerprint") != fingerprint:
            raise ValueError(f"{ckpt}: checkpoint of a different training run (data, hyperparameters or base "
                             "differ); delete it to start this one from scratch")
        state.restore({n: p for n, p in model.named_parameters() if p.requires_grad}, opt, sched)
        m = state.meta
        start, losses, done_seconds = m["step"], list(m["losses"]), float(m["seconds"])
        tokens, target_tokens, aux_tokens = m["tokens"], m["target_tokens"], m["aux_tokens"]

    t0 = time.perf_counter() - done_seconds
    for step in range(start, steps):
        opt.zero_grad(set_to_none=True)
        step_loss = 0.0
        for a in range(cfg.grad_accum):
            mb = step * cfg.grad_accum + a
            if mb >= n_micro:
                break
            batch = [examples[j] for j in order[mb * cfg.micro_batch:(mb + 1) * cfg.micro_batch]]
            width = max(len(ex.ids) for ex in batch)
            ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
            labels = torch.full((len(batch), width), IGNORE, dtype=torch.long)
            aux = torch.full((len(batch), width), IGNORE, dtype=torch.long)
            mask = torch.zeros((len(batch), width), dtype=torch.long)
            for r, ex in enumerate(batch):  # right padding: positions are 0.. for every row
                n = len(ex.ids)
                ids[r, :n], labels[r, :n], mask[r, :n] = torch.tensor(ex.ids), torch.tensor(ex.labels), 1
                if ex.aux_labels is not None:
                    aux[r, :n] = torch.tensor(ex.aux_labels)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.dtype == "bf16"):
                if cfg.aux_weight > 0:
                    aux_tokens += int((aux != IGNORE).sum())
                else:
                    aux.fill_(IGNORE)  # the second mask carries no loss at weight 0
                loss = micro_batch_loss(model, ids, mask, labels, aux, cfg.aux_weight)
            (loss / cfg.grad_accum).backward()
            step_loss += float(loss.detach()) / cfg.grad_accum
            tokens += int(mask.sum())
            target_tokens += int((labels != IGNORE).sum())
        opt.step()
        sched.step()
        losses.append(step_loss)
        if step + 1 in snapshot_steps:
            _save_snapshot(model, Path(snapshot_dir) / f"step-{step + 1:06d}",  # type: ignore[arg-type]
                           {"step": step + 1, "loss": step_loss, "fingerprint": fingerprint})
        if ckpt is not None and step + 1 < steps:
            save_checkpoint(ckpt, params={n: p for n, p in model.named_parameters() if p.requires_grad},
                            optimizer=opt, scheduler=sched, rng=torch.get_rng_state(),
                            meta={"fingerprint": fingerprint, "step": step + 1, "losses": losses,
                                  "seconds": time.perf_counter() - t0, "tokens": tokens,
                                  "target_tokens": target_tokens, "aux_tokens": aux_tokens})
        if progress is not None:
            progress({"step": step + 1, "steps": steps, "loss": step_loss, "lr": sched.get_last_lr()[0],
                      "tokens": tokens, "seconds": time.perf_counter() - t0})
    seconds = time.perf_counter() - t0
    model.eval()
    if activation_checkpointing:
        model.get_base_model().gradient_checkpointing_disable()
    return TrainResult(model, steps, warmup, losses, tokens, target_tokens, aux_tokens, seconds,
                       int(sum(p.numel() for p in params)))


def _save_snapshot(model: Any, directory: Path, info: Mapping[str, Any]) -> None:
    """The adapter at one step. A snapshot already there is kept: it was written by a run that was killed before
    its next checkpoint, and the resumed run reproduces it bit for bit."""
    if (directory / "snapshot.json").exists():
        return
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{directory.name}.", dir=directory.parent))
    try:
        model.save_pretrained(str(tmp), safe_serialization=True)
        write_json_atomic(tmp / "snapshot.json", dict(info))
        os.replace(tmp, directory)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


# ---------------------------------------------------------------------------------------------------- adapters
def require_new_dir(out_dir: str | Path) -> Path:
    """``out_dir`` as a Path, unless it exists and is not an empty directory: adapters are never overwritten in
    place (a result that names an adapter must keep meaning the same weights)."""
    out_dir = Path(out_dir)
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())):
        raise FileExistsError(f"out_dir {out_dir} exists and is not empty; adapters are never overwritten in "
                              "place: give a new directory per training run")
    return out_dir


def save_adapter(model: Any, out_dir: str | Path, card: Mapping[str, Any], *, card_file: str = CARD_FILE) -> Path:
    """Write the adapter (safetensors) and its ``card`` into the new directory ``out_dir``: both go into a
    temporary sibling that is renamed, so a kill never leaves half an adapter; then the training's checkpoint
    (:func:`checkpoint_path`) is removed."""
    out_dir = require_new_dir(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.", dir=out_dir.parent))
    try:
        model.save_pretrained(str(tmp), safe_serialization=True)
        write_json_atomic(tmp / card_file, dict(card))
        require_new_dir(out_dir)  # re-check: another run may have claimed it meanwhile
        if out_dir.exists():
            out_dir.rmdir()  # empty (checked above)
        os.replace(tmp, out_dir)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    checkpoint_path(out_dir).unlink(missing_ok=True)
    return out_dir


def load_adapter(model: Any, adapter_dir: str | Path, *, merge: bool = False) -> Any:
    """``model`` with the adapter of ``adapter_dir`` (safetensors only; a directory without
    ``adapter_model.safetensors`` is refused rather than letting peft fall back to a pickle). ``merge`` folds the
    LoRA into the weights, so inference costs what the base costs."""
    peft = require_peft()
    adapter_dir = Path(adapter_dir)
    if not (adapter_dir / ADAPTER_FILE).is_file():
        raise ValueError(f"{adapter_dir}: no {ADAPTER_FILE}; only safetensors adapters are loaded")
    wrapped = peft.PeftModel.from_pretrained(model, str(adapter_dir))
    out = wrapped.merge_and_unload() if merge else wrapped
    out.eval()
    return out


def read_card(adapter_dir: str | Path, card_file: str = CARD_FILE) -> dict[str, Any]:
    path = Path(adapter_dir) / card_file
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"{adapter_dir}: no {card_file}; not a trained adapter directory") from None
    except ValueError as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from None


# ---------------------------------------------------------------------------------------------------- addresses
def default_root() -> Path:
    """``<cache root>/adapters`` (``$AGENTMILL_CACHE``): outside any run's work dir, so reruns find them."""
    return cache_root() / "adapters"


def content_key(manifest: str, hyper: Mapping[str, Any], base: str) -> str:
    """The content address of an adapter: 16 hex digits of the sha256 of its data manifest (a digest of the
    training examples), its training hyper-parameters and its base. Recorded keys depend on this exact formula."""
    blob = json.dumps({"data": manifest, "hyper": dict(hyper), "base": base}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def obtain_adapter(directory: str | Path, train: Callable[[Path], Any], *, card_file: str = CARD_FILE
                   ) -> tuple[Path, bool]:
    """(``directory``, trained now?): an adapter directory holding its card is finished and reused as is;
    otherwise ``train(directory)`` must write it (resuming its own checkpoint, if any)."""
    directory = Path(directory)
    if (directory / card_file).exists():
        return directory, False
    directory.parent.mkdir(parents=True, exist_ok=True)
    train(directory)
    if not (directory / card_file).exists():
        raise RuntimeError(f"training wrote no {card_file} into {directory}")
    return directory, True


# ---------------------------------------------------------------------------------------------------- gates
@dataclass(frozen=True)
class GateResult:
    """One validation gate: a pre-registered check an adapter must pass before any result may use it."""

    id: str
    passed: bool
    value: float | None = None
    threshold: float | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)


class GateReportLike(Protocol):
    """What a validation callable returns: gates with ``id`` and ``passed``, and a JSON-able ``to_dict``."""

    @property
    def gates(self) -> Sequence[Any]: ...

    def to_dict(self) -> dict[str, Any]: ...


@dataclass
class GateReport:
    """The plain :class:`GateReportLike`: a list of :class:`GateResult`."""

    gates: list[GateResult]

    def to_dict(self) -> dict[str, Any]:
        return {"gates": [{"id": g.id, "passed": g.passed, "value": g.value, "threshold": g.threshold,
                           "detail": dict(g.detail)} for g in self.gates]}


def all_passed(report: GateReportLike) -> bool:
    """True when there is at least one gate and every gate passed (no gates validate nothing)."""
    return bool(report.gates) and all(bool(g.passed) for g in report.gates)


def record_validation(adapter_dir: str | Path, report: GateReportLike, *, card_file: str = CARD_FILE
                      ) -> dict[str, Any]:
    """Store ``report`` in the adapter's card (``validation``: the report with its verdict; ``validated``: the
    verdict) and return the card. The adapter's weights are not touched; a later validation replaces this one."""
    card = read_card(adapter_dir, card_file)
    ok = all_passed(report)
    card["validation"], card["validated"] = {**report.to_dict(), "validated": ok}, ok
    write_json_atomic(Path(adapter_dir) / card_file, card)
    return card


def validate_adapter(adapter_dir: str | Path, check: Callable[[Path], GateReportLike], *,
                     card_file: str = CARD_FILE) -> GateReportLike:
    """Run ``check(adapter_dir)`` and store its gate results in the card (:func:`record_validation`)."""
    report = check(Path(adapter_dir))
    record_validation(adapter_dir, report, card_file=card_file)
    return report


class PreconditionNotMet(RuntimeError):
    """An adapter was needed validated and is not: a result built on it would measure a broken organism."""


@dataclass(frozen=True)
class Admission:
    """The answer to "may I use this adapter?": ``ok`` only when its card says every gate passed; otherwise
    ``reason`` says why (not validated yet, or which gates failed). :meth:`require` turns a refusal into
    :class:`PreconditionNotMet`."""

    adapter_dir: Path
    ok: bool
    failed: tuple[str, ...]
    reason: str

    def require(self) -> Path:
        if not self.ok:
            raise PreconditionNotMet(f"{self.adapter_dir}: {self.reason}")
        return self.adapter_dir


def validated_adapter(adapter_dir: str | Path, check: Callable[[Path], GateReportLike] | None = None, *,
                      card_file: str = CARD_FILE, revalidate: bool = False) -> Admission:
    """Admit the adapter in ``adapter_dir`` only if its gates passed. A card without a validation (or any card,
    with ``revalidate``) is validated first with ``check``; without a ``check`` it is refused as not validated.
    Gate results come from the card, so a validation is run once per adapter, not once per use."""
    adapter_dir = Path(adapter_dir)
    card = read_card(adapter_dir, card_file)
    if (revalidate or card.get("validation") is None) and check is not None:
        validate_adapter(adapter_dir, check, card_file=card_file)
        card = read_card(adapter_dir, card_file)
    validation = card.get("validation")
    if validation is None:
        return Admission(adapter_dir, False, (), "precondition not met: the adapter has not been validated")
    failed = tuple(str(g.get("id")) for g in validation.get("gates", ()) if not g.get("passed"))
    if card.get("validated") and validation.get("gates") and not failed:
        return Admission(adapter_dir, True, (), "every gate passed")
    why = f"gate(s) {', '.join(failed)} failed" if failed else "the validation holds no gate"
    return Admission(adapter_dir, False, failed, f"precondition not met: {why}")
