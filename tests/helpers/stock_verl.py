"""Which stock verl 0.9.1 the verl adapter tests run against (G2PO's and the tree estimator's)."""

from __future__ import annotations

import importlib.util

STOCK_VERL = ["copy"] + (["real"] if importlib.util.find_spec("verl") else [])
"""The tests' copy of verl 0.9.1's call always; the real verl joins when importable: no agentmill extra installs it
(it pins transformers < 5.11), so the suite runs the copy and a developer with verl in the environment runs both
(not a skip: nothing is missing)."""
