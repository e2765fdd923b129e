"""G2PO-style (reconstructed) graph advantages, with GRPO and GiGPO beside them (E165; arXiv 2606.22995).

Framework-free estimators over ``agentmill.core.types.StepTable``; all return ``AdvantageResult``. State keys are
in ``agentmill.methods.g2po.keys``, the baselines' configs in ``agentmill.methods.g2po.config``. See README.md.
"""

from agentmill.methods.g2po.config import G2POConfig
from agentmill.methods.g2po.core import g2po_advantages, gigpo_advantages, grpo_advantages, token_advantages
from agentmill.methods.g2po.graph import build_state_graph

__all__ = ["G2POConfig", "build_state_graph", "g2po_advantages", "gigpo_advantages", "grpo_advantages",
           "token_advantages"]
