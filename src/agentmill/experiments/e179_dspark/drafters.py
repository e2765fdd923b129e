"""Which drafter an E179 experiment evaluates: the shipped one, a random-weight control, or a checkpoint path.

Calibration, single-user speed, sampling equality and the load sweep all name their drafter the same way, so a
``--set drafter=...`` means the same thing in each; they also declare the same artefacts (:func:`setup_reads`), so
retraining the drafter or replacing the target's GGUF reruns them rather than resuming a record of the old ones."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentmill.experiments.protocol import RunContext


def target_files(model: str) -> list[Path]:
    """The target's weights: the embedded SmolLM2 GGUF; nothing for the tiny Llama built in code (``tiny``)."""
    from agentmill.lm import model_files

    return [] if model == "tiny" else model_files("hf:smollm2")


def drafter_reads(which: str, model: str) -> list[Path]:
    """The artefacts a run with drafter ``which`` on target ``model`` depends on: the target, and the named checkpoint
    or, for ``shipped``, the committed ``assets/`` drafter. That one is listed even when absent, so committing it
    later counts as a change; a drafter found under ``artifacts/`` instead is declared by :func:`load_drafter`."""
    from agentmill.methods.dspark.pipeline import asset_dir

    paths = target_files(model)
    if which == "shipped":
        paths.append(asset_dir() / "drafter")
    elif which != "random":
        paths.append(Path(which))
    return paths


def setup_reads(s: Any, model: str | None) -> list[Path]:
    """``Experiment.reads`` of the experiments whose setup names a ``drafter`` and a target ``model``."""
    return drafter_reads(s.drafter, s.model)


def load_drafter(which: str, engine: Any, model: str, ctx: RunContext | None = None) -> Any:
    """The drafter an experiment evaluates: the shipped one, a random-weight one, or a checkpoint path. With ``ctx``
    the checkpoint read is declared (``RunContext.read_artefact``): where ``shipped`` resolves depends on what is
    committed and trained, which only the loaded engine's fingerprint tells."""
    from agentmill.methods.dspark.drafter import DraftVocab, DSparkConfig, DSparkDrafter
    from agentmill.methods.dspark.pipeline import shipped_drafter

    if which == "random":
        layers = tuple(engine.engine_config.tap_layers)
        cfg = DSparkConfig(block_size=4 if model == "tiny" else 7, num_draft_layers=1 if model == "tiny" else 2,
                           target_layer_ids=layers, markov_rank=8 if model == "tiny" else 64,
                           draft_vocab_size=None, mask_token_id=0)
        return DSparkDrafter.init_for(engine, cfg, DraftVocab.full(engine.vocab_size), seed=0)
    path = shipped_drafter(engine) if which == "shipped" else Path(which)
    if ctx is not None:
        ctx.read_artefact(path)
    return DSparkDrafter.load(path, engine)
