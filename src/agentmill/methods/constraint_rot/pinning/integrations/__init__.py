"""Constraint Pinning in real agent harnesses (spec §6.4).

- :mod:`.langchain` — ``ConstraintPinningMiddleware``, ``PolicyGateMiddleware`` (LangChain 1.x ``AgentMiddleware``)
  and ``pinned_pre_model_hook`` (LangGraph prebuilt agents); extra ``agentmill[langchain]``.
- :mod:`.openai_agents` — ``PinnedSession`` and ``CompactingSession`` for the OpenAI Agents SDK ``Session``
  protocol; extra ``agentmill[openai-agents]``.
- :mod:`.autogen` — ``PinnedChatCompletionContext`` (AutoGen 0.7 ``ChatCompletionContext`` wrapper) and
  ``ActorChatCompletionClient`` (an agentmill actor as an AutoGen model client); extra ``agentmill[autogen]``.
- :mod:`.claude_code` — ``session_start_hook_output``: the ``SessionStart`` (matcher ``compact``) hook JSON.

Importing this package never imports a framework: each integration imports its framework when first used.
"""

from agentmill.methods.constraint_rot.pinning.integrations.autogen import from_autogen, to_autogen
from agentmill.methods.constraint_rot.pinning.integrations.claude_code import (hook_settings,
                                                                              session_start_hook_output)
from agentmill.methods.constraint_rot.pinning.integrations.openai_agents import (CompactingSession,
                                                                                PinnedSession)

__all__ = ["ActorChatCompletionClient", "CompactingSession", "PinnedChatCompletionContext", "PinnedSession",
           "from_autogen", "hook_settings", "session_start_hook_output", "to_autogen"]


def __getattr__(name: str):  # noqa: ANN202 - PEP 562: AutoGen classes are built when first asked for
    if name in ("ActorChatCompletionClient", "PinnedChatCompletionContext"):
        from agentmill.methods.constraint_rot.pinning.integrations import autogen

        return getattr(autogen, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
