"""The LoRA model organism as the E164 experiments use it: its recipe and budgets per profile, the base-model loader,
the content-addressed adapter and the quick profile's plan-only report.

CR-2/3/4/6/11 (``organism``), the crossing (CR-10), the instinct organisms (CR-7) and the frameworks' model arm
(CR-12) all address the same adapter through these, so an organism is trained once and every experiment that uses it
reads the same card."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate
from agentmill.experiments.protocol import RunContext
from agentmill.methods.constraint_rot.organism.cache import Recipe


@dataclass(frozen=True)
class Setup:
    n_train: int = 960
    """SFT examples (docs/methods/constraint_rot.md "Deviations from the paper" 5: quick 320, full 960)."""
    n_per_cell: int = 150
    """Validation episodes per cell (spec: ≥ 150 full, ≥ 60 quick flagged low_n)."""
    n_episodes: int = 96
    """``test_iid`` trigger episodes of the CR-3 grid ([R]: quick 24,
    full 96; kinds alternate)."""
    n_nc3: int = 48
    """Episodes for the base-model control NC-3."""
    styles: tuple[str, ...] = ("goal_extract", "handoff", "running", "sectioned", "sectioned_secure",
                               "constraint_aware")
    """LLMSummary prompt styles (docs/methods/constraint_rot.md "Claims and verdicts" CR-3: quick goal_extract +
    handoff; full adds four)."""
    base: str = "hf:smollm2"
    """Organism base: ``hf:`` spec, ``tiny:organism`` (built into the work dir) or a spec the run context's
    ``lm_loader`` resolves to an organism ``Base`` (``organism_profiles.base_factory``)."""
    summariser: str = "hf:smollm2"
    """Summariser LM spec (loaded with ``ctx.load_lm``)."""
    counter: str = "smollm2"
    """Token counter for episodes, budgets and cards: ``smollm2`` or ``whitespace``."""
    distractor_tokens: tuple[int, ...] = (400, 1000)
    """Grid distractor length (docs/methods/constraint_rot.md "Use it" 2)."""
    max_length: int = 1536
    """Training max length (the trainer's default; see organism/train.py on the spec's 768)."""
    max_new_tokens: int = 160
    """Organism decode budget per decision."""
    dtype: str = "fp32"
    """Inference dtype (spec: fp32 default). Training runs under the recipe's own dtype (recipe v2: bf16 autocast,
    ``organism/cache.Recipe``), so this does not change the adapter address."""
    data_seed: int = 0
    """``build_sft_dataset`` seed."""
    lr: float = Recipe.lr
    """Organism training learning rate (recipe v2, ``organism/cache.Recipe``; the spec's v1 is 3e-4)."""
    history_weight: float = Recipe.history_weight
    """Weight of the loss on past tool-call turns (recipe v2; 0 = the spec's target-only loss)."""
    train_dtype: str = Recipe.dtype
    """Organism training dtype (recipe v2: bf16 autocast)."""
    paired: bool = Recipe.paired
    """Contrastive-group SFT data and order (recipe v3; False = v2)."""
    fresh_values: bool = Recipe.fresh_values
    """New parameter values per SFT episode (recipe v4; it failed its gates at 960). These recipe fields are setup
    fields so a record made under another recipe is never taken for this one's."""
    seed: int = 5
    """Episode seed of the grid (validation uses its own default seed 1)."""
    n_boot: int = 2000
    """Cluster-bootstrap resamples (prereg: full 2,000, quick 1,000)."""
    judged: bool = True
    """False: claim metrics are recorded as ``*_observed`` (stand-in models)."""
    allow_unvalidated: bool = False
    """Spec ``--allow-unvalidated``: measure despite failed gates; every number is then ``*_observed``."""
    plan_only: bool = False
    """Build and check the SFT data and the adapter address only: no training, no decoding, no claim judged (the
    quick profile; see ``SETUPS``)."""
    shared_cache: bool = True
    """Adapters and LLM summaries live in the shared caches (``$AGENTMILL_CACHE/organisms``, ``.../summaries``);
    False: in the run's work dir."""


SETUPS = {
    # smoke: the tiny:organism base reads bytes, so an SFT example is 3.5k-10k tokens at max_length 1 << 15; capped at
    # 6,000 (the longest needs 4,200 with a single distractor step) and trained in fp32 (bf16 autocast is slower on
    # an AVX2 CPU), its one training step took 22 s of CPU instead of 87 s (2026-11-28, AMD EPYC, AVX2, one thread)
    "smoke": Setup(n_train=8, n_per_cell=2, n_episodes=4, n_nc3=4, styles=("goal_extract", "handoff"),
                   base="tiny:organism", summariser="scripted:constant", counter="whitespace",
                   distractor_tokens=(150, 300), max_length=6000, train_dtype="fp32", max_new_tokens=8, n_boot=50,
                   judged=False, allow_unvalidated=True, shared_cache=False),
    # quick must keep the whole suite well under 30 min on 2 cores (ARCHITECTURE.md §4); training the organism
    # alone takes ~40 min there, so quick plans (data + address) and the SmolLM2 organism runs at full
    "quick": Setup(n_train=320, n_per_cell=60, n_episodes=24, n_nc3=24, styles=("goal_extract", "handoff"),
                   n_boot=1000, plan_only=True),
    # full = the spec's quick organism (320 SFT examples, 60 per gate cell flagged low_n, 24 grid episodes, two
    # summary styles): the spec's full sizes (960 / 150 / 96 / six styles) take several hours on 2 CPU cores;
    # they stay reachable with --set n_train=960 n_per_cell=150 ... (a new recipe, so a new adapter)
    "full": Setup(n_train=320, n_per_cell=60, n_episodes=24, n_nc3=24, styles=("goal_extract", "handoff"),
                  n_boot=1000),
}


# -- the adapter ---------------------------------------------------------------------------------------------------
def base_factory(spec: str, ctx: RunContext) -> Callable[[], Any]:
    """A loader of a fresh organism base: ``hf:`` specs load SmolLM2 from its GGUF; ``tiny:organism`` (the smoke
    profile's) is a tiny random Llama the run builds into its own work dir the first time (``organism/tiny_base.py``),
    so ``agentmill reproduce --profile smoke`` needs nothing a test would inject; anything else is resolved by the run
    context's ``lm_loader`` and must give an organism ``Base``."""
    from agentmill.methods.constraint_rot.organism.tiny_base import TINY_BASE, tiny_base
    from agentmill.methods.constraint_rot.organism.train import Base, load_base

    if spec.startswith("hf:"):
        return lambda: load_base(spec)
    if spec == TINY_BASE:
        directory = Path(ctx.work_dir) / "tiny-base"
        return lambda: tiny_base(directory)
    if ctx.lm_loader is None:
        raise ValueError(f"base {spec!r} is not an hf: spec and the run context has no lm_loader to resolve it")

    def load() -> Any:
        b = ctx.lm_loader(spec)  # type: ignore[misc]
        if not isinstance(b, Base):
            raise ValueError(f"lm_loader({spec!r}) must return an organism Base, got {type(b).__name__}")
        return b
    return load


def recipe_of(s: Setup, *, instinct: bool = False) -> Any:
    """The organism recipe of a setup (shared by every E164 experiment that needs the organism)."""

    return Recipe(n_train=s.n_train, data_seed=s.data_seed, instinct=instinct, base=s.base, max_length=s.max_length,
                  lr=s.lr, history_weight=s.history_weight, dtype=s.train_dtype, paired=s.paired,
                  fresh_values=s.fresh_values)


def adapter_weights(adapter: Path) -> list[Path]:
    """The files of a trained organism that decide its behaviour: declared as the run's artefacts
    (``RunContext.read_artefact``), so an organism retrained at the same address reruns what used it. Not its card,
    which validation updates in place (the experiments check the card's validation themselves)."""
    from agentmill.lm.finetune import ADAPTER_FILE

    return [adapter / ADAPTER_FILE, adapter / "adapter_config.json"]


def obtain_adapter(s: Setup, ctx: RunContext, cat: Any, counter: Any, load: Callable[[], Any], *,
                   instinct: bool = False) -> tuple[Path, bool]:
    """(adapter directory, trained now?) from the shared content-addressed organism cache (``organism/cache.py``;
    ``shared_cache=False`` keeps it in the run's work dir, as the smoke profile does)."""
    from agentmill.methods.constraint_rot.organism.cache import obtain_organism

    def progress(p: dict[str, Any]) -> None:
        ctx.progress(f"E164 organism: training (loss {p['loss']:.3f})", p["step"], p["steps"])

    root = None if s.shared_cache else Path(ctx.work_dir) / "organisms"
    out, trained, info = obtain_organism(recipe_of(s, instinct=instinct), cat, counter=counter, load=load, root=root,
                                         progress=progress)
    ctx.read_artefact(*adapter_weights(out))
    ctx.data["instinct_adapter" if instinct else "adapter"] = {k: info[k] for k in ("key", "data_manifest_hash",
                                                                                    "n_train")}
    return out, trained


def plan_report(s: Setup, ctx: RunContext, cat: Any, counter: Any, load: Callable[[], Any], *,
                instincts: Sequence[bool] = (False,)) -> dict[str, Estimate]:
    """The ``plan_only`` run shared by the E164 organism experiments: build each organism's SFT data exactly as
    training would (length-capped with the exact token count, leakage-checked), derive its content address and
    say whether a trained, validated organism is cached. Records no claim metric, so every claim is inconclusive
    with the pointer to ``--profile full``."""
    from agentmill.methods.constraint_rot.organism.cache import plan_organism
    from agentmill.methods.constraint_rot.organism.train import CARD_FILE, OrganismCard

    out: dict[str, Estimate] = {}
    root = None if s.shared_cache else Path(ctx.work_dir) / "organisms"
    for instinct in instincts:
        ctx.progress(f"E164 organism plan: SFT data{' (instinct)' if instinct else ''}", 0, None)
        adapter, data, info = plan_organism(recipe_of(s, instinct=instinct), cat, counter=counter, load=load,
                                            root=root)
        ctx.read_artefact(*adapter_weights(adapter), adapter / CARD_FILE)  # the plan reports cached and validated
        tag = "instinct_" if instinct else ""
        toks = [int(e.meta["n_tokens"]) for e in data]
        validated = info["cached"] and bool((OrganismCard.load(adapter).validation or {}).get("validated"))
        out[f"{tag}sft_examples"] = Estimate.exact(float(len(data)), n=len(data))
        out[f"{tag}sft_tokens_max"] = Estimate.exact(float(max(toks)), n=len(toks))
        out[f"{tag}sft_tokens_mean"] = Estimate.exact(float(np.mean(toks)), n=len(toks))
        out[f"{tag}sft_dropped_step_share"] = Estimate.exact(
            float(np.mean([e.meta["dropped_steps"] > 0 for e in data])), n=len(data))
        out[f"{tag}adapter_cached"] = Estimate.exact(float(info["cached"]), n=1)
        out[f"{tag}adapter_validated"] = Estimate.exact(float(validated), n=1)
        ctx.data[f"{tag}adapter"] = {k: info[k] for k in ("key", "data_manifest_hash", "n_train", "cached")}
    ctx.data["plan_only"] = ("quick plans only: SFT data and adapter address checked, nothing trained or decoded, "
                             "no claim judged; the SmolLM2 organism runs with --profile full "
                             "(`agentmill constraint-rot organism train --profile quick` trains the same adapter"
                             + (", with `--instinct` the instinct one)" if True in instincts else ")"))
    return out
