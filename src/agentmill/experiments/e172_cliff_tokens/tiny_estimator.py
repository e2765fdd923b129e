"""E172 CT-2 tiny: the tower identity of the fork estimator on the gated tiny chained-addition
model. The measurement lives in ``tiny_halves`` (shared scans); this module registers it."""

from agentmill.experiments.e172_cliff_tokens import tiny_halves

EXPERIMENT = tiny_halves.ESTIMATOR
