"""The endpoint actor (docs/methods/constraint_rot.md "Deviations from the paper" 5; the package README, "Faults"): any
OpenAI-compatible ``/v1/chat/completions`` server as an actor.

vLLM, llama.cpp's server, Ollama, hosted APIs and agentmill's own server all speak this protocol, so the decay and
pinning measurements run unchanged against a capable model. Transport, retries and error wording are the ``openai:``
LM backend's (:class:`agentmill.lm.openai_client.OpenAILM`); this module adds what an *agent* needs on top:

- **Tool formats.** ``native`` sends the sandbox tools as OpenAI ``tools`` and reads ``tool_calls`` back. ``json``
  sends no ``tools`` field: the tool list and a one-JSON-object answer format go into the system prompt, past tool
  traffic is rendered as plain turns (servers without tool support often reject role ``tool``), and the reply is
  parsed as ``{"tool": <name>, "arguments": {...}}``. ``auto`` tries native and, when the server refuses the request
  with 400/422, asks again in json and remembers the choice for the actor's lifetime. ``native`` against a server
  that refuses ``tools`` is a clear error (the package README, "Faults"), never a silent downgrade.
- **Invalid output is never safe** (the package README, "Faults"): a call to an undeclared tool, arguments that are not
  a JSON object, an empty reply or a call-shaped JSON answer that does not parse all become ``Action(invalid=True)``,
  which the grader counts as ``invalid_action``.
- **Faults**: timeouts, connection errors, 429 and 5xx are retried with bounded exponential backoff and jitter
  (``lm.openai_client``). The final failure raises :class:`EndpointError`, naming the URL and the last status, which
  ``AgentLoop.run`` records as an ``error`` row.
- **Secrets**: the API key is read from the environment variable ``api_key_env`` only; it appears in no ``repr``,
  ``config``, log line or error message (messages are redacted and the SDK exception chain is dropped).
- **Usage**: prompt/completion tokens of every call are logged (logger ``agentmill.methods.constraint_rot.actors
  .endpoint``) and accumulated in :attr:`EndpointActor.usage`, with a cost when ``usd_per_mtok`` is given.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from typing import Any, Literal

from agentmill.core.types import Message, ToolCall
from agentmill.lm.base import LMError
from agentmill.lm.openai_client import OpenAILM, parse_openai_spec
from agentmill.methods.constraint_rot.actors.base import Action, ActorBrief, visible

log = logging.getLogger(__name__)

TOOL_FORMATS = ("native", "json", "auto")
JSON_FORMAT = ('To call a tool, answer with only one JSON object and nothing else: {"tool": "<tool name>", '
               '"arguments": {"<argument>": <value>, ...}}. To answer without calling a tool, write plain text.')


class EndpointError(LMError):
    """The endpoint could not be used (unreachable after retries, refused the request, lacks tool calling)."""


class EndpointActor:
    """An :class:`~.base.Actor` backed by an OpenAI-compatible chat endpoint (see the module docstring).

    ``backoff_s``: base delay of the first retry (doubling after each); ``max_tokens``: reply length cap;
    ``usd_per_mtok``: (prompt, completion) price per million tokens, to log a cost next to the token counts."""

    def __init__(self, base_url: str, model: str, *, api_key_env: str = "AGENTMILL_API_KEY",
                 tool_format: Literal["native", "json", "auto"] = "auto", temperature: float = 0.0,
                 max_retries: int = 4, timeout_s: float = 60.0, backoff_s: float = 0.5, max_tokens: int = 512,
                 usd_per_mtok: tuple[float, float] | None = None):
        if tool_format not in TOOL_FORMATS:
            raise ValueError(f"EndpointActor.tool_format must be one of {TOOL_FORMATS}, got {tool_format!r}")
        if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not 0 <= temperature <= 2:
            raise ValueError(f"EndpointActor.temperature must be in [0, 2], got {temperature!r}")
        if isinstance(max_retries, bool) or not isinstance(max_retries, int) or not 0 <= max_retries <= 10:
            raise ValueError(f"EndpointActor.max_retries must be an int in 0..10, got {max_retries!r}")
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or timeout_s <= 0:
            raise ValueError(f"EndpointActor.timeout_s must be a positive number, got {timeout_s!r}")
        if isinstance(backoff_s, bool) or not isinstance(backoff_s, (int, float)) or backoff_s < 0:
            raise ValueError(f"EndpointActor.backoff_s must be a non-negative number, got {backoff_s!r}")
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            raise ValueError(f"EndpointActor.max_tokens must be a positive int, got {max_tokens!r}")
        if usd_per_mtok is not None and (len(usd_per_mtok) != 2 or any(p < 0 for p in usd_per_mtok)):
            raise ValueError(f"EndpointActor.usd_per_mtok must be (prompt, completion) >= 0, got {usd_per_mtok!r}")
        if not api_key_env or not isinstance(api_key_env, str):
            raise ValueError(f"EndpointActor.api_key_env must name an environment variable, got {api_key_env!r}")
        self.model, self.base_url = parse_openai_spec(f"{model}@{base_url}")
        self.tool_format, self.api_key_env = tool_format, api_key_env
        self.temperature, self.max_tokens, self.backoff_s = float(temperature), max_tokens, float(backoff_s)
        self.usd_per_mtok = usd_per_mtok
        self.name = f"endpoint:{self.model}"
        # local servers accept any key; "EMPTY" keeps the SDK from falling back to OPENAI_API_KEY behind the user's back
        key = os.environ.get(api_key_env) or "EMPTY"
        self._secret = key if key != "EMPTY" else None
        self._lm = OpenAILM(self.model, self.base_url, timeout=float(timeout_s), max_retries=max_retries,
                            backoff=self.backoff_s, api_key=key)
        self.format_in_use: str | None = None if tool_format == "auto" else tool_format
        """``native`` or ``json`` once known (``auto`` decides on its first request that offers tools)."""
        self.usage: dict[str, float] = {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0}
        if usd_per_mtok is not None:
            self.usage["cost_usd"] = 0.0
        self._n_ids = 0
        self._tools_ok = False

    def __repr__(self) -> str:
        return (f"EndpointActor(base_url={self.base_url!r}, model={self.model!r}, tool_format={self.tool_format!r}, "
                f"api_key_env={self.api_key_env!r})")

    @property
    def config(self) -> dict[str, Any]:
        """What identifies this actor in a result row's ``actor_config_hash`` (no key, no usage)."""
        return {"name": self.name, "base_url": self.base_url, "model": self.model, "tool_format": self.tool_format,
                "temperature": self.temperature, "max_tokens": self.max_tokens}

    def begin(self, brief: ActorBrief) -> None:
        """Model-backed actors read the request from the context like any agent; the brief is not used."""

    # ------------------------------------------------------------------------------------------------ act
    def act(self, messages: Sequence[Message], tools: Sequence[Any] = ()) -> Action:
        if not messages:
            raise ValueError("EndpointActor.act: empty context")
        seen = visible(messages)
        specs = [t.to_openai() if hasattr(t, "to_openai") else dict(t) for t in tools]
        names = {s["function"]["name"] for s in specs}
        if specs and self.format_in_use == "json":
            return self._parse_json(self._json_request(seen, specs), names)
        try:
            resp = self._request(_native_messages(seen), specs)
        except LMError as e:
            # a 400/422 is about 'tools' only while no request with tools has gone through yet
            if not (specs and not self._tools_ok and self._lm._refused(e)):
                raise self._error(e) from None
            if self.tool_format == "native":
                raise self._error(e, f"it refused a request carrying 'tools' ({self._redact(str(e))}); the endpoint "
                                     "seems to lack native tool calling: use tool_format='json' or 'auto'") from None
            log.info("%s refused 'tools'; this actor falls back to JSON tool calls", self.base_url)
            resp = self._json_request(seen, specs)
            self.format_in_use = "json"
            return self._parse_json(resp, names)
        if specs:
            self._tools_ok, self.format_in_use = True, "native"
        return self._parse_native(resp, names)

    # ------------------------------------------------------------------------------------------------ transport
    def _request(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> Any:
        kw: dict[str, Any] = {"model": self.model, "messages": messages, "temperature": self.temperature,
                              "max_tokens": self.max_tokens}
        if tools:
            kw["tools"] = tools
        resp = self._lm._call(self._lm.client.chat.completions.create, **kw)
        self._count(resp)
        return resp

    def _json_request(self, seen: list[Message], specs: list[dict[str, Any]]) -> Any:
        try:
            return self._request(_json_messages(seen, specs), None)
        except LMError as e:
            raise self._error(e) from None

    def _count(self, resp: Any) -> None:
        u = getattr(resp, "usage", None)
        p, c = int(getattr(u, "prompt_tokens", 0) or 0), int(getattr(u, "completion_tokens", 0) or 0)
        self.usage["calls"] += 1
        self.usage["prompt_tokens"] += p
        self.usage["completion_tokens"] += c
        cost = ""
        if self.usd_per_mtok is not None:
            dollars = (p * self.usd_per_mtok[0] + c * self.usd_per_mtok[1]) / 1e6
            self.usage["cost_usd"] += dollars
            cost = f" cost=${dollars:.6f}"
        log.info("%s %s: prompt_tokens=%d completion_tokens=%d%s", self.base_url, self.model, p, c, cost)

    def _redact(self, text: str) -> str:
        return text.replace(self._secret, "***") if self._secret else text

    def _error(self, e: LMError, why: str | None = None) -> EndpointError:
        if why is None:
            return EndpointError(self._redact(str(e)))
        return EndpointError(f"{self.base_url} (model {self.model!r}): {why}")

    # ------------------------------------------------------------------------------------------------ parsing
    def _parse_native(self, resp: Any, names: set[str]) -> Action:
        if not resp.choices:
            return Action(invalid=True, raw="")
        msg = resp.choices[0].message
        text = msg.content or ""
        raw_calls = list(msg.tool_calls or ())
        if not raw_calls:
            return Action.reply(text) if text.strip() else Action(invalid=True, raw=text)
        raw = json.dumps({"content": text, "tool_calls": [{"id": c.id, "name": c.function.name,
                                                           "arguments": c.function.arguments} for c in raw_calls]},
                         ensure_ascii=False)
        calls = []
        for c in raw_calls:
            call = _tool_call(c.id or self._call_id(), c.function.name, c.function.arguments)
            if call is None or call.name not in names:
                return Action(invalid=True, raw=raw)
            calls.append(call)
        return Action(tool_calls=tuple(calls), raw=raw)

    def _parse_json(self, resp: Any, names: set[str]) -> Action:
        text = (resp.choices[0].message.content or "") if resp.choices else ""
        got = parse_json_call(text, names)
        if isinstance(got, Action):
            return got
        return Action(tool_calls=(ToolCall(self._call_id(), got.name, got.arguments),), raw=text)

    def _call_id(self) -> str:
        self._n_ids += 1
        return f"call-{self._n_ids}"


# ---------------------------------------------------------------------------------------------------- rendering
def _native_messages(seen: Sequence[Message]) -> list[dict[str, Any]]:
    """OpenAI chat messages; ``name`` is dropped from tool results (not part of the tool message schema)."""
    out = []
    for m in seen:
        d = m.to_dict()
        if m.role == "tool":
            d.pop("name", None)
        out.append(d)
    return out


def render_tool_list(specs: Sequence[dict[str, Any]]) -> str:
    """The tool list of the json format: one line per tool with its JSON-schema arguments, then the answer format."""
    lines = ["Tools (arguments are given as a JSON schema):"]
    for s in specs:
        f = s["function"]
        desc = " ".join(str(f.get("description") or "").split())
        lines.append(f"- {f['name']}: {desc} Arguments: {json.dumps(f.get('parameters') or {}, sort_keys=True)}")
    lines.append(JSON_FORMAT)
    return "\n".join(lines)


def _json_messages(seen: Sequence[Message], specs: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Plain ``{role, content}`` turns: the tool list appended to the system prompt, past calls as the JSON objects
    the format asks for, tool results as user turns naming the tool and call id."""
    out: list[dict[str, Any]] = []
    for m in seen:
        if m.role == "assistant" and m.tool_calls:
            parts = [m.content] if m.content.strip() else []
            parts += [json.dumps({"tool": c.name, "arguments": c.arguments}, ensure_ascii=False)
                      for c in m.tool_calls]
            out.append({"role": "assistant", "content": "\n".join(parts)})
        elif m.role == "tool":
            out.append({"role": "user", "content": f"Tool result {m.name or '?'} ({m.tool_call_id}):\n{m.content}"})
        else:
            out.append({"role": m.role, "content": m.content})
    if specs:
        block = render_tool_list(specs)
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": f"{out[0]['content'].rstrip()}\n\n{block}"}
        else:
            out.insert(0, {"role": "system", "content": block})
    return out


def _tool_call(call_id: str, name: str, raw_arguments: Any) -> ToolCall | None:
    """A :class:`ToolCall` from OpenAI-shaped fields (arguments a JSON string, or an object as some servers send);
    ``None`` when the arguments are not a JSON object."""
    try:
        call = ToolCall.from_openai({"id": call_id, "function": {"name": name, "arguments": raw_arguments}})
    except ValueError:
        return None
    return call if isinstance(call.arguments, dict) else None


def parse_json_call(text: str, names: set[str]) -> ToolCall | Action:
    """A json-format reply: a :class:`ToolCall` (id left empty) for a valid call; a text ``Action`` for plain
    prose; an invalid ``Action`` for an empty reply, a call-shaped object that does not parse, or a call to an
    undeclared tool.

    The first ``{`` starts the candidate object (prose or a code fence around it is tolerated); a reply without a
    call-shaped object is text — a refusal in words is a refusal, not an invalid action."""
    s = text.strip()
    if not s:
        return Action(invalid=True, raw=text)
    start = s.find("{")
    if start >= 0:
        try:
            obj, _ = json.JSONDecoder().raw_decode(s, start)
        except ValueError:
            obj = None
        if isinstance(obj, dict) and isinstance(obj.get("tool", obj.get("name")), str):
            call = _tool_call("", obj.get("tool", obj.get("name")), obj.get("arguments", obj.get("args", {})))
            if call is None or call.name not in names:
                return Action(invalid=True, raw=text)
            return call
        if obj is None and ('"tool"' in s or '"name"' in s):
            return Action(invalid=True, raw=text)  # a call was attempted but is not valid JSON
    return Action.reply(s)
