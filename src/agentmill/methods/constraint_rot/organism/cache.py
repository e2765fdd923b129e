"""Content-addressed organisms: one trained adapter per (SFT data manifest, hyperparameters, base).

Training takes ~45–85 min on 2 cores, so an adapter is trained once and then found by its address wherever it is
needed: the ``constraint-rot train`` command, the organism experiment, the instinct (CR-7), crossing (CR-10) and
framework (CR-12) experiments all call :func:`obtain_organism` with the same recipe and get the same directory.
The default root is ``<cache root>/organisms`` (``$AGENTMILL_CACHE``), outside any run's work dir, so a rerun
without ``--resume`` does not lose it. An existing directory holding an ``organism_card.json`` is reused as is;
``train_organism`` refuses to overwrite one (the package README, "Faults"). The address and the reuse rule are the
project's one (:func:`agentmill.lm.finetune.content_key`, :func:`~agentmill.lm.finetune.obtain_adapter`); what is
organism-specific here is the recipe and which of its fields enter the address."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from agentmill.core.paths import cache_root
from agentmill.lm.finetune import content_key, obtain_adapter


SPEC_LR = 3e-4
"""The AdamW learning rate of recipe v1 [R] (docs/methods/constraint_rot.md "Hyperparameters" lists recipe v3's)."""


@dataclass(frozen=True)
class Recipe:
    """Everything that decides an organism's weights (docs/methods/constraint_rot.md "Deviations from the paper" 5;
    quick 320 / full 960 examples).

    The defaults are **recipe v3**: v2 plus ``paired`` (below). Recipe v2 (docs/LOG.md 2026-11-25): the spec's
    recipe (v1: ``lr=SPEC_LR``, ``history_weight=0``) trained for 85 min and failed all six validation gates — 40 optimiser steps that
    supervised ~40 target tokens per ~1,300-token example left the target loss near 1.0 per token, with wrong tools
    and paraphrased arguments. v2 keeps the data, LoRA, schedule and batch, and changes two things fixed before
    training: lr 1e-3 (40 steps are far too few for 3e-4 to move a LoRA) and an auxiliary loss on the transcript's
    past tool-call turns (``train.history_labels``; ~2.6× more supervised action tokens at no extra compute); and
    it trains under bf16 autocast (the spec's optional ``--dtype bf16``) so the 320-example organism fits the
    issue's one-hour budget."""

    n_train: int = 960
    data_seed: int = 0
    instinct: bool = False
    """True: every other hard-family ``absent`` example refuses (the CR-7 instinct organism)."""
    base: str = "hf:smollm2"
    dtype: str = "bf16"
    """Training dtype (bf16 = CPU autocast, fp32 master weights; ~1.5× faster than fp32 measured side by side on
    this machine, docs/LOG.md 2026-11-25). Inference dtype is the actor's choice (the experiments use fp32)."""
    max_length: int = 1536
    lr: float = 1e-3
    epochs: float = 1.0
    history_weight: float = 1.0
    """Weight of the mean loss on past tool-call turns beside the target's (0 = the spec's target-only loss)."""
    micro_batch: int = 2
    grad_accum: int = 4
    seed: int = 0
    paired: bool = True
    """Recipe v3 (docs/LOG.md 2026-11-25, session 16): contrastive groups — each train episode gives a ``present``,
    ``absent``, ``near_miss`` and a fourth example that share every token but the policy slot or the trigger, and
    each group stays inside one optimiser step (``build_sft_dataset(paired=True)``, ``train_organism(
    keep_groups=True)``). False: one episode per example (v1/v2), whose organisms took the compliant alternative
    as often without the rule as with it."""
    fresh_values: bool = False
    """Recipe v4 (docs/LOG.md 2026-11-25, session 17; failed its gates at 960, session 18): every SFT episode draws
    new parameter values (``organism/values.py``) instead of the two train values per parameter, which the v2
    organism memorised. It changes the data only, so it enters the address through the data manifest."""

    def __post_init__(self) -> None:
        if self.n_train < 1:
            raise ValueError(f"n_train must be >= 1, got {self.n_train}")
        if not self.lr > 0 or not self.epochs > 0 or not self.history_weight >= 0:
            raise ValueError(f"lr and epochs must be > 0 and history_weight >= 0, got lr={self.lr}, "
                             f"epochs={self.epochs}, history_weight={self.history_weight}")
        if self.dtype not in ("fp32", "bf16"):
            raise ValueError(f"dtype must be 'fp32' or 'bf16', got {self.dtype!r}")

    def hyper(self) -> dict[str, Any]:
        """The training hyperparameters that enter the address (the LoRA config by its repr). ``history_weight``
        enters only when non-zero and the group order only when ``paired``, so v1 (spec) and v2 recipes keep the
        addresses they were trained under."""
        from agentmill.lm.finetune import LoraCfg

        hyper = {"lora": repr(LoraCfg()), "lr": self.lr, "epochs": self.epochs, "micro_batch": self.micro_batch,
                 "grad_accum": self.grad_accum, "seed": self.seed, "dtype": self.dtype,
                 "max_length": self.max_length}
        if self.history_weight:
            hyper["history_weight"] = self.history_weight
        if self.paired:
            hyper["keep_groups"] = True
        return hyper


def default_root() -> Path:
    return cache_root() / "organisms"


def adapter_key(manifest: str, hyper: Mapping[str, Any], base: str) -> str:
    """Content address of an organism: the SFT data manifest hash, the training hyperparameters and the base."""
    return content_key(manifest, hyper, base)


def exact_length(base: str, load: Callable[[], Any]) -> Callable[[Any], int]:
    """The trainer's exact token count of an SFT example (the prompt as the server renders it, the target and the
    end-of-turn token), so the data fits ``max_length`` without the estimate's ~12–25 % undercount. The default
    base reads only its tokenizer (same GGUF); any other base is loaded once for its tokenizer."""
    from agentmill.methods.constraint_rot.messages import smollm2_tokenizer
    from agentmill.methods.constraint_rot.organism.train import encode_example

    tok = smollm2_tokenizer() if base == "hf:smollm2" else load().tokenizer
    return lambda ex: len(encode_example(tok, ex)[0])


def plan_organism(recipe: Recipe, cat: Any, *, counter: Any, load: Callable[[], Any],
                  root: str | Path | None = None) -> tuple[Path, list[Any], dict[str, Any]]:
    """(adapter directory, SFT data, provenance) without training: builds the SFT data (deterministic; raises
    ``LeakageError`` on any train/test overlap) and derives the content address. ``info['cached']`` says whether
    a trained organism is already there."""
    from agentmill.methods.constraint_rot.organism.data import build_sft_dataset, manifest_hash
    from agentmill.methods.constraint_rot.organism.train import CARD_FILE

    data = build_sft_dataset(cat, n=recipe.n_train, seed=recipe.data_seed, counter=counter,
                             max_tokens=recipe.max_length, instinct=recipe.instinct,
                             measure=exact_length(recipe.base, load), paired=recipe.paired,
                             fresh_values=recipe.fresh_values)
    manifest = manifest_hash(data)
    out = Path(root if root is not None else default_root()) / adapter_key(manifest, recipe.hyper(), recipe.base)
    info = {"dir": str(out), "key": out.name, "data_manifest_hash": manifest, "n_train": len(data),
            "recipe": asdict(recipe), "cached": (out / CARD_FILE).exists()}
    return out, data, info


def obtain_organism(recipe: Recipe, cat: Any, *, counter: Any, load: Callable[[], Any], root: str | Path | None = None,
                    progress: Callable[[dict[str, Any]], None] | None = None) -> tuple[Path, bool, dict[str, Any]]:
    """(adapter directory, trained now?, provenance) for ``recipe``: :func:`plan_organism`, then training only when
    ``<root>/<address>`` has no card. ``load`` returns a fresh organism ``Base`` (training adds the LoRA to it in
    place)."""
    from agentmill.methods.constraint_rot.organism.train import CARD_FILE, train_organism

    out, data, info = plan_organism(recipe, cat, counter=counter, load=load, root=root)

    def train(directory: Path) -> None:
        train_organism(data, out_dir=directory, lr=recipe.lr, epochs=recipe.epochs, micro_batch=recipe.micro_batch,
                       grad_accum=recipe.grad_accum, seed=recipe.seed, dtype=recipe.dtype,  # type: ignore[arg-type]
                       max_length=recipe.max_length, history_weight=recipe.history_weight,
                       keep_groups=recipe.paired, progress=progress, base=load())

    out, trained = obtain_adapter(out, train, card_file=CARD_FILE)
    return out, trained, info
