"""Which drafter an E179 experiment evaluates: the shipped one, a random-weight control, or a checkpoint path.

Calibration, single-user speed, sampling equality and the load sweep all name their drafter the same way, so a
``--set drafter=...`` means the same thing in each."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def load_drafter(which: str, engine: Any, model: str) -> Any:
    """The drafter an experiment evaluates: the shipped one, a random-weight one, or a checkpoint path."""
    from agentmill.methods.dspark.drafter import DraftVocab, DSparkConfig, DSparkDrafter
    from agentmill.methods.dspark.pipeline import shipped_drafter

    if which == "random":
        layers = tuple(engine.engine_config.tap_layers)
        cfg = DSparkConfig(block_size=4 if model == "tiny" else 7, num_draft_layers=1 if model == "tiny" else 2,
                           target_layer_ids=layers, markov_rank=8 if model == "tiny" else 64,
                           draft_vocab_size=None, mask_token_id=0)
        return DSparkDrafter.init_for(engine, cfg, DraftVocab.full(engine.vocab_size), seed=0)
    path = shipped_drafter(engine) if which == "shipped" else Path(which)
    return DSparkDrafter.load(path, engine)
