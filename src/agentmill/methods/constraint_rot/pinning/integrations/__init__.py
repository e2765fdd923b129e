"""Constraint Pinning in real agent harnesses (spec §6.4).

- :mod:`.langchain` — ``ConstraintPinningMiddleware``, ``PolicyGateMiddleware`` (LangChain 1.x ``AgentMiddleware``)
  and ``pinned_pre_model_hook`` (LangGraph prebuilt agents); extra ``agentmill[langchain]``.
- :mod:`.openai_agents` — ``PinnedSession`` and ``CompactingSession`` for the OpenAI Agents SDK ``Session``
  protocol; extra ``agentmill[openai-agents]``.
- :mod:`.claude_code` — ``session_start_hook_output``: the ``SessionStart`` (matcher ``compact``) hook JSON.

Importing this package never imports a framework: each integration imports its framework when first used.
"""

from agentmill.methods.constraint_rot.pinning.integrations.claude_code import (hook_settings,
                                                                              session_start_hook_output)
from agentmill.methods.constraint_rot.pinning.integrations.openai_agents import (CompactingSession,
                                                                                PinnedSession)

__all__ = ["CompactingSession", "PinnedSession", "hook_settings", "session_start_hook_output"]
