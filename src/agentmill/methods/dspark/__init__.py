"""DSpark speculative decoding (E179; dspark spec). Built so far: exact lossless verification (``rejection``), the
continuous-batching ``SpecEngine`` (the one decode loop; plain decoding is verify length 0) and prompt-lookup
drafts (``NgramProposer``). Not built yet: the DSpark drafter, its training and calibration, the confidence
scheduler, the SPS cost table, the experiments and the serving benchmark."""

from agentmill.methods.dspark.spec_engine import RequestOutput, SpecEngine, SpecStats
from agentmill.methods.dspark.proposers import NgramProposer
from agentmill.methods.dspark.rejection import Proposal, verify

__all__ = ["NgramProposer", "Proposal", "RequestOutput", "SpecEngine", "SpecStats", "verify"]
