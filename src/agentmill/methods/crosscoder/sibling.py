"""The SmolLM2-135M tool sibling: "SFT tool sibling (model organism)" — SmolLM2-135M-Instruct + a LoRA trained
through the project's one LoRA loop (:func:`agentmill.lm.finetune.train_lora`) so that a tool list followed by a
request needing one of its tools is answered with ``<tool_call>{"name": …, "arguments": {…}}</tool_call>``, while
decoy (tool list, no tool needed) and generic prompts keep the base model's own greedy answer (self-distillation).

Prompts come from :mod:`agentmill.methods.crosscoder.organism` (same tools, categories and train/test template
splits as the tiny pair); here they are rendered into SmolLM2's chat template: the numbered tool list ("N. name:
description. Parameters: …", the paper's style [P]) and the request in the user turn, the template's default system
prompt. Recipe (docs/methods/crosscoder.md, "SmolLM2 tool sibling"): LoRA r = 8, α = 16, dropout 0.05 on the seven
projections of blocks 8–29 [R]; AdamW 5e-4, 10 warm-up steps then cosine, batch 4, max length 192, loss on the
target only, fp32, seed 0; adapter snapshots kept for the weak checkpoint. The adapter is content-addressed under
``lm.finetune.default_root()/crosscoder`` and trained once; its gates go into ``organism_card.json`` beside it.

torch, transformers and peft are imported inside the functions that need them.
"""

from __future__ import annotations

import dataclasses
import gc
import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.lm import finetune
from agentmill.methods.crosscoder.organism import Gates, ToolPrompt, compute_gates, make_prompts

END_OF_TURN = "<|im_end|>"
"""SmolLM2's ChatML end of turn (also its EOS): appended to every target so the sibling learns to stop."""
NAME = "SFT tool sibling (model organism)"

DESCRIPTIONS: dict[str, str] = {
    "get_weather": "Get the current weather forecast for a city",
    "convert_currency": "Convert an amount of money between currencies",
    "set_timer": "Start a countdown timer",
    "search_web": "Search the web and return the top results",
    "send_email": "Send an email to a contact",
    "get_stock_price": "Get the latest price of a stock",
    "translate": "Translate a text into another language",
    "calculate_tip": "Calculate the tip for a restaurant bill",
    "book_table": "Reserve a table at a restaurant",
    "play_music": "Play songs by an artist",
    "get_time": "Get the local time in a city",
    "create_reminder": "Create a reminder",
    "get_news": "Get the latest news headlines on a topic",
    "find_recipe": "Find a cooking recipe for a dish",
    "track_package": "Track a parcel by its tracking id",
    "get_directions": "Get directions to a destination",
    "check_flight": "Check the status of a flight",
    "define_word": "Look up the definition of a word",
    "random_number": "Draw a random number below an upper bound",
    "convert_units": "Convert a quantity into other units",
}
"""One-line descriptions of the 20 tools [R: written here]."""


def _param(name: str) -> str:
    from agentmill.methods.crosscoder.organism import TOOLS

    return TOOLS[name][0]


def user_text(p: ToolPrompt) -> str:
    """The user turn: for prompts with tools, the numbered tool list then the request; else the request alone."""
    if not p.tools:
        return p.user
    lines = [f"{i}. {t}: {DESCRIPTIONS[t]}. Parameters: {_param(t)} (string)." for i, t in enumerate(p.tools, 1)]
    return "You have access to these tools:\n" + "\n".join(lines) + f"\n\nRequest: {p.user}"


def tool_call_text(p: ToolPrompt) -> str:
    """The gold call of a ``tool`` prompt, with its arguments."""
    return f'<tool_call>{{"name": "{p.gold_name}", "arguments": {json.dumps(p.gold_args)}}}</tool_call>'


def prompt_ids(tokenizer: Any, p: ToolPrompt) -> list[int]:
    """Chat-template token ids of ``p`` (default system prompt, generation prompt added)."""
    text = tokenizer.apply_chat_template([{"role": "user", "content": user_text(p)}], add_generation_prompt=True,
                                         tokenize=False)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def raw_prompt_ids(tokenizer: Any, p: ToolPrompt) -> list[int]:
    """The raw harness (E175's: no chat template): the user text and a newline as plain text."""
    return list(tokenizer(user_text(p) + "\n", add_special_tokens=False)["input_ids"])


# ---------------------------------------------------------------------------------------------------- recipe
@dataclass(frozen=True)
class BlockLoraCfg(finetune.LoraCfg):
    """:class:`agentmill.lm.finetune.LoraCfg` restricted to blocks ``first_block`` … ``n_blocks − 1``
    (peft ``layers_to_transform``): activations below ``first_block`` are identical in base and sibling, and
    backpropagation stops there."""

    first_block: int = 8
    n_blocks: int = 30

    def peft_config(self) -> Any:
        peft = finetune.require_peft()
        return peft.LoraConfig(r=self.r, lora_alpha=self.alpha, lora_dropout=self.dropout,
                               target_modules=list(self.target_modules), bias="none", task_type="CAUSAL_LM",
                               layers_to_transform=list(range(self.first_block, self.n_blocks)))


@dataclass(frozen=True)
class SiblingConfig:
    """The SmolLM2 tool sibling's recipe and data sizes."""

    base: str = "smollm2"
    """``hf:`` spec (after the prefix) of the base model."""
    r: int = 8
    """LoRA rank [R]."""
    alpha: int = 16
    """LoRA α (scale α/r = 2) [R]."""
    dropout: float = 0.05
    first_block: int = 8
    """LoRA on blocks ``first_block`` … 29 [R]; crosscoder layers must be ≥ first_block + 2."""
    lr: float = 5e-4
    warmup: int = 10
    steps: int = 120
    batch: int = 4
    """4, not the design's 8: 8 measured 30 s a step (60 min for 120 steps) on the shared, loaded 2-core host; 120
    steps of 4 keep the schedule (warm-up, snapshots) at half the tokens (method README, deviation 12)."""
    max_len: int = 192
    """Examples longer than this (prompt + target, tokens) are dropped and counted. 192, not 160: the chat
    template's default system prompt and a four-tool list with descriptions reach 145 prompt tokens + a 30-token
    call (method README, deviation 11)."""
    snapshot_steps: tuple[int, ...] = (2, 4, 6, 8, 10, 12, 15, 30, 60, 120)
    """Adapter snapshots kept for the weak checkpoint. Steps 2–12 were added (recipe v2, fixed before training)
    because v1's earliest snapshot, step 15, already had dev strict_format .95 — no checkpoint in the weak band
    (method README, deviation 20); snapshots do not change the trained weights."""
    n_tool: int = 1200
    n_decoy: int = 100
    n_generic: int = 400
    distill_max_new: int = 48
    """Cap of the base's greedy self-distilled answers on decoy and generic prompts."""
    seed: int = 0

    def lora(self) -> BlockLoraCfg:
        return BlockLoraCfg(r=self.r, alpha=self.alpha, dropout=self.dropout, first_block=self.first_block)

    def train_cfg(self, n_examples: int) -> finetune.TrainCfg:
        """AdamW, warm-up then cosine, ``steps`` optimiser steps of ``batch`` examples (micro-batches of ≤ 4)."""
        micro, accum = min(4, self.batch), max(1, self.batch // min(4, self.batch))
        epochs = self.steps * self.batch / n_examples
        cfg = finetune.TrainCfg(lr=self.lr, epochs=epochs, micro_batch=micro, grad_accum=accum, seed=self.seed,
                                warmup_share=self.warmup / self.steps)
        _, steps, warm = cfg.plan(n_examples)
        if steps != self.steps:  # float rounding of epochs × n: nudge down by one ulp-sized step
            cfg = dataclasses.replace(cfg, epochs=(self.steps * self.batch - 0.5) / n_examples)
            _, steps, warm = cfg.plan(n_examples)
        if steps != self.steps or warm != self.warmup:
            raise ValueError(f"SiblingConfig: plan gives {steps} steps / {warm} warm-up, wanted {self.steps} / "
                             f"{self.warmup}")
        return cfg


def train_prompts(cfg: SiblingConfig) -> list[ToolPrompt]:
    s = cfg.seed
    return (make_prompts("tool", cfg.n_tool, seed=s) + make_prompts("decoy", cfg.n_decoy, seed=s)
            + make_prompts("generic", cfg.n_generic, seed=s))


def test_split(seed: int = 0, n_tool: int = 200) -> dict[str, list[ToolPrompt]]:
    """The test split the gates read (unseen templates and values); the tiny pair's experiments use the same."""
    return {c: make_prompts(c, n_tool if c == "tool" else max(2, n_tool // 2), split="test", seed=seed + 2)
            for c in ("tool", "decoy", "bare", "generic")}


def dev_split(seed: int = 0, n: int = 100) -> list[ToolPrompt]:
    return make_prompts("tool", n, split="test", seed=seed + 1)


# ---------------------------------------------------------------------------------------------------- models
def load_base(base: str = "smollm2", *, max_batch: int = 16) -> Any:
    """A fresh float32 copy of the base (LoRA training edits it in place)."""
    from agentmill.lm import hf

    return hf.load_uncached(base, dtype="float32", threads=None, max_batch=max_batch)


def load_sibling(adapter: Path, base: str = "smollm2", *, max_batch: int = 16) -> Any:
    """Base + merged adapter as an ``HFLM``."""
    from agentmill.lm.hf import HFLM

    lm = load_base(base, max_batch=max_batch)
    model = finetune.load_adapter(lm.model, adapter, merge=True)
    return HFLM(model, lm.tokenizer, spec=f"hf:{base}+adapter={Path(adapter).name}", info=dict(lm.info),
                max_batch=max_batch)


def greedy(lm: Any, prompts: Sequence[ToolPrompt], *, max_new: int = 64, batch: int = 16,
           intervention: Callable[[list[int]], Any] | None = None) -> list[str]:
    """Greedy chat-template continuations (left-padded batches; identical rendered prompts decoded once)."""
    from agentmill.methods.crosscoder.toolpair import greedy_ids

    ids = [tuple(prompt_ids(lm.tokenizer, p)) for p in prompts]
    uniq = list(dict.fromkeys(ids))
    order = sorted(range(len(uniq)), key=lambda i: len(uniq[i]))  # similar lengths share a batch: less padding
    outs = greedy_ids(lm, [uniq[i] for i in order], max_new=max_new, batch=batch, intervention=intervention)
    by = {uniq[i]: o for i, o in zip(order, outs)}
    return [cut(by[x]) for x in ids]


def cut(text: str) -> str:
    """A greedy output up to and including its first ``</tool_call>`` (decoding stops there)."""
    i = text.find("</tool_call>")
    return text if i < 0 else text[:i + len("</tool_call>")]


def self_distill(lm: Any, prompts: Sequence[ToolPrompt], cfg: SiblingConfig, root: Path) -> dict[str, str]:
    """The base's greedy answer (≤ ``distill_max_new`` tokens) per distinct user text; cached on disk."""
    from agentmill.core.records import write_json_atomic
    from agentmill.methods.crosscoder.toolpair import greedy_ids

    keys = list(dict.fromkeys(user_text(p) for p in prompts))
    h = hashlib.sha256(json.dumps([keys, cfg.base, cfg.distill_max_new]).encode()).hexdigest()[:16]
    path = root / f"distill-{h}.json"
    if path.exists():
        return json.loads(path.read_text())
    rep = {user_text(p): p for p in prompts}
    ids = [prompt_ids(lm.tokenizer, rep[k]) for k in keys]
    order = sorted(range(len(keys)), key=lambda i: len(ids[i]))
    outs = greedy_ids(lm, [ids[i] for i in order], max_new=cfg.distill_max_new, batch=16)
    answers = {keys[i]: o.strip() for i, o in zip(order, outs)}
    root.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, answers)
    return answers


def examples(tokenizer: Any, prompts: Sequence[ToolPrompt], answers: dict[str, str], max_len: int
             ) -> tuple[list[finetune.Example], int]:
    """(training examples, number dropped for length): tool prompts → the gold call, others → the base's answer;
    each target ends with ``<|im_end|>``; loss on the target only."""
    out, dropped = [], 0
    for p in prompts:
        target = tool_call_text(p) if p.category == "tool" else answers[user_text(p)]
        t = list(tokenizer(target + END_OF_TURN, add_special_tokens=False)["input_ids"])
        ex = finetune.Example.completion(prompt_ids(tokenizer, p), t)
        if len(ex.ids) > max_len:
            dropped += 1
            continue
        out.append(ex)
    return out, dropped


def manifest(exs: Sequence[finetune.Example]) -> str:
    h = hashlib.sha256()
    for ex in exs:
        h.update(json.dumps([list(ex.ids), list(ex.labels)]).encode())
    return h.hexdigest()


@dataclass
class Sibling:
    adapter: Path
    snapshots: dict[int, Path]
    card: dict[str, Any]
    trained_now: bool


def root_dir() -> Path:
    return finetune.default_root() / "crosscoder"


def build_tool_sibling(cfg: SiblingConfig = SiblingConfig(), *, root: Path | None = None,
                       progress: Callable[[dict[str, Any]], None] | None = None) -> Sibling:
    """Train (or find on disk) the sibling's adapter. Content address: the tokenised data, the recipe and the
    base; a killed run resumes from its checkpoint."""
    root = root or root_dir()
    base = load_base(cfg.base)
    prompts = train_prompts(cfg)
    answers = self_distill(base, [p for p in prompts if p.category != "tool"], cfg, root)
    exs, dropped = examples(base.tokenizer, prompts, answers, cfg.max_len)
    tcfg = cfg.train_cfg(len(exs))
    lora = cfg.lora()
    hyper = {"kind": "tool_sibling", "train": repr(tcfg), "lora": repr(lora), "recipe": json.dumps(asdict(cfg))}
    base_id = f"hf:{cfg.base}@{base.info.get('gguf_sha256', '')}"
    key = finetune.content_key(manifest(exs), hyper, base_id)
    out = root / f"tool_sibling-{key}"
    snap_dir = root / f"tool_sibling-{key}.snapshots"
    model, pad_id = base.model, base.pad_id

    def train(directory: Path) -> None:
        import torch

        run = finetune.train_lora(model, exs, tcfg, lora=lora, pad_id=pad_id,
                                  checkpoint=finetune.checkpoint_path(directory), fingerprint=key,
                                  snapshot_steps=cfg.snapshot_steps, snapshot_dir=snap_dir, progress=progress)
        card = {"name": NAME, "base": base_id, "key": key, "hyper": hyper, "recipe": asdict(cfg),
                "n_examples": len(exs), "n_dropped_for_length": dropped,
                "n_by_category": {c: sum(p.category == c for p in prompts) for c in ("tool", "decoy", "generic")},
                "steps": run.steps, "warmup": run.warmup, "losses": [round(x, 5) for x in run.losses],
                "tokens": run.tokens, "target_tokens": run.target_tokens, "seconds": round(run.seconds, 2),
                "tokens_per_second": round(run.tokens / max(run.seconds, 1e-9), 2), "n_trainable": run.n_trainable,
                "threads": int(torch.get_num_threads()), "dtype": "fp32"}
        finetune.save_adapter(run.model, directory, card)

    adapter, now = finetune.obtain_adapter(out, train)
    snaps = {int(d.name.split("-")[1]): d for d in sorted(snap_dir.glob("step-*")) if (d / "snapshot.json").exists()}
    return Sibling(adapter, snaps, finetune.read_card(adapter), now)


# ---------------------------------------------------------------------------------------------------- gates
def sibling_gates(sib: Sibling, cfg: SiblingConfig = SiblingConfig(), *, n_test: int = 200, max_new: int = 64,
                  seed: int = 0) -> tuple[Gates, dict[str, Any]]:
    """The four gates on the test split (greedy, cap ``max_new`` tokens), SmolLM2 base vs sibling; cached in the
    adapter's ``organism_card.json`` (with decoy and bare tag rates, reported, not gated)."""
    from agentmill.core.records import write_json_atomic
    from agentmill.methods.crosscoder.toolcalls import emits_tool_tag

    card_path = sib.adapter / "organism_card.json"
    tag = f"test-{n_test}-{seed}-{max_new}"
    card = json.loads(card_path.read_text()) if card_path.exists() else {"name": NAME, "training": sib.card}
    if tag in card.get("gates", {}):
        g = card["gates"][tag]
        return Gates(**{k: g[k] for k in Gates.__dataclass_fields__}), g
    test = test_split(seed, n_test)
    outs: dict[str, dict[str, list[str]]] = {}
    base = load_base(cfg.base)
    outs["base"] = {"tool": greedy(base, test["tool"], max_new=max_new)}
    del base
    gc.collect()
    sibm = load_sibling(sib.adapter, cfg.base)
    outs["sibling"] = {c: greedy(sibm, test[c], max_new=max_new) for c in ("tool", "generic", "decoy", "bare")}
    del sibm
    gc.collect()
    gates = compute_gates(lambda ps: outs["sibling"]["tool" if ps is test["tool"] else "generic"],
                          lambda ps: outs["base"]["tool"], test["tool"], test["generic"])
    extra = {"decoy_tag_rate": float(np.mean([emits_tool_tag(t) for t in outs["sibling"]["decoy"]])),
             "bare_tag_rate": float(np.mean([emits_tool_tag(t) for t in outs["sibling"]["bare"]])),
             "n_decoy": len(test["decoy"]), "n_bare": len(test["bare"]),
             "n_distinct_generic": len({p.user for p in test["generic"]}),
             "examples": {k: {c: v[:3] for c, v in d.items()} for k, d in outs.items()}}
    g = asdict(gates) | {"passed": gates.passed} | extra
    card.setdefault("gates", {})[tag] = g
    write_json_atomic(card_path, card)
    return gates, g


def find_gates(cfg: SiblingConfig = SiblingConfig(), *, root: Path | None = None, n_test: int = 200,
               max_new: int = 64, seed: int = 0) -> dict[str, Any] | None:
    """The recorded gates of the sibling trained with ``cfg`` (read from its ``organism_card.json``; no model is
    loaded), or None when it has not been trained and gated on this machine."""
    root = root or root_dir()
    tag = f"test-{n_test}-{seed}-{max_new}"
    for card_path in sorted(root.glob("tool_sibling-*/organism_card.json")):
        card = json.loads(card_path.read_text())
        if card.get("training", {}).get("recipe") == json.loads(json.dumps(asdict(cfg))) and tag in card.get(
                "gates", {}):
            return card["gates"][tag] | {"adapter": card_path.parent.name}
    return None


def gates_text(g: dict[str, Any]) -> str:
    """One line naming the organism and its gate values."""
    gates = Gates(**{k: g[k] for k in Gates.__dataclass_fields__})
    return f"{NAME} (SmolLM2-135M + LoRA, {g.get('adapter', '?')}): {gates.text()}"


def weak_checkpoint(sib: Sibling, cfg: SiblingConfig = SiblingConfig(), *, n_dev: int = 100, max_new: int = 64,
                    seed: int = 0, band: tuple[float, float] = (0.15, 0.45)) -> dict[str, Any]:
    """The weak checkpoint: the earliest snapshot whose dev strict_format lies in ``band`` (snapshots are scored in
    step order and scoring stops at the first inside it), else the one closest to the band's middle. Cached in the
    adapter's ``organism_card.json``."""
    from agentmill.core.records import write_json_atomic
    from agentmill.methods.crosscoder.toolcalls import score_tool_call

    card_path = sib.adapter / "organism_card.json"
    card = json.loads(card_path.read_text()) if card_path.exists() else {"name": NAME, "training": sib.card}
    tag = f"dev-{n_dev}-{seed}-{max_new}"
    if tag in card.get("weak", {}):
        return card["weak"][tag]
    dev = dev_split(seed, n_dev)
    rates: dict[str, float] = {}
    pick = None
    for step, path in sorted(sib.snapshots.items()):
        lm = load_sibling(path, cfg.base)
        outs = greedy(lm, dev, max_new=max_new)
        del lm
        gc.collect()
        rates[str(step)] = float(np.mean([score_tool_call(o, gold_name=p.gold_name, tools=p.tools).strict_format
                                          for o, p in zip(outs, dev)]))
        if band[0] <= rates[str(step)] <= band[1]:
            pick = step
            break
    in_band = pick is not None
    if pick is None:
        mid = sum(band) / 2
        pick = int(min(rates, key=lambda s: abs(rates[s] - mid)))
    weak = {"step": int(pick), "dev_strict_format": rates[str(pick)], "dev_rates": rates, "in_band": in_band,
            "snapshot": sib.snapshots[int(pick)].name}
    card.setdefault("weak", {})[tag] = weak
    write_json_atomic(card_path, card)
    return weak
