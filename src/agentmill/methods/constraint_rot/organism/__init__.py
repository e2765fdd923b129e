"""The model organism (docs/methods/constraint_rot.md "Deviations from the paper" 5): SmolLM2-135M fine-tuned to obey
rules visible in its context and to comply when none is. SFT data (``data``), LoRA training (``train``) and the
validation gates (``validate``)."""

from __future__ import annotations

from agentmill.methods.constraint_rot.organism.data import (DEFAULT_MIXTURE, EXAMPLE_KINDS, TRAINED_LOCATIONS,
                                                             LeakageError, Mixture, SFTExample, build_sft_dataset,
                                                             check_sft_leakage, manifest_hash, write_jsonl)

__all__ = ["DEFAULT_MIXTURE", "EXAMPLE_KINDS", "TRAINED_LOCATIONS", "LeakageError", "Mixture", "SFTExample",
           "build_sft_dataset", "check_sft_leakage", "manifest_hash", "write_jsonl"]
from agentmill.methods.constraint_rot.organism.train import LoraCfg, OrganismCard, train_organism  # noqa: E402
from agentmill.methods.constraint_rot.organism.validate import ValidationReport, validate_organism  # noqa: E402

__all__ += ["LoraCfg", "OrganismCard", "ValidationReport", "train_organism", "validate_organism"]
