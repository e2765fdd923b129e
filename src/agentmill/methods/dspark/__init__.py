"""DSpark speculative decoding (E179; dspark spec). Built so far: exact lossless verification (``rejection``).
The drafter, its training, calibration, the scheduler and the speculative engine are not built yet."""

from agentmill.methods.dspark.rejection import Proposal, verify

__all__ = ["Proposal", "verify"]
