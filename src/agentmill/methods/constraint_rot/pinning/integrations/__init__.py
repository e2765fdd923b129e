"""Constraint Pinning in real agent harnesses (docs/methods/constraint_rot.md "Use it" 5).

- :mod:`.langchain` — ``ConstraintPinningMiddleware``, ``PolicyGateMiddleware`` (LangChain 1.x ``AgentMiddleware``)
  and ``pinned_pre_model_hook`` (LangGraph prebuilt agents); extra ``agentmill[langchain]``.
- :mod:`.openai_agents` — ``PinnedSession`` and ``CompactingSession`` for the OpenAI Agents SDK ``Session``
  protocol; extra ``agentmill[openai-agents]``.
- :mod:`.autogen` — ``PinnedChatCompletionContext`` (AutoGen 0.7 ``ChatCompletionContext`` wrapper); extra
  ``agentmill[autogen]``. An agentmill actor as an AutoGen model client (``ActorChatCompletionClient``) is framework
  code and lives in :mod:`agentmill.methods.constraint_rot.frameworks`: pinning never imports the actors.
- :mod:`.claude_code` — ``session_start_hook_output``: the ``SessionStart`` (matcher ``compact``) hook JSON.

Importing this package never imports a framework: each integration imports its framework when first used.
"""

from agentmill.methods.constraint_rot.pinning.integrations.autogen import from_autogen, to_autogen
from agentmill.methods.constraint_rot.pinning.integrations.claude_code import (hook_settings,
                                                                              session_start_hook_output)
from agentmill.methods.constraint_rot.pinning.integrations.openai_agents import (CompactingSession,
                                                                                PinnedSession)

__all__ = ["CompactingSession", "PinnedChatCompletionContext", "PinnedSession", "from_autogen", "hook_settings",
           "session_start_hook_output", "to_autogen"]


def __getattr__(name: str):  # noqa: ANN202 - PEP 562: the AutoGen class is built when first asked for
    if name == "PinnedChatCompletionContext":
        from agentmill.methods.constraint_rot.pinning.integrations import autogen

        return getattr(autogen, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
