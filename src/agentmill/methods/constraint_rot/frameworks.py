"""Episodes through real framework code (docs/methods/constraint_rot.md "Use it" 5, claim CR-12): AutoGen's
``AssistantAgent``, and an agentmill actor as a LangChain chat model (:class:`ActorChatModel`).

:func:`run_autogen_episode` takes one generated episode and a ``ChatCompletionContext`` (AutoGen's own
``BufferedChatCompletionContext``, ``HeadAndTailChatCompletionContext``…, optionally wrapped in
:class:`~.pinning.integrations.autogen.PinnedChatCompletionContext`) and:

1. builds the episode's transcript up to the trigger with the agent loop (:func:`episode_transcript`: system
   prompt, policy turn at its location, replayed distractor executed for real in the sandbox), which leaves the
   sandbox in the state the trigger meets;
2. loads that transcript into the context with ``add_message`` (the system prompt becomes the agent's
   ``system_message``, which AutoGen keeps outside the context, as it does for every agent);
3. runs ``AssistantAgent(model_client=ActorChatCompletionClient(actor), workbench=SandboxWorkbench(sandbox),
   model_context=context, max_tool_iterations=8).run(task=<trigger>)``: the framework decides what the model sees;
   the agent's tool calls execute in the office sandbox through the workbench;
4. grades the executed calls with the project's grader, cross-checks the sandbox state, and classifies the rule's
   survival in the first model input after the trigger (cards ignored, as everywhere).

The result records every message list the model received, so "the rule never reached the model" is checked on
what AutoGen actually sent, not on what the harness believes it kept. autogen is imported lazily; a missing extra
raises ``MissingExtraError`` naming ``pip install 'agentmill[autogen]'``.

:class:`ActorChatModel` is the LangChain counterpart of :class:`ActorChatCompletionClient` (AutoGen): any agentmill
actor (``RuleReader``, ``OrganismActor``, a scripted summariser) becomes a ``BaseChatModel`` that ``create_agent`` and
``SummarizationMiddleware`` can drive, and it records every message list it was sent, converted to labelled
agentmill messages (summaries ``origin="summary"``, pinned cards ``origin="card"``), so card presence and rule
survival are checked on what LangChain actually sent. langchain is imported on first access of the name.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from agentmill.core.types import Message, ToolCall
from agentmill.lm.base import MissingExtraError
from agentmill.methods.constraint_rot.actors.base import Action, ActorBrief, visible
from agentmill.methods.constraint_rot.compactors.base import SUMMARY_PREFIX
from agentmill.methods.constraint_rot.conditions import full_context, never_stated
from agentmill.methods.constraint_rot.generate import Episode
from agentmill.methods.constraint_rot.grader import Outcome, cross_check, grade
from agentmill.methods.constraint_rot.loop import AgentLoop, episode_registry
from agentmill.methods.constraint_rot.messages import WhitespaceCounter, as_counter, count_tokens, origin
from agentmill.methods.constraint_rot.pinning.card import parse_cards
from agentmill.methods.constraint_rot.survival import SurvivalVerdict, classify_survival

AGENT_NAME = "office_agent"
MAX_TOOL_ITERATIONS = 8  # = the loop's max_steps_per_turn (docs/methods/constraint_rot.md "Hyperparameters")


# ------------------------------------------------------------------------------------------------ transcript
class _PrefixRecorder:
    """Answers every decision of the prefix (an early probe, the trigger) with a neutral reply and calls nothing,
    so the sandbox after the loop is exactly the post-distractor office."""

    name = "prefix_recorder"

    def act(self, messages: Sequence[Message], tools: Sequence[Any] = ()) -> Action:
        return Action.reply("Noted.")


def episode_transcript(episode: Episode, sandbox: Any, *, neutral: bool = False, counter: Any = None
                       ) -> list[Message]:
    """The loop's transcript of ``episode`` up to, not including, the trigger (labels kept). An early probe, if
    the episode has one, is answered "Noted." (generate with ``early_probe=0`` to avoid it). ``neutral``: the
    never-stated twin. Leaves ``sandbox`` in the state the trigger meets."""
    loop = AgentLoop(_PrefixRecorder(), sandbox, counter=counter)
    res = loop.run(episode, never_stated() if neutral else full_context())
    if res.row.get("error"):
        raise RuntimeError(f"episode {episode.episode_id}: building the transcript failed: {res.row['error']}")
    msgs = res.messages
    at = max(i for i, m in enumerate(msgs) if m.role == "user" and origin(m) == "trigger")
    return list(msgs[:at])


# ------------------------------------------------------------------------------------------------- workbench
@functools.lru_cache(maxsize=1)
def _workbench_class() -> type:
    try:
        from autogen_core.tools import TextResultContent, ToolResult, Workbench
    except ImportError as e:
        raise MissingExtraError("autogen", "the AutoGen episode driver") from e

    class SandboxWorkbench(Workbench):
        """The office sandbox's tools as an AutoGen ``Workbench``: ``list_tools`` gives their JSON schemas,
        ``call_tool`` executes in the sandbox. ``calls`` and ``results`` log what ran, in order."""

        def __init__(self, sandbox: Any):
            super().__init__()
            self.sandbox = sandbox
            self.calls: list[ToolCall] = []
            self.results: list[Any] = []

        async def list_tools(self) -> list[Any]:
            return [{"name": t.name, "description": t.description, "parameters": t.parameters}
                    for t in self.sandbox.tools()]

        async def call_tool(self, name: str, arguments: Any = None, cancellation_token: Any = None,
                            call_id: str | None = None) -> Any:
            call = ToolCall(call_id or f"wb-{len(self.calls) + 1}", name, dict(arguments or {}))
            res = self.sandbox.execute(call)
            self.calls.append(call)
            self.results.append(res)
            return ToolResult(name=name, result=[TextResultContent(content=res.content())], is_error=not res.ok)

        async def start(self) -> None:
            return None

        async def stop(self) -> None:
            return None

        async def reset(self) -> None:
            return None

        async def save_state(self) -> dict[str, Any]:
            return {}

        async def load_state(self, state: Any) -> None:
            return None

    SandboxWorkbench.__module__ = __name__
    return SandboxWorkbench


# ------------------------------------------------------------------------------------------ AutoGen model client
@functools.lru_cache(maxsize=1)
def _actor_client_class() -> type:
    """``ActorChatCompletionClient``: any agentmill actor (a scripted ``RuleReader``, the organism, an endpoint
    actor) as an ``autogen_core.models.ChatCompletionClient`` (needs autogen-core; built once, on first use)."""
    try:
        from autogen_core import FunctionCall
        from autogen_core.models import ChatCompletionClient, CreateResult, RequestUsage
    except ImportError as e:
        raise MissingExtraError("autogen", "ActorChatCompletionClient") from e
    from agentmill.methods.constraint_rot.pinning.integrations.autogen import MODEL_INFO, from_autogen, tool_specs

    class ActorChatCompletionClient(ChatCompletionClient):
        """An agentmill actor as an AutoGen model client. ``create`` converts the AutoGen messages it receives to
        agentmill messages (``from_autogen``), records them, asks the actor, and returns a ``CreateResult`` holding
        ``FunctionCall``\\ s or text; offline, deterministic, ``function_calling=True``. ``received`` holds every
        message list ``create`` was given, as agentmill messages (labels from :func:`from_autogen` kept, so cards
        and summaries are recognisable); ``actions`` the actor's answers; ``counter`` counts usage tokens."""

        def __init__(self, actor: Any, *, counter: Any = None,
                     summary_prefixes: Sequence[str] = (SUMMARY_PREFIX,)):
            if not callable(getattr(actor, "act", None)):
                raise ValueError(f"ActorChatCompletionClient.actor must have act(messages, tools), "
                                 f"got {type(actor).__name__}")
            self.actor = actor
            self.counter = as_counter(counter if counter is not None else WhitespaceCounter())
            self.summary_prefixes = tuple(summary_prefixes)
            self.received: list[list[Message]] = []
            self.actions: list[Action] = []
            self._total = RequestUsage(prompt_tokens=0, completion_tokens=0)
            self._last = RequestUsage(prompt_tokens=0, completion_tokens=0)

        async def create(self, messages: Sequence[Any], *, tools: Sequence[Any] = (), tool_choice: Any = "auto",
                         json_output: Any = None, extra_create_args: Any = None,
                         cancellation_token: Any = None) -> Any:
            seen = from_autogen(messages, summary_prefixes=self.summary_prefixes)
            self.received.append(seen)
            action = self.actor.act(visible(seen), tool_specs(tools))
            self.actions.append(action)
            prompt = count_tokens(seen, self.counter)
            if action.tool_calls:
                content: Any = [FunctionCall(id=c.id, arguments=json.dumps(c.arguments), name=c.name)
                                for c in action.tool_calls]
                finish, completion = "function_calls", sum(self.counter.count(c.arguments) for c in content)
            else:
                content = action.text if action.text is not None else (action.raw or "")
                finish = "unknown" if action.invalid else "stop"
                completion = self.counter.count(content)
            self._last = RequestUsage(prompt_tokens=prompt, completion_tokens=completion)
            self._total = RequestUsage(prompt_tokens=self._total.prompt_tokens + prompt,
                                       completion_tokens=self._total.completion_tokens + completion)
            return CreateResult(finish_reason=finish, content=content, usage=self._last, cached=False)

        async def create_stream(self, messages: Sequence[Any], *, tools: Sequence[Any] = (),
                                tool_choice: Any = "auto", json_output: Any = None, extra_create_args: Any = None,
                                cancellation_token: Any = None) -> Any:
            yield await self.create(messages, tools=tools)

        async def close(self) -> None:
            return None

        def actual_usage(self) -> Any:
            return self._last

        def total_usage(self) -> Any:
            return self._total

        def count_tokens(self, messages: Sequence[Any], *, tools: Sequence[Any] = ()) -> int:
            return count_tokens(from_autogen(messages), self.counter)

        def remaining_tokens(self, messages: Sequence[Any], *, tools: Sequence[Any] = ()) -> int:
            return 10**9  # an actor has no window of its own; the model context decides what it sees

        @property
        def capabilities(self) -> Any:
            return {k: MODEL_INFO[k] for k in ("vision", "function_calling", "json_output")}

        @property
        def model_info(self) -> Any:
            return dict(MODEL_INFO)

    ActorChatCompletionClient.__module__ = __name__
    return ActorChatCompletionClient


# ---------------------------------------------------------------------------------------- LangChain chat model
@functools.lru_cache(maxsize=1)
def _actor_chat_class() -> type:
    try:
        from langchain_core.language_models.chat_models import BaseChatModel
        from langchain_core.outputs import ChatGeneration, ChatResult
        from pydantic import ConfigDict, Field
    except ImportError as e:
        raise MissingExtraError("langchain", "ActorChatModel") from e
    from agentmill.methods.constraint_rot.pinning.integrations.langchain import to_agentmill

    class ActorChatModel(BaseChatModel):
        """An agentmill actor as a LangChain chat model. ``bind_tools`` returns the model itself (LangChain's stock
        fake chat models raise there) and the actor is shown ``tool_specs`` (the sandbox's tools), not the bound
        ones. ``received``: every input, as labelled agentmill messages; ``actions``: the actor's answers, in order.
        A tool-calling action becomes an ``AIMessage`` with ``tool_calls``; any other its text (or raw output, so
        an invalid action reaches the framework as the text the model produced)."""

        model_config = ConfigDict(arbitrary_types_allowed=True)
        actor: Any
        tool_specs: list = Field(default_factory=list)
        received: list = Field(default_factory=list)
        actions: list = Field(default_factory=list)

        @property
        def _llm_type(self) -> str:
            return "agentmill-actor"

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

        def _generate(self, messages: list, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> Any:
            if not messages:
                raise ValueError("ActorChatModel: empty message list")
            seen = to_agentmill(messages)
            self.received.append(seen)
            action = self.actor.act(visible(seen), self.tool_specs)
            self.actions.append(action)
            return ChatResult(generations=[ChatGeneration(message=action_message(action))])

    ActorChatModel.__module__ = __name__
    return ActorChatModel


def action_message(action: Any) -> Any:
    """An actor's action as the LangChain ``AIMessage`` a chat model returns: a tool-calling action with
    ``tool_calls``, any other its text (or raw output, so an invalid action reaches the framework as the text the
    model produced)."""
    from langchain_core.messages import AIMessage

    if action.tool_calls:
        return AIMessage(content="", tool_calls=[{"id": c.id, "name": c.name, "args": dict(c.arguments)}
                                                 for c in action.tool_calls])
    return AIMessage(content=action.text if action.text is not None else (action.raw or ""))


def __getattr__(name: str) -> Any:  # PEP 562
    if name == "SandboxWorkbench":
        return _workbench_class()
    if name == "ActorChatCompletionClient":
        return _actor_client_class()
    if name == "ActorChatModel":
        return _actor_chat_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ---------------------------------------------------------------------------------------------------- driver
@dataclass
class FrameworkRun:
    """One episode through a framework. ``model_inputs``: every message list the model received (agentmill
    messages, cards labelled ``origin="card"``), the first one being the trigger decision's input."""

    episode_id: str
    framework: str
    context: str
    outcome: Outcome
    calls: list[ToolCall]
    reply: str | None
    grader_mismatch: bool
    survival: SurvivalVerdict
    model_inputs: list[list[Message]] = field(repr=False)
    card_present: list[bool] = field(default_factory=list)

    @property
    def violation(self) -> bool:
        return self.outcome.violation

    @property
    def survived(self) -> bool:
        return self.survival.survived


def _context_name(ctx: Any) -> str:
    inner = getattr(ctx, "inner", None)
    return f"{type(ctx).__name__}({_context_name(inner)})" if inner is not None else type(ctx).__name__


async def arun_autogen_episode(episode: Episode, actor: Any, sandbox: Any, *, model_context: Any,
                               counter: Any = None, neutral: bool = False,
                               max_tool_iterations: int = MAX_TOOL_ITERATIONS) -> FrameworkRun:
    """Run ``episode``'s trigger through ``AssistantAgent`` with ``model_context`` (cleared first) and ``actor``
    as the model (see the module docstring). ``counter``: token counter of the transcript and survival distances
    (default SmolLM2; tests pass a ``WhitespaceCounter``)."""
    try:
        from autogen_agentchat.agents import AssistantAgent
        from autogen_agentchat.messages import TextMessage
        from autogen_core.model_context import ChatCompletionContext
    except ImportError as e:
        raise MissingExtraError("autogen", "run_autogen_episode") from e
    from agentmill.methods.constraint_rot.pinning.integrations.autogen import to_autogen

    if not isinstance(model_context, ChatCompletionContext):
        raise ValueError(f"model_context must be an autogen_core ChatCompletionContext, "
                         f"got {type(model_context).__name__}")
    if max_tool_iterations < 1:
        raise ValueError(f"max_tool_iterations must be >= 1, got {max_tool_iterations}")
    counter = as_counter(counter)
    inst = episode.instance
    prefix = episode_transcript(episode, sandbox, neutral=neutral, counter=counter)
    system = prefix[0].content if prefix and prefix[0].role == "system" else None
    body = prefix[1:] if system is not None else prefix

    pin = getattr(model_context, "pin", None)
    digests = frozenset(c.digest for c in pin.cards.values()) if pin is not None else frozenset()
    if hasattr(actor, "begin"):
        actor.begin(ActorBrief(inst, episode.request, digests))
    client = _actor_client_class()(actor, counter=counter)
    workbench = _workbench_class()(sandbox)

    await model_context.clear()
    for m in to_autogen(body, source=AGENT_NAME):
        await model_context.add_message(m)
    agent = AssistantAgent(AGENT_NAME, model_client=client, workbench=workbench, model_context=model_context,
                           system_message=system, max_tool_iterations=max_tool_iterations,
                           reflect_on_tool_use=False)
    before = sandbox.state()
    result = await agent.run(task=episode.request_text)

    final = result.messages[-1] if result.messages else None
    reply = final.content if isinstance(final, TextMessage) and client.actions \
        and client.actions[-1].text is not None else None
    invalid = any(a.invalid for a in client.actions)
    calls = list(workbench.calls)
    outcome = grade(inst, calls, reply_text=reply, request=episode.request, invalid=invalid)
    failed = [c.id for c, r in zip(workbench.calls, workbench.results) if not r.ok]
    agree = cross_check(inst, outcome, sandbox.state(), before=before, failed_call_ids=failed)
    first = client.received[0] if client.received else []
    survival = classify_survival(inst.text, {"values": inst.matcher_values}, inst.matcher_cues, first,
                                 carryover_target=inst.target_argument or None, counter=counter)
    present = [any(c.rule_id == inst.rule_id and c.digest in digests
                   for m in seen if origin(m) == "card" for c in parse_cards(m.content))
               for seen in client.received]
    return FrameworkRun(episode.episode_id, "autogen", _context_name(model_context), outcome, calls, reply,
                        not agree, survival, client.received, present)


def run_autogen_episode(episode: Episode, actor: Any, sandbox: Any, *, model_context: Any, counter: Any = None,
                        neutral: bool = False, max_tool_iterations: int = MAX_TOOL_ITERATIONS) -> FrameworkRun:
    """Synchronous :func:`arun_autogen_episode` (not from inside a running event loop)."""
    return asyncio.run(arun_autogen_episode(episode, actor, sandbox, model_context=model_context, counter=counter,
                                            neutral=neutral, max_tool_iterations=max_tool_iterations))


__all__ = ["ActorChatCompletionClient", "ActorChatModel", "FrameworkRun", "SandboxWorkbench", "action_message",
           "arun_autogen_episode", "episode_registry", "episode_transcript", "run_autogen_episode"]
