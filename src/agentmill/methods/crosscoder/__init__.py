"""Crosscoder model diffing (E175): a sparse dictionary trained jointly on two models' residual streams, its
diagnostics, feature ranking, and steering/patching through it (docs/methods/crosscoder.md)."""

from agentmill.methods.crosscoder.config import CrossCoderConfig, Partition
from agentmill.methods.crosscoder.diagnostics import Diagnostics, diagnose, latent_scaling, relative_norms
from agentmill.methods.crosscoder.model import CrossCoder
from agentmill.methods.crosscoder.train import TrainLog, train_crosscoder

__all__ = ["CrossCoder", "CrossCoderConfig", "Diagnostics", "Partition", "TrainLog", "diagnose", "latent_scaling",
           "relative_norms", "train_crosscoder"]
