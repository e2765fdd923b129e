"""The tiny tool pair: the planted fallback instrument when no SmolLM2 tool sibling is available.

B ("base") is a byte-level ``TinyLM`` trained from scratch on the tool-format task's prompts of every category
with plain answers (loss on every token). A ("sibling") is B trained further on tool prompts → ``<tool_call>{"name":
…, "arguments": {}}</tool_call>``, decoy and generic prompts → B's plain answers (loss on the answer only). The
trigger (tool list + tool-needing request) is planted, so which prompts should change is known. Snapshots of A
along its training give the "weak checkpoint" (dev strict_format in [0.15, 0.45]).

Also here: a greedy decoder over left-padded batches that keeps every row to the end (so per-row prompt lengths stay
valid for :func:`agentmill.lm.intervene.intervene`), and paired activation collection at one block.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.methods.crosscoder.organism import ToolPrompt, make_prompts


@dataclass(frozen=True)
class ToolPairConfig:
    """Recipe of the tiny tool pair [R: sizes chosen here for a CPU minute]."""

    layers: int = 4
    d: int = 64
    heads: int = 4
    max_len: int = 256
    base_steps: int = 1200
    sibling_steps: int = 1500
    batch: int = 16
    base_lr: float = 3e-3
    sibling_lr: float = 2e-3
    n_tool: int = 1200
    n_decoy: int = 100
    n_generic: int = 400
    n_bare: int = 100
    snapshot_steps: tuple[int, ...] = (10, 20, 40, 80, 160, 320, 640)
    seed: int = 0

    def address(self) -> str:
        blob = json.dumps({**asdict(self), "format": "toolpair/1"}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def base_address(self) -> str:
        """Address of the base alone (what its training depends on), so sibling recipes share one base."""
        keep = ("layers", "d", "heads", "max_len", "base_steps", "batch", "base_lr", "n_tool", "n_decoy", "n_generic",
                "n_bare", "seed")
        blob = json.dumps({k: getattr(self, k) for k in keep} | {"format": "toolpair-base/1"}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _torch() -> Any:
    import torch

    return torch


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    torch = _torch()
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)


def encode_prompt(lm: Any, prompt: ToolPrompt) -> list[int]:
    """[BOS] + bytes of the compact rendering."""
    return [256] + lm.encode(prompt.render())


def train_sft(lm: Any, pairs: Sequence[tuple[list[int], list[int]]], *, steps: int, batch: int, lr: float,
              seed: int, loss_on_prompt: bool,
              on_step: Callable[[int], None] | None = None) -> list[float]:
    """Train ``lm.model`` in place on (prompt ids, target ids) pairs; the target is followed by EOS. Loss on the
    target (+ EOS), and on the prompt too when ``loss_on_prompt``. ``on_step(step)`` runs after each step."""
    torch = _torch()
    from agentmill.lm.tiny import EOS, PAD

    net = lm.model
    net.train()
    opt = torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=0.01)
    gen = np.random.default_rng(seed)
    losses = []
    with _one_thread():
        for step in range(steps):
            idx = gen.integers(0, len(pairs), batch)
            seqs = [pairs[i][0] + pairs[i][1] + [EOS] for i in idx]
            T = max(len(s) for s in seqs)
            ids = torch.full((batch, T), PAD, dtype=torch.long)
            w = torch.zeros((batch, T))
            for b, i in enumerate(idx):
                p, t = pairs[i]
                s = seqs[b]
                ids[b, :len(s)] = torch.tensor(s)
                w[b, (1 if loss_on_prompt else len(p)):len(s)] = 1.0
            key_mask = ids != PAD
            logits, _ = net(ids[:, :-1], None, key_mask[:, :-1])
            ce = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1),
                                                   reduction="none").reshape(batch, T - 1)
            loss = (ce * w[:, 1:]).sum() / w[:, 1:].sum()
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
            opt.step()
            losses.append(float(loss.detach()))
            if on_step is not None:
                on_step(step + 1)
    net.eval()
    return losses


def train_prompts(cfg: ToolPairConfig) -> dict[str, list[ToolPrompt]]:
    s = cfg.seed
    return {"tool": make_prompts("tool", cfg.n_tool, seed=s), "decoy": make_prompts("decoy", cfg.n_decoy, seed=s),
            "generic": make_prompts("generic", cfg.n_generic, seed=s), "bare": make_prompts("bare", cfg.n_bare, seed=s)}


@dataclass
class ToolPair:
    base: Any
    sibling: Any
    snapshots: dict[int, Path]
    card: dict[str, Any]
    root: Path


def build_tool_pair(cfg: ToolPairConfig, root: str | Path) -> ToolPair:
    """Train (or load from ``root/<address>``) the tiny pair; returns it with the card (recipe, losses)."""
    from agentmill.lm.tiny import TinyConfig, TinyLM
    from agentmill.lm.tiny import load as load_tiny

    out = Path(root) / cfg.address()
    if (out / "card.json").exists():
        card = json.loads((out / "card.json").read_text())
        snaps = {int(k): out / v for k, v in card["snapshots"].items()}
        return ToolPair(load_tiny(str(out / "base")), load_tiny(str(out / "sibling")), snaps, card, out)
    out.mkdir(parents=True, exist_ok=True)
    data = train_prompts(cfg)
    base_dir = Path(root) / f"base-{cfg.base_address()}"
    if (base_dir / "losses.json").exists():
        base_losses = json.loads((base_dir / "losses.json").read_text())
    else:
        tcfg = TinyConfig(layers=cfg.layers, d=cfg.d, heads=cfg.heads, max_len=cfg.max_len, seed=cfg.seed)
        base = TinyLM(tcfg, spec=f"tiny:{base_dir}")
        base_pairs = [(encode_prompt(base, p), base.encode(p.base_target())) for ps in data.values() for p in ps]
        base_losses = train_sft(base, base_pairs, steps=cfg.base_steps, batch=cfg.batch, lr=cfg.base_lr,
                                seed=cfg.seed, loss_on_prompt=True)
        base.save(base_dir)
        (base_dir / "losses.json").write_text(json.dumps(base_losses))
    shutil.copytree(base_dir, out / "base", dirs_exist_ok=True)
    sib = load_tiny(str(out / "base"))
    sib_pairs = [(encode_prompt(sib, p), sib.encode(p.sibling_target()))
                 for cat in ("tool", "decoy", "generic") for p in data[cat]]
    snaps: dict[int, Path] = {}

    def snap(step: int) -> None:
        if step in cfg.snapshot_steps:
            sib.model.eval()
            sib.save(out / f"snap-{step:05d}")
            snaps[step] = out / f"snap-{step:05d}"
            sib.model.train()

    sib_losses = train_sft(sib, sib_pairs, steps=cfg.sibling_steps, batch=cfg.batch, lr=cfg.sibling_lr,
                           seed=cfg.seed + 1, loss_on_prompt=False, on_step=snap)
    sib.save(out / "sibling")
    card = {"recipe": asdict(cfg), "address": cfg.address(), "base_loss_last": float(np.mean(base_losses[-50:])),
            "sibling_loss_last": float(np.mean(sib_losses[-50:])),
            "snapshots": {str(k): v.name for k, v in snaps.items()}, "name": "tiny tool pair (planted fallback)"}
    from agentmill.core.records import write_json_atomic

    write_json_atomic(out / "card.json", card)
    return ToolPair(load_tiny(str(out / "base")), load_tiny(str(out / "sibling")), snaps, card, out)


def greedy(lm: Any, prompts: Sequence[ToolPrompt], *, max_new: int = 96,
           intervention: Callable[[list[int]], Any] | None = None, batch: int = 64) -> list[str]:
    """Greedy continuations of tool-task ``prompts`` on a tiny model (:func:`greedy_ids` over
    :func:`encode_prompt`)."""
    return greedy_ids(lm, [encode_prompt(lm, p) for p in prompts], max_new=max_new, intervention=intervention,
                      batch=batch)


def greedy_ids(lm: Any, id_lists: Sequence[Sequence[int]], *, max_new: int = 96,
               intervention: Callable[[list[int]], Any] | None = None, batch: int = 64) -> list[str]:
    """Greedy continuations of token-id prompts on any white-box ``lm`` (left-padded batches; every row decodes to
    the end of its batch so per-row prompt lengths stay valid). ``intervention(prompt_lens)`` returns a context
    manager entered around each batch (e.g. ``lambda P: steer(lm, cc, ..., prompt_len=P)``)."""
    torch = _torch()

    pad, eos = lm.pad_id, set(lm.eos_token_ids)
    texts: list[str] = []
    with _one_thread():
        for s in range(0, len(id_lists), batch):
            chunk = [list(map(int, c)) for c in id_lists[s:s + batch]]
            B, W = len(chunk), max(len(c) for c in chunk)
            ids = torch.full((B, W), pad, dtype=torch.long)
            mask = torch.zeros((B, W), dtype=torch.long)
            for r, c in enumerate(chunk):
                ids[r, W - len(c):] = torch.tensor(c)
                mask[r, W - len(c):] = 1
            pos = (mask.cumsum(1) - 1).clamp(min=0)
            plens = [len(c) for c in chunk]
            cm = intervention(plens) if intervention is not None else contextlib.nullcontext()
            toks: list[list[int]] = [[] for _ in range(B)]
            done = np.zeros(B, bool)
            with cm:
                fo = lm.forward(ids, attention_mask=mask, position_ids=pos)
                cache, logits = fo.cache, fo.logits[:, -1]
                nxt = torch.as_tensor(plens)
                budget = min(max_new, lm.max_positions - W)
                for _ in range(budget):
                    tok = logits.argmax(-1)
                    for r in range(B):
                        if not done[r]:
                            if int(tok[r]) in eos:
                                done[r] = True
                            else:
                                toks[r].append(int(tok[r]))
                    if done.all():
                        break
                    mask = torch.cat([mask, torch.ones((B, 1), dtype=torch.long)], 1)
                    fo = lm.forward(tok[:, None], cache, attention_mask=mask, position_ids=nxt[:, None])
                    cache, logits = fo.cache, fo.logits[:, -1]
                    nxt = nxt + 1
            texts += [lm.decode(t) for t in toks]
    return texts


class _Enough(Exception):
    """Ends a forward once the last wanted block's output is in hand."""


def block_outputs(lm: Any, ids: Any, mask: Any, pos: Any, layers: Sequence[int]) -> dict[int, Any]:
    """Block outputs (``hidden_states[L + 1]``) of ``layers`` for a left-padded batch, through hooks; the forward
    stops after the deepest wanted block, so later blocks and the LM head never run (about half a forward saved at
    block 15 of 30)."""
    got: dict[int, Any] = {}
    top = max(layers)

    def hook(L: int) -> Callable[[int, Any], None]:
        def fn(_layer: int, hidden: Any) -> None:
            got[L] = hidden.detach()
            if L == top:
                raise _Enough()
        return fn

    handles = [lm.add_hook(L, hook(L)) for L in sorted(set(layers))]
    try:
        lm.forward(ids, attention_mask=mask, position_ids=pos)
    except _Enough:
        pass
    finally:
        for h in handles:
            h.remove()
    if set(got) != set(layers):
        raise RuntimeError(f"block_outputs: hooks on blocks {sorted(set(layers) - set(got))} never fired")
    return got


def collect_pair_rows(a: Any, b: Any, prompts: Sequence[ToolPrompt], layer: int | Sequence[int], *,
                      batch: int = 64, last_only: bool = False,
                      encode: Callable[[Any, ToolPrompt], list[int]] = encode_prompt) -> dict[str, Any]:
    """Paired block-``layer`` outputs of A and B on identical token ids (``encode(lm, prompt)``; default: the tiny
    byte rendering): ``x`` (n, 2, d) raw, ``doc``, ``pos``, ``last`` (is the last prompt token), ``label``
    (category index). Position 0 (BOS / the first template token) is excluded. With several layers, ``x`` is a
    dict layer → (n, 2, d) from one forward per model and batch."""
    from agentmill.lm.scoring import tokenizer_fingerprint
    from agentmill.methods.crosscoder.organism import CATEGORIES

    torch = _torch()
    layers = [layer] if isinstance(layer, int) else [int(x) for x in layer]
    if tokenizer_fingerprint(a) != tokenizer_fingerprint(b):
        raise ValueError("collect_pair_rows: the two models tokenize differently")
    pad = a.pad_id if a.pad_id is not None else 0
    xs: dict[int, list[np.ndarray]] = {L: [] for L in layers}
    docs, poss, lasts, labels = [], [], [], []
    with _one_thread(), torch.no_grad():
        for s in range(0, len(prompts), batch):
            chunk = [encode(a, p) for p in prompts[s:s + batch]]
            if any(encode(b, p) != c for p, c in zip(prompts[s:s + batch], chunk)):
                raise ValueError("collect_pair_rows: token ids differ between the models")
            B, W = len(chunk), max(len(c) for c in chunk)
            ids = torch.full((B, W), pad, dtype=torch.long)
            mask = torch.zeros((B, W), dtype=torch.long)
            for r, c in enumerate(chunk):
                ids[r, W - len(c):] = torch.tensor(c)
                mask[r, W - len(c):] = 1
            pos = (mask.cumsum(1) - 1).clamp(min=0)
            hsa = block_outputs(a, ids, mask, pos, layers)
            hsb = block_outputs(b, ids, mask, pos, layers)
            for r, c in enumerate(chunk):
                P = len(c)
                start = W - P + (0 if last_only else 1)
                cols = np.arange(W - 1, W) if last_only else np.arange(start, W)
                for L in layers:
                    xs[L].append(np.stack([hsa[L][r, cols].float().numpy(), hsb[L][r, cols].float().numpy()], 1))
                docs.append(np.full(len(cols), s + r))
                poss.append(cols - (W - P))
                lasts.append(cols == W - 1)
                labels.append(np.full(len(cols), CATEGORIES.index(prompts[s + r].category)))
    meta = {"doc": np.concatenate(docs), "pos": np.concatenate(poss), "last": np.concatenate(lasts),
            "label": np.concatenate(labels)}
    out = {L: np.concatenate(v).astype(np.float32) for L, v in xs.items()}
    return meta | {"x": out[layers[0]] if isinstance(layer, int) else out}


def drop_outliers(rows: dict[str, Any], factor: float = 10.0) -> tuple[dict[str, Any], int]:
    """``rows`` without the rows where either model's ‖h‖ exceeds ``factor`` × that model's median norm (massive
    activations on template tokens, spec X10), and how many were dropped."""
    n = np.linalg.norm(rows["x"], axis=2)  # (n, 2)
    keep = (n <= factor * np.median(n, axis=0)[None, :]).all(1)
    return {k: v[keep] for k, v in rows.items()}, int((~keep).sum())
