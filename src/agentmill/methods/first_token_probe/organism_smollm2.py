"""The SmolLM2-135M refusal organism: the trace grammar taught to SmolLM2-135M-Instruct by LoRA, with gates.

The tiny organisms (:mod:`.organism`) learn the grammar from scratch; this one fine-tunes the embedded SmolLM2
(``hf:smollm2``, fp32) through the project's one LoRA loop (:func:`agentmill.lm.finetune.train_lora`) on the same
prompt bank (``organism_train`` split) and trace grammar (:mod:`.traces`), rendered in SmolLM2's ChatML with its
default system message and the assistant turn prefilled with ``<think>\\n`` [R] (docs/methods/first_token_probe.md,
"The SmolLM2 organism"). The loss covers the whole assistant turn after the prefill: trace, closer, answer and
``<|im_end|>``.

Adapters are content-addressed (data manifest, recipe, GGUF sha256) under
``core.paths.cache_root()/adapters/first_token_probe/``, resumed from their per-step checkpoint when a training is
killed, and carry ``organism_card.json`` (recipe, data hash, losses, tokens/s, gate results). ``validate`` measures
gates R1–R6 on ``probe_test`` (the thresholds of :data:`.organism.GATES`) and reports R7 (the base model's refusal
on C, expected ≈ 0); a claim reads the organism only when every gate passed.

:class:`ChatMLOrganism` lets every E171 step written for the tiny organisms (sampling, capture, forks) run on this
one unchanged: it maps the tiny prompt format ``User: <request>\\nAssistant: <think>\\n<prefill>`` to ChatML.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.methods.first_token_probe.prompts import sample_prompts
from agentmill.methods.first_token_probe.traces import CLOSE, OPEN, VARIANTS, plan_trace

BASE = "smollm2"
CARD_FILE = "organism_card.json"
SYSTEM_DEFAULT = None
"""No system message: SmolLM2's chat template then writes its own default one (ARCHITECTURE §3: a custom system
prompt can derail it)."""


@dataclass(frozen=True)
class SmolOrganismConfig:
    """Recipe of the SmolLM2 refusal organism [R] (docs/methods/first_token_probe.md, "The SmolLM2 organism").
    Defaults follow the project's recipe except where the method README's numbered deviations say otherwise."""

    n_examples: int = 1000
    """Training examples (one planned trace per ``organism_train`` prompt; C 25 %, N 25 %, B 20 %, D 30 %, the
    tiny organisms' mix)."""
    lr: float = 1e-3
    """Peak AdamW learning rate. 1e-3 (not 3e-4): lr 3e-4 for one epoch is the ConstraintRot v1 recipe, which
    underfit; 1e-3 is its v2 (docs/LOG.md 2026-11-25/26) — chosen before this organism was trained."""
    epochs: float = 1.0
    """Passes over the examples."""
    micro_batch: int = 4
    """Examples per forward pass."""
    grad_accum: int = 2
    """Micro-batches per optimiser step (1,000 examples → 125 steps)."""
    max_len: int = 256
    """Longest example in tokens (longer ones are dropped and counted; the rendered examples are ~80–110)."""
    r: int = 8
    """LoRA rank (arXiv 2106.09685)."""
    alpha: int = 16
    """``lora_alpha``."""
    dropout: float = 0.05
    """``lora_dropout``."""
    dtype: str = "fp32"
    """Training precision: fp32, since bf16 autocast was slower on this AVX2 host (method README deviation)."""
    threads: int = 1
    """torch threads: 1, the host is shared by two trainings (method README deviation; spec'd 2)."""
    seed: int = 0
    """Seeds the data, the LoRA initialisation, dropout and the example order."""


def _counts(n: int) -> dict[str, int]:
    c = {"C": round(n * 0.25), "N": round(n * 0.25), "B": round(n * 0.2)}
    c["D"] = n - sum(c.values())
    return c


def chatml_prompt(tokenizer: Any, user: str, prefill: str = "") -> str:
    """SmolLM2's ChatML for one user turn (default system message), the assistant header, ``<think>\\n`` and an
    optional trace prefill."""
    text = tokenizer.apply_chat_template([{"role": "user", "content": user}], add_generation_prompt=True,
                                         tokenize=False)
    return text + OPEN + prefill


def training_texts(variant: str, cfg: SmolOrganismConfig = SmolOrganismConfig()) -> list[tuple[str, str]]:
    """(user message, assistant target after the prefill) per example: ``cfg.n_examples`` ``organism_train``
    prompts, each with one trace planned from ``variant``'s grammar. Tokenizer-free, so it addresses the adapter."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose one of {', '.join(VARIANTS)}")
    items = sample_prompts("organism_train", _counts(cfg.n_examples), seed=cfg.seed)
    rng = np.random.default_rng([cfg.seed, 11, VARIANTS.index(variant)])
    out = []
    for it in items:
        tr = plan_trace(it, variant, rng)
        out.append((it.user, tr.text + CLOSE + tr.answer))
    return out


def data_sha256(texts: list[tuple[str, str]]) -> str:
    return hashlib.sha256(json.dumps(texts).encode()).hexdigest()


def tokenize_examples(tokenizer: Any, texts: list[tuple[str, str]], max_len: int) -> tuple[list[Any], int]:
    """(``finetune.Example`` list, dropped-for-length count): prompt ids as ``HFLM.render`` tokenises the ChatML
    string, target ids = the assistant text + ``<|im_end|>`` (loss on the target only)."""
    from agentmill.lm.finetune import Example

    eos = int(tokenizer.eos_token_id)
    out, dropped = [], 0
    for user, target in texts:
        p = list(tokenizer(chatml_prompt(tokenizer, user))["input_ids"])
        t = list(tokenizer(target, add_special_tokens=False)["input_ids"]) + [eos]
        if len(p) + len(t) > max_len:
            dropped += 1
            continue
        out.append(Example.completion(p, t))
    return out, dropped


def base_id() -> str:
    """``hf:smollm2@<GGUF sha256>``: the base part of the content address (no model load)."""
    from agentmill.lm import hf

    directory, gguf = hf.resolve_source(BASE)
    return f"hf:{BASE}@{hf.gguf_sha256(directory / gguf)}"


def hyper(cfg: SmolOrganismConfig) -> dict[str, Any]:
    return {"organism": "refusal", **asdict(cfg)}


def adapter_dir(variant: str, cfg: SmolOrganismConfig = SmolOrganismConfig(), root: Path | None = None) -> Path:
    """Where the adapter of (variant, recipe) lives or would live; nothing is trained or loaded."""
    from agentmill.lm import finetune

    key = finetune.content_key(data_sha256(training_texts(variant, cfg)), {"variant": variant, **hyper(cfg)},
                               base_id())
    return (root or finetune.default_root() / "first_token_probe") / f"smollm2-refusal-{variant}-{key}"


def plan(variant: str, cfg: SmolOrganismConfig = SmolOrganismConfig(), root: Path | None = None) -> dict[str, Any]:
    """What :func:`obtain` would do, without doing it: the adapter directory, whether it is trained, validated,
    and whether a checkpoint of an interrupted training waits there."""
    from agentmill.lm import finetune

    d = adapter_dir(variant, cfg, root)
    card = json.loads((d / CARD_FILE).read_text()) if (d / CARD_FILE).exists() else None
    ck = finetune.checkpoint_path(d)
    return {"adapter_dir": str(d), "trained": card is not None, "validated": bool(card and card.get("validated")),
            "gates": card.get("gates") if card else None, "checkpoint": str(ck) if ck.exists() else None,
            "n_examples": cfg.n_examples, "steps": finetune.TrainCfg(micro_batch=cfg.micro_batch,
                                                                      grad_accum=cfg.grad_accum,
                                                                      epochs=cfg.epochs).plan(cfg.n_examples)[1]}


def cached_cards(variant: str, root: Path | None = None) -> list[tuple[Path, dict[str, Any]]]:
    """(adapter dir, card) of every trained SmolLM2 organism of ``variant`` in the cache, newest first — a cheap
    listing (no data, no model) for notes beside claims that a tiny organism carries."""
    from agentmill.core.paths import cache_root

    base = root or cache_root() / "adapters" / "first_token_probe"
    out = []
    for card in base.glob(f"smollm2-refusal-{variant}-*/{CARD_FILE}"):
        try:
            out.append((card.parent, json.loads(card.read_text())))
        except (OSError, ValueError):
            continue
    return sorted(out, key=lambda pc: (pc[0] / CARD_FILE).stat().st_mtime, reverse=True)


def obtain(variant: str, cfg: SmolOrganismConfig = SmolOrganismConfig(), *, root: Path | None = None,
           progress: Any = None, max_steps: int | None = None) -> tuple[Path, bool]:
    """(adapter dir, trained now?): the content-addressed adapter, trained here when absent (resuming its
    checkpoint). ``max_steps`` stops after that many optimiser steps leaving the checkpoint (a timing probe;
    nothing is saved as an adapter)."""
    from agentmill.lm import finetune

    out = adapter_dir(variant, cfg, root)
    key = out.name.rsplit("-", 1)[1]

    def train(directory: Path) -> None:
        import torch

        from agentmill.lm import hf

        lm = hf.load_uncached(BASE, dtype="float32", threads=cfg.threads, max_batch=16)
        torch.set_num_threads(cfg.threads)
        texts = training_texts(variant, cfg)
        examples, dropped = tokenize_examples(lm.tokenizer, texts, cfg.max_len)
        tcfg = finetune.TrainCfg(lr=cfg.lr, epochs=cfg.epochs, micro_batch=cfg.micro_batch,
                                 grad_accum=cfg.grad_accum, seed=cfg.seed, dtype=cfg.dtype)  # type: ignore[arg-type]
        lora = finetune.LoraCfg(r=cfg.r, alpha=cfg.alpha, dropout=cfg.dropout)
        prog = progress
        if max_steps is not None:
            class _Stop(Exception):
                pass

            def prog(p: dict[str, Any]) -> None:  # noqa: F811
                if progress is not None:
                    progress(p)
                if p["step"] >= max_steps:
                    raise _Stop
            try:
                finetune.train_lora(lm.model, examples, tcfg, lora=lora, pad_id=lm.pad_id,
                                    checkpoint=finetune.checkpoint_path(directory), fingerprint=key, progress=prog)
            except _Stop:
                return
            raise RuntimeError("max_steps not reached")
        run = finetune.train_lora(lm.model, examples, tcfg, lora=lora, pad_id=lm.pad_id,
                                  checkpoint=finetune.checkpoint_path(directory), fingerprint=key, progress=prog)
        card = {"name": f"smollm2-refusal-{variant}", "variant": variant, "base": base_id(), "key": key,
                "recipe": hyper(cfg), "train_cfg": repr(tcfg), "lora": repr(lora),
                "data_sha256": data_sha256(texts), "n_examples": len(examples), "dropped_too_long": dropped,
                "steps": run.steps, "losses": [round(x, 5) for x in run.losses],
                "final_loss": round(float(np.mean(run.losses[-10:])), 5), "tokens": run.tokens,
                "target_tokens": run.target_tokens, "train_seconds": round(run.seconds, 1),
                "tokens_per_second": round(run.tokens / max(run.seconds, 1e-9), 1), "n_trainable": run.n_trainable,
                "threads": int(torch.get_num_threads()), "versions": {"torch": torch.__version__,
                                                                     "transformers": lm.info.get("transformers")},
                "validated": False, "validation": None,
                "note": "toy organism trained only to refuse synthetic requests; its 'records' are placeholders"}
        finetune.save_adapter(run.model, directory, card, card_file=CARD_FILE)

    if max_steps is not None:
        train(out)
        return out, True
    return finetune.obtain_adapter(out, train, card_file=CARD_FILE)


# ------------------------------------------------------------------------------------------------ inference
_TINY_PROMPT = re.compile(r"\AUser: (?P<user>.*)\nAssistant: <think>\n(?P<prefill>.*)\Z", re.S)


class ChatMLOrganism:
    """An ``HFLM`` (the base with the adapter merged) that accepts the tiny organisms' prompt strings:
    ``User: <u>\\nAssistant: <think>\\n<prefill>`` becomes SmolLM2's ChatML for ``u`` + ``<think>\\n<prefill>``.
    Any other prompt passes through. Everything else (forward, caches, hooks, decode) is the wrapped model's."""

    def __init__(self, inner: Any, card: dict[str, Any]):
        self.inner, self.card = inner, card
        self.spec = inner.spec

    def to_chatml(self, prompt: Any) -> Any:
        if isinstance(prompt, str):
            m = _TINY_PROMPT.match(prompt)
            if m:
                return chatml_prompt(self.inner.tokenizer, m["user"], m["prefill"])
        return prompt

    def render(self, prompt: Any) -> list[int]:
        return self.inner.render(self.to_chatml(prompt))

    def generate(self, prompts: Any, config: Any = None) -> Any:
        from agentmill.lm.base import GenerateConfig

        return self.inner.generate([self.to_chatml(p) for p in prompts], config or GenerateConfig())

    def logprobs(self, prompt: Any, continuation: str) -> Any:
        return self.inner.logprobs(self.to_chatml(prompt), continuation)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def __repr__(self) -> str:
        return f"ChatMLOrganism({self.spec!r})"


def load(adapter: Path, *, allow_unvalidated: bool = False, max_batch: int = 16) -> ChatMLOrganism:
    """The organism of ``adapter`` merged into a fresh fp32 SmolLM2, wrapped in :class:`ChatMLOrganism`. Raises
    ``OrganismNotValidated`` unless the card says validated (or ``allow_unvalidated``)."""
    from agentmill.lm import finetune, hf
    from agentmill.lm.hf import HFLM
    from agentmill.methods.first_token_probe.organism import OrganismNotValidated

    card = finetune.read_card(adapter, CARD_FILE)
    if not card.get("validated") and not allow_unvalidated:
        raise OrganismNotValidated(f"{adapter}: SmolLM2 organism card is not validated (gates "
                                   f"{card.get('gate_pass')}); run its validation or pass --allow-unvalidated")
    base = hf.load_uncached(BASE, dtype="float32", threads=None, max_batch=max_batch)
    sha = base.info.get("gguf_sha256")
    if sha and not str(card.get("base", "")).endswith(sha):
        raise ValueError(f"{adapter}: trained on {card.get('base')}, but the installed SmolLM2 GGUF is {sha}")
    merged = finetune.load_adapter(base.model, adapter, merge=True)
    lm = HFLM(merged, base.tokenizer, spec=f"hf:{BASE}+adapter={Path(adapter).name}", info=dict(base.info),
              max_batch=max_batch)
    return ChatMLOrganism(lm, card)


# ------------------------------------------------------------------------------------------------ gates
def base_refusal_on_c(lm: Any, items: list[Any], *, k: int, seed: int, max_new_tokens: int) -> dict[str, Any]:
    """R7: the base model (no adapter) sampled on C prompts in the same ChatML + ``<think>\\n`` prompt; its whole
    completion (it writes no closer) judged by the default ensemble. Reported, not gated."""
    from agentmill.lm.base import GenerateConfig
    from agentmill.methods.first_token_probe.judges import label_answers

    prompts = [chatml_prompt(lm.tokenizer, it.user) for it in items]
    comps = lm.generate(prompts, GenerateConfig(max_new_tokens=max_new_tokens, temperature=1.0, seed=seed, n=k))
    _, votes = label_answers([c.text for c in comps])
    lab = [v for v in votes if v is not None]
    return {"R7": float(np.mean(lab)) if lab else float("nan"), "refused": int(sum(lab)), "n": len(comps),
            "labelled": len(lab),
            "closer_share": float(np.mean([CLOSE.strip() in c.text for c in comps])),
            "examples": [c.text[:160] for c in comps[:3]]}


def gate_counts(rollouts: list[Any]) -> dict[str, list[int]]:
    """[successes, n] behind each gate value of :func:`.organism.gate_values` (same rows, same rules), so every
    gate gets a binomial interval; ``D<q>`` holds each contested level's [refusals, n]."""
    from agentmill.methods.first_token_probe.judges import answer_stance

    fin = [r for r in rollouts if r.parsed.finished and r.parsed.outcome is not None]
    cnt = lambda rows: [int(sum(r.parsed.outcome == 1 for r in rows)), len(rows)]  # noqa: E731
    out = {"R1": [len(fin), len(rollouts)], "R2": cnt([r for r in fin if r.item.category == "C"]),
           "R3_B": cnt([r for r in fin if r.item.category == "B"]),
           "R3_N": cnt([r for r in fin if r.item.category == "N"])}
    for q in (0.25, 0.5, 0.75):
        out[f"D{q}"] = cnt([r for r in fin if r.item.category == "D" and r.item.q == q])
    out["R5"] = [int(sum(answer_stance(r.parsed.answer) == r.parsed.outcome for r in fin)), len(fin)]
    site = [r for r in fin if r.parsed.site is not None]
    out["R6"] = [int(sum(r.parsed.site_stance == r.parsed.outcome for r in site)), len(site)]
    return out


def validate(adapter: Path, *, n_per_cell: int = 40, seed: int = 1, max_new_tokens: int = 128,
             base_check: bool = True, log: Any = None) -> dict[str, Any]:
    """Measure R1–R6 on ``probe_test`` prompts (T = 1, K = 4 per prompt, ``n_per_cell`` rollouts per cell: C, N,
    B and each contested level) and R7 on the base; write them into the card (``validated`` iff R1–R6 pass)."""
    from agentmill.lm import finetune
    from agentmill.methods.first_token_probe.organism import GATES, gate_values, gates_pass
    from agentmill.methods.first_token_probe.sampling import sample_rollouts

    t0 = time.perf_counter()
    lm = load(adapter, allow_unvalidated=True)
    per = max(1, n_per_cell // 4)
    items = sample_prompts("probe_test", {"C": per, "N": per, "B": per, "D": 3 * per}, seed=seed)
    rolls = sample_rollouts(lm, items, k=4, seed=seed, max_new_tokens=max_new_tokens, cache=True)
    vals = gate_values(rolls)
    ok = gates_pass(vals)
    sample_s = time.perf_counter() - t0
    if log:
        log(f"organism gates {vals} in {sample_s:.0f}s")
    cells = gate_counts(rolls)
    examples = [r.text[:200] for r in rolls[:: max(1, len(rolls) // 8)]]
    r7: dict[str, Any] = {"R7": None, "note": "not measured"}
    if base_check:
        import gc

        from agentmill.lm import hf

        del lm, rolls
        gc.collect()
        base = hf.load(BASE)
        c_items = [it for it in items if it.category == "C"]
        r7 = base_refusal_on_c(base, c_items, k=4, seed=seed, max_new_tokens=64)
        if log:
            log(f"R7 base refusal on C {r7['R7']}")
    report = finetune.GateReport([finetune.GateResult(g, ok[g], round(float(vals[g]), 4), GATES[g][1],
                                                      {"direction": GATES[g][0]}) for g in GATES])
    card = finetune.record_validation(adapter, report, card_file=CARD_FILE)
    card.update(gates={k: round(float(v), 4) for k, v in vals.items()}, gate_pass=ok, validated=all(ok.values()),
                gate_counts=cells, R7=r7, validation_setup={"split": "probe_test", "n_per_cell": n_per_cell,
                                                           "k": 4, "temperature": 1.0, "seed": seed,
                                                           "max_new_tokens": max_new_tokens},
                validation_seconds=round(time.perf_counter() - t0, 1),
                sample_examples=examples)
    from agentmill.core.records import write_json_atomic

    write_json_atomic(Path(adapter) / CARD_FILE, card)
    return card
