"""E172 CT-3 + CT-4 tiny: cliffs locate and type the planted errors on the gated tiny chained-addition
model. The measurement lives in ``tiny_halves`` (shared scans); this module registers it."""

from agentmill.experiments.e172_cliff_tokens import tiny_halves

EXPERIMENT = tiny_halves.LOCALIZATION
