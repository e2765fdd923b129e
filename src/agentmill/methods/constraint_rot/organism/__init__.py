"""The model organism (spec §2.10): SmolLM2-135M fine-tuned to obey rules visible in its context and to comply
when none is. This package holds its SFT data builder; training and validation live beside it."""

from __future__ import annotations

from agentmill.methods.constraint_rot.organism.data import (DEFAULT_MIXTURE, EXAMPLE_KINDS, TRAINED_LOCATIONS,
                                                             LeakageError, Mixture, SFTExample, build_sft_dataset,
                                                             check_sft_leakage, manifest_hash, write_jsonl)

__all__ = ["DEFAULT_MIXTURE", "EXAMPLE_KINDS", "TRAINED_LOCATIONS", "LeakageError", "Mixture", "SFTExample",
           "build_sft_dataset", "check_sft_leakage", "manifest_hash", "write_jsonl"]
