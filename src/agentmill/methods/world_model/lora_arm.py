"""The pretrained-LM arms of the recipe: SmolLM2 + LoRA as a KeyDoor world model, and the gates it must pass first.

A pretrained base learns next-state prediction through the project's one LoRA loop (``lm.finetune.train_lora``):
SFT on rendered transitions (loss on the target: reasoning, observation, end-of-turn), optionally after a LoRA
continual pre-training stage on packed episode text (its LoRA merged into the weights before the SFT LoRA is added).
Adapters are content-addressed under ``lm.finetune.default_root()/world_model`` and trained once.

Before any claim may use the SFT adapter it passes three validation gates, measured on greedy predictions
(docs/methods/world_model.md, "SmolLM2 + LoRA arms"):

- G-WM1: strict parse rate ≥ 0.9 (an opening and a closing ``<predicted_observation>`` tag);
- G-WM2: field-F1 on ``changed`` transitions of held-out episodes of the training layouts ≥ copy-previous + 0.10
  (dynamics, not format);
- G-WM3: the same on layouts unseen in training (the ``dev`` split).

A failed gate makes every claim built on the adapter "precondition not met"; the thresholds never move.
torch, transformers and peft are imported inside the functions that need them.
"""

from __future__ import annotations

import gc
import hashlib
import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.seeding import derive_seed
from agentmill.lm import finetune
from agentmill.lm.base import GenerateConfig
from agentmill.methods.world_model.data import WMExample, build_examples, collect_keydoor
from agentmill.methods.world_model.domain import KeyDoorDomain
from agentmill.methods.world_model.format import CLOSE_OBS, QwenFormat, extract_observation
from agentmill.methods.world_model.judges import field_f1

LM_FMT = QwenFormat(history_k=2, system_prompt="short", card=True)
"""The pretrained arms' format: the two most recent turns kept [R: the window of the tiny models in the recipe's
SmolLM2 row], the short system prompt, the card on."""
PARSE_GATE = 0.9
"""G-WM1: strict parse rate threshold."""
DYNAMICS_MARGIN = 0.10
"""G-WM2, G-WM3: field-F1 on changed transitions must exceed copy-previous by this much."""
EPS = 1e-12
"""Float slack of the gate comparisons (0.5 − 0.4 is 0.09999999999999998 in binary)."""
END_OF_TURN = "<|im_end|>"
"""Appended to SFT targets so the model learns to stop (ChatML, SmolLM2's end-of-turn and EOS token)."""


# ---------------------------------------------------------------------------------------------------- item sets
def sample(examples: Sequence[WMExample], n: int, seed: int, *, label: str = "") -> list[WMExample]:
    """A seeded subset of ``n`` examples (all when fewer), in table order."""
    rng = np.random.default_rng(derive_seed(seed, "wm-lora-sample", label))
    idx = sorted(int(i) for i in rng.permutation(len(examples))[:n])
    return [examples[i] for i in idx]


def balanced(examples: Sequence[WMExample], n: int, seed: int, *, label: str = "") -> list[WMExample]:
    """Half changed, half unchanged transitions (as many as exist), sorted by (task, t)."""
    ch = [e for e in examples if e.changed]
    un = [e for e in examples if not e.changed]
    a = sample(ch, n // 2, seed, label=label + "/changed")
    b = sample(un, n - len(a), seed, label=label + "/unchanged")
    return sorted(a + b, key=lambda e: (e.task_id, e.t))


def gate_sets(table: Any, sft: Sequence[WMExample], n: int, seed: int, fmt: QwenFormat = LM_FMT, *,
              episodes: int = 2) -> tuple[list[WMExample], list[WMExample]]:
    """(seen, unseen): ``n`` changed transitions each. ``seen``: fresh episodes on the layouts the SFT examples come
    from (collected with another seed; prompts that occur in ``sft`` are dropped); ``unseen``: the ``dev`` split,
    whose layouts no training stage sees."""
    dom = KeyDoorDomain()
    lseeds = sorted({r.layout_seed for r in table.split("train") if r.task_id in {e.task_id for e in sft}})
    fresh = collect_keydoor([(s, "dev") for s in lseeds], episodes, seed=derive_seed(seed, "wm-lora-gate"))
    trained = {e.prompt for e in sft}
    seen = [e for e in build_examples(fresh.rows, fmt, dom, seed=seed) if e.changed and e.prompt not in trained]
    unseen = [e for e in build_examples(table.split("dev"), fmt, dom, seed=seed) if e.changed]
    return sample(seen, n, seed, label="seen"), sample(unseen, n, seed, label="unseen")


def one_shot(prompt: str, demo: WMExample) -> str:
    """``prompt`` (ChatML text) with one worked answer appended to its system message: the zero-shot arm's
    demonstration of the output contract (reasoning, then one closed observation block)."""
    head, sep, rest = prompt.partition(END_OF_TURN)
    if not sep:
        raise ValueError("one_shot: the prompt has no end-of-turn marker after its system message")
    return f"{head}\n\n**Example answer (for another state):**\n{demo.target}{sep}{rest}"


# ---------------------------------------------------------------------------------------------------- scoring
def strict_parse(text: str) -> bool:
    """An observation block that opens and closes (the strict parse of G-WM1)."""
    ext = extract_observation(text, mode="strict")
    return ext.observation is not None and not ext.flags.get("unclosed", False)


def predict(lm: Any, prompts: Sequence[str], *, max_new: int, batch: int = 8,
            progress: Callable[[int, int], None] | None = None) -> list[str]:
    """Greedy completions, decoded ``batch`` prompts at a time, each stopped after its closing observation tag."""
    gen = GenerateConfig(temperature=0.0, max_new_tokens=max_new, stop_regex=re.escape(CLOSE_OBS))
    out: list[str] = []
    for s in range(0, len(prompts), batch):
        out += [c.text for c in lm.generate(list(prompts[s:s + batch]), gen)]
        if progress is not None:
            progress(len(out), len(prompts))
    return out


def score(examples: Sequence[WMExample], texts: Sequence[str]) -> list[dict[str, Any]]:
    """Per item: field-F1 of the strict observation, copy-previous F1 on the same item, strict parse, layout."""
    dom = KeyDoorDomain()
    rows = []
    for e, text in zip(examples, texts):
        obs = extract_observation(text, mode="strict").observation
        rows.append({"task_id": e.task_id, "t": e.t, "changed": e.changed, "f1": field_f1(dom, obs, e.next_obs),
                     "copy_f1": field_f1(dom, e.obs, e.next_obs), "parse": strict_parse(text), "text": text})
    return rows


def gates(seen: Sequence[dict[str, Any]], unseen: Sequence[dict[str, Any]]) -> finetune.GateReport:
    """G-WM1 (parse rate over both sets), G-WM2 (seen layouts), G-WM3 (unseen layouts) from :func:`score` rows."""
    both = list(seen) + list(unseen)
    parse = float(np.mean([r["parse"] for r in both])) if both else 0.0

    def margin(rows: Sequence[dict[str, Any]]) -> tuple[float, dict[str, Any]]:
        if not rows:
            return float("-inf"), {"n": 0}
        f1, copy = float(np.mean([r["f1"] for r in rows])), float(np.mean([r["copy_f1"] for r in rows]))
        return f1 - copy, {"n": len(rows), "f1": round(f1, 4), "copy_previous_f1": round(copy, 4)}

    m2, d2 = margin(seen)
    m3, d3 = margin(unseen)
    return finetune.GateReport([
        finetune.GateResult("G-WM1", parse >= PARSE_GATE - EPS, round(parse, 4), PARSE_GATE, {"n": len(both)}),
        finetune.GateResult("G-WM2", m2 >= DYNAMICS_MARGIN - EPS, round(m2, 4), DYNAMICS_MARGIN, d2),
        finetune.GateResult("G-WM3", m3 >= DYNAMICS_MARGIN - EPS, round(m3, 4), DYNAMICS_MARGIN, d3)])


# ---------------------------------------------------------------------------------------------------- training data
def sft_examples(encode: Callable[[str], list[int]], examples: Sequence[WMExample]) -> list[finetune.Example]:
    """Prompt + target + end-of-turn, the loss on the target and the end-of-turn token. ``encode`` tokenises raw
    text the way generation renders a string prompt (special tokens written in the text are recognised)."""
    return [finetune.Example.completion(encode(e.prompt), encode(e.target + END_OF_TURN)) for e in examples]


def cpt_windows(encode: Callable[[str], list[int]], docs: Sequence[str], *, seq: int, tokens: int, seed: int,
                sep: str = END_OF_TURN) -> list[finetune.Example]:
    """Continual pre-training data: documents in a seeded order, joined with ``sep``, cut into windows of ``seq``
    tokens until ``tokens`` tokens; the loss on every token."""
    order = np.random.default_rng(derive_seed(seed, "wm-lora-cpt")).permutation(len(docs))
    stream: list[int] = []
    for i in order:
        stream += encode(docs[int(i)] + sep)
        if len(stream) >= tokens:
            break
    stream = stream[:max(seq, (min(tokens, len(stream)) // seq) * seq)]
    return [finetune.Example(stream[s:s + seq], stream[s:s + seq]) for s in range(0, len(stream) - 1, seq)
            if len(stream[s:s + seq]) > 1]


def manifest(examples: Sequence[finetune.Example]) -> str:
    """Digest of tokenised training data (ids and labels): the data part of an adapter's content address."""
    h = hashlib.sha256()
    for ex in examples:
        h.update(json.dumps([list(ex.ids), list(ex.labels)]).encode())
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------------- hf arms
def load_base(base: str = "smollm2", *, max_batch: int = 8) -> Any:
    """A fresh copy of the base model (an ``HFLM`` of its own: LoRA training edits it in place)."""
    from agentmill.lm import hf

    return hf.load_uncached(base, dtype="float32", threads=None, max_batch=max_batch)


def load_arm(chain: Sequence[Path], base: str = "smollm2", *, max_batch: int = 8) -> Any:
    """The base with each adapter of ``chain`` merged in order, as an ``HFLM`` (inference costs what the base
    costs)."""
    from agentmill.lm.hf import HFLM

    lm = load_base(base, max_batch=max_batch)
    model = lm.model
    for d in chain:
        model = finetune.load_adapter(model, d, merge=True)
    tags = "+".join(f"adapter={Path(d).name}" for d in chain)
    return HFLM(model, lm.tokenizer, spec=f"hf:{base}" + (f"+{tags}" if tags else ""), info=dict(lm.info),
                max_batch=max_batch)


def train_adapter(kind: str, examples: Sequence[finetune.Example], cfg: finetune.TrainCfg, *,
                  init: Sequence[Path] = (), base: str = "smollm2", root: Path | None = None,
                  progress: Callable[[dict[str, Any]], None] | None = None) -> tuple[Path, bool]:
    """(adapter dir, trained now?): LoRA (r 16, α 32, dropout 0.05, seven projections) trained with ``cfg`` on
    ``examples`` over the base with the ``init`` adapters merged in; content-addressed (data, hyper-parameters,
    base and init chain), reused when its card exists, resumed from its checkpoint when killed."""
    lora = finetune.LoraCfg()
    out, hyper, base_id = _address(kind, examples, cfg, lora, init, base, root)
    key = out.name.rsplit("-", 1)[1]

    def train(directory: Path) -> None:
        lm = load_arm(init, base)
        pad = lm.pad_id
        run = finetune.train_lora(lm.model, examples, cfg, lora=lora, pad_id=pad,
                                  checkpoint=finetune.checkpoint_path(directory), fingerprint=key, progress=progress)
        card = {"kind": kind, "base": base_id, "key": key, "hyper": hyper, "n_examples": len(examples),
                "steps": run.steps, "losses": [round(x, 5) for x in run.losses], "tokens": run.tokens,
                "target_tokens": run.target_tokens, "seconds": round(run.seconds, 2),
                "tokens_per_second": round(run.tokens / max(run.seconds, 1e-9), 2), "n_trainable": run.n_trainable,
                "threads": _threads()}
        finetune.save_adapter(run.model, directory, card)
        del lm, run
        gc.collect()

    return finetune.obtain_adapter(out, train)


def adapter_dir(kind: str, examples: Sequence[finetune.Example], cfg: finetune.TrainCfg, *,
                init: Sequence[Path] = (), base: str = "smollm2", root: Path | None = None) -> Path:
    """Where :func:`train_adapter` keeps (or would keep) the adapter of these arguments; nothing is trained."""
    return _address(kind, examples, cfg, finetune.LoraCfg(), init, base, root)[0]


def _address(kind: str, examples: Sequence[finetune.Example], cfg: finetune.TrainCfg, lora: finetune.LoraCfg,
             init: Sequence[Path], base: str, root: Path | None) -> tuple[Path, dict[str, str], str]:
    hyper = {"kind": kind, "train": repr(cfg), "lora": repr(lora)}
    base_id = f"hf:{base}" + "".join(f"+{Path(d).name}" for d in init)
    key = finetune.content_key(manifest(examples), hyper, base_id)
    return (root or finetune.default_root() / "world_model") / f"{kind}-{key}", hyper, base_id


def _threads() -> int:
    torch = finetune.require_torch()
    return int(torch.get_num_threads())
