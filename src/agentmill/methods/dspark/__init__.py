"""DSpark speculative decoding (E179): exact lossless verification (``rejection``), the continuous-batching
``SpecEngine`` (``spec_engine``; plain decoding is verify length 0), prompt-lookup drafts (``NgramProposer``), the
DSpark drafter with its training and calibration (``drafter``, ``train``, ``calibration``), the confidence scheduler
and SPS cost table (``policies``, ``costmodel``). The experiments are ``agentmill.experiments.e179_dspark``; the
server is ``agentmill.serve``. A tour with a runnable example: docs/methods/dspark.md."""

from agentmill.methods.dspark.spec_engine import RequestOutput, SpecEngine, SpecStats
from agentmill.methods.dspark.proposers import NgramProposer
from agentmill.methods.dspark.rejection import Proposal, verify

__all__ = ["NgramProposer", "Proposal", "RequestOutput", "SpecEngine", "SpecStats", "verify"]
