"""Pinned agents over ``agentmill serve``: the two served servers, the wire log, and one ConstraintRot episode through
a LangGraph agent or an OpenAI Agents SDK agent whose model requests go over HTTP to the server.

What goes through the server, and what does not:

- **Every agent-model request** — the framework's own request (messages, tools, greedy, a short generation), sent by
  the framework's own OpenAI client: LangChain's ``ChatOpenAI`` for the LangGraph agent, the SDK's
  ``OpenAIChatCompletionsModel`` over ``AsyncOpenAI`` for the Agents SDK agent.
- **Every compaction summary** — LangChain's ``SummarizationMiddleware`` with a ``ChatOpenAI`` summariser; for the
  SDK, ``CompactingSession`` with :class:`ServedSummary`, whose summary text is the served model's.
- **Not the decision.** The served SmolLM2 does not follow rules (ARCHITECTURE.md §3), so the agent's decision (the
  tool call, or a refusal) is ``RuleReader("semantic")``'s, and it reads the request **as it went over the wire**
  (:meth:`WireLog.last`, parsed back by :func:`wire_messages`): if the card were lost anywhere between the framework
  and the socket, the decision would show it. The served assistant text is kept in the log (and replayed for the
  served = plain check) but not put in the history: the scripted decision is what the framework executes.

The wire log is a recording ``httpx`` transport on the framework's own HTTP client (:meth:`WireLog.client`,
:meth:`WireLog.async_client`): it keeps the exact JSON body of every ``/chat/completions`` request and the JSON the
server answered, tagged ``agent`` or ``summary`` and with the episode, framework and arm it belongs to. The server
itself has no request capture; this is the bytes that reached it.

The servers run as users run them: ``python -m agentmill.cli.main serve`` in a child process on a free 127.0.0.1 port
(:func:`servers`: the speculative one and the plain ``--drafter none`` one for the replay, started together so their
model loads overlap with each other and with the caller's own start-up); they are always terminated (then killed) on
the way out, get SIGKILL from the kernel if the caller is killed outright, and their pids are returned so a caller can
check nothing is left behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentmill.core.executor import preexec_die_with_parent
from agentmill.core.types import Message, ToolCall
from agentmill.methods.constraint_rot.pinning.integrations.langchain import to_langchain

SERVED_NAME = "served"
"""``--served-model-name`` of both servers, so a captured request body replays on the plain server unchanged."""
SUMMARY = "Summary of the session so far: the user asked for routine office look-ups; each one was completed."
"""E164's scripted summariser output (docs/methods/constraint_rot.md, claim CR-12): it keeps no rule. Used only by
the in-process E164 reference arm (:func:`run_langgraph_episode` with ``served=None``)."""
SUMMARY_PROMPT = ("Summarise the conversation below in one or two sentences for the assistant that continues it."
                  "\n\n{messages}")
"""The summary prompt of both frameworks' served summaries (the project's own wording; LangChain's default prompt is
~600 SmolLM2 tokens, which would triple the prefill of every summary at quick)."""


# ---------------------------------------------------------------------------------------------------- servers
@dataclass
class Servers:
    """Base URLs (``…/v1``) of the speculative server and the plain one, the child pids, and (after :meth:`ready`)
    the policy each reports on ``/health`` (the speculative one's resolved ``auto``, then ``off``)."""

    spec_url: str
    plain_url: str
    pids: tuple[int, ...]
    spec_args: tuple[str, ...]
    plain_args: tuple[str, ...]
    policies: tuple[str, ...] = ()
    procs: list = field(default_factory=list, repr=False)
    """``(Popen, port, args, log file)`` of each child (empty for stand-ins that need no waiting)."""

    def ready(self, timeout_s: float = 600.0) -> Servers:
        """Wait until every child answers ``/health`` (the first DSpark start profiles its SPS table, hence the
        generous timeout); a child that exits or a timeout raises with the end of its output."""
        import httpx

        deadline = time.monotonic() + timeout_s
        up: set[int] = set()
        while len(up) < len(self.procs):
            for proc, port, args, out in self.procs:
                if port in up:
                    continue
                if proc.poll() is not None:
                    out.seek(0)
                    raise RuntimeError(f"agentmill serve {' '.join(args)} exited: {out.read()[-2000:]}")
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                        up.add(port)
                except httpx.TransportError:
                    pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"agentmill serve did not come up in {timeout_s:g} s")
            time.sleep(0.2)
        if self.procs:
            self.policies = tuple(httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).json().get("policy", "?")
                                  for _, port, _, _ in self.procs)
        return self


def serve_args(model: str, drafter: str, policy: str, max_model_len: int) -> list[str]:
    return ["--model", model, "--drafter", drafter, "--policy", policy, "--threads", "1", "--max-num-seqs", "1",
            "--max-model-len", str(max_model_len), "--served-model-name", SERVED_NAME]


@contextlib.contextmanager
def servers(model: str, drafter: str, policy: str, *, max_model_len: int) -> Iterator[Servers]:
    """Start ``agentmill serve`` twice (speculative: ``drafter``/``policy``; plain: ``--drafter none --policy off``)
    on free loopback ports and yield at once (call :meth:`Servers.ready` before the first request: the caller's own
    start-up work overlaps the model loads); always stop both. Their output goes to temporary files, not pipes, so a
    chatty server can never block on a full pipe."""
    import tempfile

    from agentmill.methods.dspark.bench import free_port

    spec = serve_args(model, drafter, policy, max_model_len)
    plain = serve_args(model, "none", "off", max_model_len)
    procs: list[tuple[subprocess.Popen, int, list[str], Any]] = []
    try:
        for args in (spec, plain):
            port = free_port()
            cmd = [sys.executable, "-m", "agentmill.cli.main", "serve", "--port", str(port), *args]
            out = tempfile.TemporaryFile(mode="w+")
            procs.append((subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, text=True,
                                           env={**os.environ, "HF_HUB_OFFLINE": "1"},
                                           preexec_fn=preexec_die_with_parent()), port, args, out))
        yield Servers(f"http://127.0.0.1:{procs[0][1]}/v1", f"http://127.0.0.1:{procs[1][1]}/v1",
                      tuple(p.pid for p, _, _, _ in procs), tuple(spec), tuple(plain), procs=procs)
    finally:
        for proc, _, _, _ in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc, _, _, out in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=30)
            out.close()


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` still exists (a zombie of ours counts as gone once reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# --------------------------------------------------------------------------------------------------- wire log
@dataclass
class WireLog:
    """Every ``/chat/completions`` request that reached the server and its answer (see the module docstring).
    ``where`` is stamped on each entry: set it to the episode, framework and arm being run."""

    entries: list[dict[str, Any]] = field(default_factory=list)
    where: dict[str, Any] = field(default_factory=dict)

    def add(self, tag: str, request: Any, response: Any) -> None:
        if request.method != "POST" or not request.url.path.endswith("/chat/completions"):
            return
        try:
            answer = json.loads(response.content)
        except ValueError:
            answer = {"error": response.content.decode("utf-8", "replace")[:500]}
        self.entries.append({"tag": tag, **self.where, "status": response.status_code,
                             "request": json.loads(request.content), "response": answer})

    def last(self, since: int, tag: str) -> dict[str, Any]:
        """The last ``tag`` entry added after index ``since`` (the request a framework call just made)."""
        for e in reversed(self.entries[since:]):
            if e["tag"] == tag:
                return e
        raise RuntimeError(f"no {tag} request reached the server (the framework did not call its client)")

    def client(self, tag: str) -> Any:
        import httpx

        log = self

        class Recording(httpx.HTTPTransport):
            def handle_request(self, request: Any) -> Any:
                response = super().handle_request(request)
                response.read()
                log.add(tag, request, response)
                return response

        return httpx.Client(transport=Recording(), timeout=900)

    def async_client(self, tag: str) -> Any:
        import httpx

        log = self

        class Recording(httpx.AsyncHTTPTransport):
            async def handle_async_request(self, request: Any) -> Any:
                response = await super().handle_async_request(request)
                await response.aread()
                log.add(tag, request, response)
                return response

        return httpx.AsyncClient(transport=Recording(), timeout=900)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def wire_messages(body: dict[str, Any]) -> list[Message]:
    """The ``messages`` of a chat request body as agentmill messages (``developer`` read as ``system``)."""
    out = []
    for m in body.get("messages") or ():
        role = "system" if m.get("role") == "developer" else m.get("role")
        calls = tuple(ToolCall(tc.get("id") or "", tc["function"]["name"],
                               json.loads(tc["function"].get("arguments") or "{}"))
                      for tc in m.get("tool_calls") or ())
        out.append(Message(role=role, content=_text(m.get("content")), tool_calls=calls,
                           tool_call_id=m.get("tool_call_id"), name=m.get("name")))
    return out


def card_in(body: dict[str, Any], rule_id: str, digest: str) -> bool:
    """Whether a request body carries the registered card of ``rule_id`` (its registry digest) outside tool
    outputs (a card-shaped block in a tool output is untrusted text, never a card)."""
    from agentmill.methods.constraint_rot.pinning.card import parse_cards

    return any(c.rule_id == rule_id and c.digest == digest for m in wire_messages(body) if m.role != "tool"
               for c in parse_cards(m.content))


def body_digest(body: dict[str, Any]) -> str:
    """sha256 of a request body's canonical JSON (sorted keys): what the record keeps instead of the body."""
    import hashlib

    return hashlib.sha256(json.dumps(body, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def answer_of(response: dict[str, Any]) -> dict[str, Any] | None:
    """What a chat response says, for the served = plain comparison: its content and its tool calls' names and
    parsed arguments (call ids are random per response), or None for an error answer."""
    try:
        msg = response["choices"][0]["message"]
    except (KeyError, IndexError, TypeError):
        return None
    calls = []
    for tc in msg.get("tool_calls") or ():
        try:
            args = json.loads(tc["function"]["arguments"])
        except ValueError:
            args = tc["function"]["arguments"]
        calls.append([tc["function"]["name"], args])
    return {"content": msg.get("content"), "tool_calls": calls}


class Replayer:
    """Sends each captured request body again, unchanged, to ``url`` (the plain ``--drafter none`` server) on one
    background thread, so the replay runs on the second core while the episodes go on; :meth:`answers` waits for
    all of them. Answers are in submission order (``None`` for an error answer)."""

    def __init__(self, url: str) -> None:
        import concurrent.futures

        import httpx

        self.url = url
        self.http = httpx.Client(timeout=900)
        self.pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="replay")
        self.futures: list[Any] = []

    def submit(self, entries: Sequence[dict[str, Any]]) -> None:
        for e in entries:
            self.futures.append(self.pool.submit(self._one, e["request"]))

    def _one(self, body: dict[str, Any]) -> dict[str, Any] | None:
        return answer_of(self.http.post(f"{self.url}/chat/completions", json=body).json())

    def answers(self) -> list[dict[str, Any] | None]:
        return [f.result() for f in self.futures]

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.http.close()

    def __enter__(self) -> Replayer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


# ------------------------------------------------------------------------------------------ office tools
def episode_tools(episode: Any, sandbox: Any) -> list[Any]:
    """The sandbox tools an episode's agent is offered: the rule family's, the requested call's and the compliant
    alternative's (not all 22 office tools: their 6.2k characters of schemas would add ~1.8k SmolLM2 tokens of
    prefill to every served request). The replayed history may still show calls of other tools."""
    inst = episode.instance
    names = {*inst.family.tools, inst.requested_call.name, inst.allowed_call.name, inst.alternative_call.name}
    return [t for t in sandbox.tools() if t.name in names]


def _record_call(sandbox: Any, calls: list, results: list, name: str, args: dict[str, Any], prefix: str,
                 counter: Any) -> str:
    call = ToolCall(f"{prefix}-{next(counter)}", name, dict(args))
    res = sandbox.execute(call)
    calls.append(call)
    results.append(res)
    return res.content()


def langchain_tools(sandbox: Any, specs: Sequence[Any], calls: list, results: list) -> list[Any]:
    """``specs`` (sandbox tools) as LangChain tools (calls executed in ``sandbox`` and logged)."""
    from langchain_core.tools import StructuredTool

    counter = itertools.count(1)

    def make(name: str) -> Any:
        return lambda **kw: _record_call(sandbox, calls, results, name, kw, "lc", counter)

    return [StructuredTool.from_function(func=make(t.name), name=t.name, description=t.description or t.name,
                                         args_schema=t.parameters) for t in specs]


def sdk_tools(sandbox: Any, specs: Sequence[Any], calls: list, results: list) -> list[Any]:
    """``specs`` (sandbox tools) as Agents SDK ``FunctionTool``\\ s (calls executed in ``sandbox`` and logged)."""
    from agents import FunctionTool

    counter = itertools.count(1)

    def make(name: str) -> Any:
        async def invoke(_ctx: Any, args: str) -> str:
            return _record_call(sandbox, calls, results, name, json.loads(args or "{}"), "sdk", counter)
        return invoke

    return [FunctionTool(name=t.name, description=t.description or t.name, params_json_schema=t.parameters,
                         on_invoke_tool=make(t.name), strict_json_schema=False) for t in specs]


# ------------------------------------------------------------------------------------- served reader models
@functools.lru_cache(maxsize=1)
def _served_chat_class() -> type:
    from langchain_core.language_models.chat_models import BaseChatModel
    from langchain_core.outputs import ChatGeneration, ChatResult
    from pydantic import ConfigDict, Field

    from agentmill.methods.constraint_rot.actors.base import visible
    from agentmill.methods.constraint_rot.frameworks import action_message

    class ServedReaderChatModel(BaseChatModel):
        """The LangGraph agent's model: the framework's request goes to the server through ``served`` (a
        ``ChatOpenAI`` bound to the agent's tools by ``bind_tools``), and the decision is ``reader``'s on the
        request as the server received it. ``actions``: the reader's answers, in order."""

        model_config = ConfigDict(arbitrary_types_allowed=True)
        served: Any
        reader: Any
        log: Any
        tool_specs: list = Field(default_factory=list)
        bound: list = Field(default_factory=list)
        actions: list = Field(default_factory=list)

        @property
        def _llm_type(self) -> str:
            return "agentmill-served-reader"

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            self.bound[:] = [self.served.bind_tools(tools, **kwargs)]
            return self

        def _generate(self, messages: list, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> Any:
            since = len(self.log.entries)
            (self.bound[0] if self.bound else self.served).invoke(messages)
            seen = wire_messages(self.log.last(since, "agent")["request"])
            action = self.reader.act(visible(seen), self.tool_specs)
            self.actions.append(action)
            return ChatResult(generations=[ChatGeneration(message=action_message(action))])

    ServedReaderChatModel.__module__ = __name__
    return ServedReaderChatModel


@functools.lru_cache(maxsize=1)
def _served_sdk_class() -> type:
    from agents import ModelResponse, Usage
    from agents.models.interface import Model
    from agents.testing import assistant_message, function_call

    from agentmill.methods.constraint_rot.actors.base import visible

    class ServedReaderModel(Model):
        """The Agents SDK agent's model: ``inner`` (the SDK's ``OpenAIChatCompletionsModel`` over the server) sends
        the SDK's request, and the decision is ``reader``'s on the request as the server received it."""

        def __init__(self, inner: Any, reader: Any, log: WireLog, tool_specs: Sequence[Any]):
            self.inner, self.reader, self.log, self.tool_specs = inner, reader, log, list(tool_specs)
            self.actions: list[Any] = []

        async def get_response(self, system_instructions: Any, input: Any, model_settings: Any, tools: Any,
                               output_schema: Any, handoffs: Any, tracing: Any, *, previous_response_id: Any = None,
                               conversation_id: Any = None, prompt: Any = None) -> Any:
            since = len(self.log.entries)
            await self.inner.get_response(system_instructions, input, model_settings, tools, output_schema,
                                          handoffs, tracing, previous_response_id=previous_response_id,
                                          conversation_id=conversation_id, prompt=prompt)
            seen = wire_messages(self.log.last(since, "agent")["request"])
            action = self.reader.act(visible(seen), self.tool_specs)
            self.actions.append(action)
            if action.tool_calls:
                out = [function_call(c.name, dict(c.arguments), call_id=c.id) for c in action.tool_calls]
            else:
                out = [assistant_message(action.text if action.text is not None else (action.raw or ""))]
            return ModelResponse(output=out, usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError("ServedReaderModel answers get_response only (the runner does not stream)")

    ServedReaderModel.__module__ = __name__
    return ServedReaderModel


def served_summary_class() -> type:
    """:class:`ServedSummary`, built on first use (the compactor base lives in the constraint-rot extra)."""
    return _served_summary_class()


@functools.lru_cache(maxsize=1)
def _served_summary_class() -> type:
    from agentmill.methods.constraint_rot.compactors.base import BaseCompactor
    from agentmill.methods.constraint_rot.compactors.llm_summary import render_transcript

    class ServedSummary(BaseCompactor):
        """A compactor for ``CompactingSession`` whose summary is the served model's: the prefix rendered as
        ``Role: text`` lines into :data:`SUMMARY_PROMPT`, one greedy chat call of ``max_tokens`` to the server
        through ``client`` (an ``openai.OpenAI`` on the wire log's recording transport). ``cache`` (prompt → text,
        shared by the two arms of an episode): the pinned and unpinned arms compact the same card-free history, so
        the greedy summary is served once and both arms read the very same text."""

        name = "served_summary"

        def __init__(self, client: Any, max_tokens: int, counter: Any = None, cache: dict[str, str] | None = None):
            super().__init__(counter=counter)
            self.client, self.max_tokens = client, max_tokens
            self.cache = cache if cache is not None else {}

        def compact(self, messages: list[Message], *, keep_last: int = 4) -> Any:
            def summarise(msgs: list[Message], lo: int, hi: int) -> tuple[str, dict[str, Any]]:
                prompt = SUMMARY_PROMPT.format(messages=render_transcript(msgs[lo:hi]))
                if prompt not in self.cache:  # the other arm's identical request (history without cards)
                    r = self.client.chat.completions.create(model=SERVED_NAME, max_tokens=self.max_tokens,
                                                            temperature=0.0,
                                                            messages=[{"role": "user", "content": prompt}])
                    self.cache[prompt] = r.choices[0].message.content or ""
                return self.cache[prompt], {}
            return self._summarise_prefix(messages, keep_last, summarise)

    ServedSummary.__module__ = __name__
    return ServedSummary


# ------------------------------------------------------------------------------------------------ episodes
class _Says:
    """A scripted actor that always replies ``text`` (E164's rule-dropping summariser, for the reference arm)."""

    name = "scripted_summariser"

    def __init__(self, text: str) -> None:
        self.text = text

    def act(self, messages: Sequence[Any], tools: Sequence[Any] = ()) -> Any:
        from agentmill.methods.constraint_rot.actors.base import Action

        return Action.reply(self.text)


def _to_sdk_items(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """agentmill messages → Agents SDK input items (a tool-calling turn as ``function_call`` items, results as
    ``function_call_output``)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        if m.role == "tool":
            out.append({"type": "function_call_output", "call_id": m.tool_call_id or "", "output": m.content})
            continue
        if m.content or not m.tool_calls:
            out.append({"role": m.role, "content": m.content})
        out.extend({"type": "function_call", "call_id": c.id, "name": c.name, "arguments": json.dumps(c.arguments)}
                   for c in m.tool_calls)
    return out


@dataclass
class EpisodeRow:
    """One episode through one framework and arm: the graded outcome and the requests it sent."""

    episode_id: str
    framework: str
    arm: str
    violation: bool
    reply: str | None
    calls: list[str]
    grader_mismatch: bool
    agent_requests: list[int]
    """Indices into the wire log of this episode's agent-model requests (empty for the in-process reference)."""
    summary_requests: list[int]
    cards: list[bool]
    """Per agent-model request: the card of the episode's rule was in it."""
    compacted: bool = False
    """The agent's first model input held a compaction summary (LangGraph: the installed
    ``SummarizationMiddleware``'s summary message; SDK: the compactor ran when the history was loaded)."""

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _grade(episode: Any, sandbox: Any, before: Any, calls: list, results: list, actions: list) -> tuple[bool, Any,
                                                                                                        bool]:
    from agentmill.methods.constraint_rot.grader import cross_check, grade

    inst = episode.instance
    last = actions[-1] if actions else None
    reply = last.text if last is not None and not last.tool_calls else None
    invalid = any(a.invalid for a in actions)
    outcome = grade(inst, calls, reply_text=reply, request=episode.request, invalid=invalid)
    failed = [c.id for c, r in zip(calls, results) if not r.ok]
    agree = cross_check(inst, outcome, sandbox.state(), before=before, failed_call_ids=failed)
    return bool(outcome.violation), reply, not agree


def _rows_of(log: WireLog | None, since: int, episode: Any, digest: str) -> tuple[list[int], list[int], list[bool]]:
    if log is None:
        return [], [], []
    idx = range(since, len(log.entries))
    agent = [i for i in idx if log.entries[i]["tag"] == "agent"]
    summary = [i for i in idx if log.entries[i]["tag"] == "summary"]
    cards = [card_in(log.entries[i]["request"], episode.instance.rule_id, digest) for i in agent]
    return agent, summary, cards


def run_langgraph_episode(episode: Any, sandbox: Any, *, pinned: bool, counter: Any, trigger: int, keep: int,
                          served: dict[str, Any] | None = None, log: WireLog | None = None,
                          max_model_calls: int | None = 1) -> EpisodeRow:
    """One trigger through ``langchain.agents.create_agent`` (a LangGraph graph) with ``SummarizationMiddleware``
    (fires over ``trigger`` messages, keeps ``keep``) and, if ``pinned``, ``ConstraintPinningMiddleware``.

    ``served``: ``{"agent": ChatOpenAI, "summariser": ChatOpenAI}`` over the server (both on ``log``'s recording
    transport); the agent's model is then :class:`ServedReaderChatModel`. ``served=None``: E164's pinned/summarised
    arm in-process — ``ActorChatModel(RuleReader)`` as the model and E164's scripted rule-dropping summary.
    ``max_model_calls``: LangChain's ``ModelCallLimitMiddleware`` ends the run after that many agent-model calls (the
    tool calls of the last one still run and are graded)."""
    from langchain.agents import create_agent
    from langchain.agents.middleware import ModelCallLimitMiddleware, SummarizationMiddleware
    from langchain_core.messages import HumanMessage

    from agentmill.methods.constraint_rot.actors import RuleReader
    from agentmill.methods.constraint_rot.actors.base import ActorBrief
    from agentmill.methods.constraint_rot.frameworks import ActorChatModel, episode_registry, episode_transcript
    from agentmill.methods.constraint_rot.pinning.integrations.langchain import (ConstraintPinningMiddleware,
                                                                                 langchain_summary_prefix)

    prefix = episode_transcript(episode, sandbox, counter=counter)
    system = prefix[0].content if prefix and prefix[0].role == "system" else None
    body = prefix[1:] if system is not None else prefix
    registry = episode_registry(episode)
    digest = registry.get(episode.instance.rule_id).short
    reader = RuleReader("semantic")
    reader.begin(ActorBrief(episode.instance, episode.request, frozenset({digest}) if pinned else frozenset()))
    specs = episode_tools(episode, sandbox)
    if served is None:
        model: Any = ActorChatModel(actor=reader, tool_specs=specs)
        summariser: Any = ActorChatModel(actor=_Says(SUMMARY))
    else:
        model = _served_chat_class()(served=served["agent"], reader=reader, log=log, tool_specs=specs)
        summariser = served["summariser"]
    middleware: list[Any] = []
    if max_model_calls is not None:
        middleware.append(ModelCallLimitMiddleware(run_limit=max_model_calls, exit_behavior="end"))
    middleware.append(SummarizationMiddleware(summariser, trigger=("messages", trigger), keep=("messages", keep),
                                              summary_prompt=SUMMARY_PROMPT))
    if pinned:
        middleware.append(ConstraintPinningMiddleware(registry, counter=counter))
    calls: list[Any] = []
    results: list[Any] = []
    agent = create_agent(model, tools=langchain_tools(sandbox, specs, calls, results), system_prompt=system,
                         middleware=middleware)
    since = len(log.entries) if log is not None else 0
    before = sandbox.state()
    agent.invoke({"messages": [*to_langchain(body), HumanMessage(episode.request_text)]}, {"recursion_limit": 40})
    violation, reply, mismatch = _grade(episode, sandbox, before, calls, results, model.actions)
    agent_idx, summary_idx, cards = _rows_of(log if served is not None else None, since, episode, digest)
    prefix_text = langchain_summary_prefix() or "\0"
    first = wire_messages(log.entries[agent_idx[0]]["request"]) if agent_idx else []
    compacted = any(m.content.startswith(prefix_text) for m in first)
    return EpisodeRow(episode.episode_id, "langgraph" if served is not None else "langgraph/e164-reference",
                      "pinned" if pinned else "unpinned", violation, reply, [c.name for c in calls], mismatch,
                      agent_idx, summary_idx, cards, compacted)


class _MemorySession:
    """An in-memory Agents SDK ``Session`` (the structural protocol ``CompactingSession`` wraps)."""

    session_settings = None

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.items: list[Any] = []

    async def get_items(self, limit: int | None = None) -> list[Any]:
        return list(self.items if limit is None else self.items[-limit:])

    async def add_items(self, items: list[Any]) -> None:
        self.items.extend(items)

    async def pop_item(self) -> Any:
        return self.items.pop() if self.items else None

    async def clear_session(self) -> None:
        self.items.clear()


async def arun_agents_sdk_episode(episode: Any, sandbox: Any, *, pinned: bool, counter: Any, url: str,
                                  log: WireLog, trigger_tokens: int, keep_last: int, summary_max_tokens: int,
                                  agent_max_tokens: int, max_turns: int = 4,
                                  summary_cache: dict[str, str] | None = None) -> EpisodeRow:
    """One trigger through an Agents SDK ``Agent`` + ``Runner.run`` whose model is the SDK's
    ``OpenAIChatCompletionsModel`` over the server (wrapped by :class:`ServedReaderModel`); the episode's history is
    loaded into ``CompactingSession(<memory>, ServedSummary, trigger_tokens, keep_last)`` — a compaction round
    through the server — and, if ``pinned``, read through ``PinnedSession`` with the run's
    ``call_model_input_filter`` pinning the calls inside the run too."""
    from agents import Agent, ModelSettings, RunConfig, Runner
    from agents.models.openai_chatcompletions import OpenAIChatCompletionsModel
    from openai import AsyncOpenAI, OpenAI

    from agentmill.methods.constraint_rot.actors import RuleReader
    from agentmill.methods.constraint_rot.actors.base import ActorBrief
    from agentmill.methods.constraint_rot.frameworks import episode_registry, episode_transcript
    from agentmill.methods.constraint_rot.pinning.integrations import CompactingSession, PinnedSession

    prefix = episode_transcript(episode, sandbox, counter=counter)
    system = prefix[0].content if prefix and prefix[0].role == "system" else None
    body = prefix[1:] if system is not None else prefix
    registry = episode_registry(episode)
    digest = registry.get(episode.instance.rule_id).short
    reader = RuleReader("semantic")
    reader.begin(ActorBrief(episode.instance, episode.request, frozenset({digest}) if pinned else frozenset()))

    since = len(log.entries)
    with OpenAI(base_url=url, api_key="none", max_retries=0, http_client=log.client("summary")) as summ_client:
        compactor = served_summary_class()(summ_client, summary_max_tokens, counter=counter, cache=summary_cache)
        store = CompactingSession(_MemorySession(f"{episode.episode_id}-{pinned}"), compactor,
                                  trigger_tokens=trigger_tokens, token_counter=counter, keep_last=keep_last)
        await store.add_items(_to_sdk_items(body))  # the compaction round: over trigger_tokens → served summary
        session: Any = PinnedSession(store, registry, counter=counter) if pinned else store
        client = AsyncOpenAI(base_url=url, api_key="none", max_retries=0, http_client=log.async_client("agent"))
        inner = OpenAIChatCompletionsModel(model=SERVED_NAME, openai_client=client)
        calls: list[Any] = []
        results: list[Any] = []
        specs = episode_tools(episode, sandbox)
        model = _served_sdk_class()(inner, reader, log, specs)
        agent = Agent(name="office_agent", instructions=system, model=model,
                      tools=sdk_tools(sandbox, specs, calls, results),
                      model_settings=ModelSettings(temperature=0.0, max_tokens=agent_max_tokens))
        config = RunConfig(call_model_input_filter=session.model_input_filter if pinned else None,
                           tracing_disabled=True)
        before = sandbox.state()
        try:
            await Runner.run(agent, episode.request_text, session=session, run_config=config, max_turns=max_turns)
        finally:
            await client.close()
    violation, reply, mismatch = _grade(episode, sandbox, before, calls, results, model.actions)
    agent_idx, summary_idx, cards = _rows_of(log, since, episode, digest)
    return EpisodeRow(episode.episode_id, "openai_agents", "pinned" if pinned else "unpinned", violation, reply,
                      [c.name for c in calls], mismatch, agent_idx, summary_idx, cards, bool(store.results))


def run_agents_sdk_episode(episode: Any, sandbox: Any, **kw: Any) -> EpisodeRow:
    """Synchronous :func:`arun_agents_sdk_episode` (not from inside a running event loop)."""
    return asyncio.run(arun_agents_sdk_episode(episode, sandbox, **kw))


def served_langchain_models(url: str, log: WireLog, *, agent_max_tokens: int, summary_max_tokens: int
                            ) -> dict[str, Any]:
    """The LangGraph agent's two ``ChatOpenAI`` clients over the server, on ``log``'s recording transport. The
    summariser has LangChain's ``InMemoryCache`` (as E164's model arm): make one pair per episode and use it for both
    arms — pinning is ephemeral, so both arms send the summariser the same card-free state and the greedy summary is
    served once."""
    from langchain_core.caches import InMemoryCache
    from langchain_openai import ChatOpenAI

    common = {"model": SERVED_NAME, "base_url": url, "api_key": "none", "temperature": 0.0, "max_retries": 0,
              "timeout": 900}
    return {"agent": ChatOpenAI(**common, max_tokens=agent_max_tokens, http_client=log.client("agent")),
            "summariser": ChatOpenAI(**common, max_tokens=summary_max_tokens, http_client=log.client("summary"),
                                     cache=InMemoryCache())}


__all__ = ["SERVED_NAME", "SUMMARY", "SUMMARY_PROMPT", "EpisodeRow", "Replayer", "Servers", "WireLog", "answer_of",
           "arun_agents_sdk_episode", "body_digest", "card_in", "episode_tools", "pid_alive", "run_agents_sdk_episode",
           "run_langgraph_episode", "serve_args", "served_langchain_models", "served_summary_class", "servers",
           "wire_messages"]
