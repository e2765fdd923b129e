"""OpenAI function calling over a plain-text chat model: validate ``tools``/``tool_choice``, render the tool list
and tool traffic into chat-template messages, and parse the model's text back into tool calls
(docs/methods/constraint_rot.md). Pure functions, no model and no HTTP, so the same agent code can talk to the local
model and to any remote endpoint through one OpenAI-compatible server.

It lives in the ``lm`` layer because two faces must render byte-identical prompts: the OpenAI-compatible server
(``agentmill.serve``, which re-exports it) and the constraint-rot model organism, which is trained and decoded
on exactly what the server would show it (methods may not import ``serve``; ARCHITECTURE §1).
:func:`chat_prompt_ids` is the one tokenisation both use.

Rendering (what the model sees):

- The tool list goes at the end of the system message (a system message holding only it is prepended when the
  request has none), one tool per line as a compact signature, then the output-format instruction::

      Tools:
      - send_email(to: string, subject: string, cc?: array[string]): Send an email.
      - set_mode(mode: "fast"|"slow", opts?: {level: integer}): Pick a mode.
      Answer with exactly one line: CALL <tool> <json-args> to call a tool, or REPLY <text> to answer.
      Example: CALL send_email {"to": "<string>", "subject": "<string>"}

  ``?`` marks an optional argument; enums are ``|``-joined JSON literals; objects with properties are written as
  ``{name: type, ...}``. A named ``tool_choice`` lists only that tool; ``required`` drops the ``REPLY`` option.
  The example calls the first listed tool with its required arguments as ``"<type>"`` placeholders: without it
  SmolLM2-135M answers a named ``tool_choice`` with ``CALL get_weather(city: "Paris")``, with it
  ``CALL get_weather {"city": "Paris"}`` (measured here, greedy; ARCHITECTURE §3: one-shot examples are what make
  it emit JSON calls).
- An assistant message's ``tool_calls`` become ``CALL <name> <json-args>`` lines (arguments re-serialised with
  ``json.dumps``, keys in the client's order), after its text content if it has any.
- A ``tool`` message keeps role ``tool`` and its raw content when the chat template renders that role (ChatML,
  e.g. SmolLM2's, renders any role name); otherwise it becomes a ``user`` message
  ``Tool result <name> (<tool_call_id>):\\n<content>``.

Parsing (what the client gets), first rule that applies:

1. ``REPLY <text>`` at the start → text content (the ``REPLY`` marker removed).
2. ``<tool_call>{...}</tool_call>`` blocks (Hermes/Qwen style) → one call per block.
3. Lines starting with ``CALL <name> <json-args>`` (the model organism's format) → one call per line.
4. A fenced ``json`` block, or the whole text, that is a JSON object ``{"name", "arguments"}`` (also
   ``"parameters"``) or ``{"tool", "args"}`` → one call.

Text outside the recognised calls is dropped when every call is valid. A call-shaped output naming an undeclared
tool or carrying unparseable arguments is returned unchanged as text with a ``failure`` reason (the server counts
it); it is never an error.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")       # OpenAI's rule for function names
FORMAT_AUTO = "Answer with exactly one line: CALL <tool> <json-args> to call a tool, or REPLY <text> to answer."
FORMAT_REQUIRED = "Answer with exactly one line: CALL <tool> <json-args>."
_HERMES = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
_FENCE = re.compile(r"```(?:json|JSON)?[ \t]*\n?(.*?)```", re.DOTALL)
_CALL_LINE = re.compile(r"^CALL[ \t]+(\S+)[ \t]*(.*)$")


class ToolRequestError(ValueError):
    """A malformed ``tools``/``tool_choice``/tool message; ``param`` is the OpenAI-style path of the bad field."""

    def __init__(self, message: str, param: str):
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class Tool:
    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ToolRequest:
    """The validated tool fields of one chat request. ``choice`` is ``auto``, ``none``, ``required`` or the name of
    the one tool the model must call."""

    tools: tuple[Tool, ...]
    choice: str = "auto"
    parallel: bool = True

    @property
    def active(self) -> bool:
        """Whether the tool list is rendered and the output parsed (``tool_choice="none"`` turns both off)."""
        return bool(self.tools) and self.choice != "none"

    @property
    def offered(self) -> tuple[Tool, ...]:
        """The tools the model may call: all of them, or the one a named ``tool_choice`` picks."""
        if self.choice in ("auto", "required", "none"):
            return self.tools
        return tuple(t for t in self.tools if t.name == self.choice)

    @property
    def prefill(self) -> str:
        """Text the assistant turn is started with, so ``required``/named choices hold even on a weak model (the
        same text is put back in front of the generation before parsing)."""
        if not self.active or self.choice == "auto":
            return ""
        return "CALL" if self.choice == "required" else f"CALL {self.choice}"


@dataclass(frozen=True)
class ParsedCall:
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class ParsedOutput:
    """``calls`` empty → answer with ``text``; ``failure`` says why a call-shaped output was not accepted
    (``undeclared_tool``, ``bad_arguments``, ``bad_format``) and is ``None`` for valid calls and plain text."""

    calls: tuple[ParsedCall, ...]
    text: str
    failure: str | None = None


# ---------------------------------------------------------------------------------------------- request validation
def parse_tool_request(body: dict[str, Any]) -> ToolRequest | None:
    """The tool fields of a chat request body, validated; ``None`` when it declares no tools."""
    raw, choice, parallel = body.get("tools"), body.get("tool_choice"), body.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise ToolRequestError("'parallel_tool_calls' must be a boolean", "parallel_tool_calls")
    if raw is None or raw == []:
        if choice not in (None, "none", "auto"):
            raise ToolRequestError("'tool_choice' is only allowed when 'tools' are specified", "tool_choice")
        return None
    if not isinstance(raw, list):
        raise ToolRequestError("'tools' must be a list", "tools")
    tools: list[Tool] = []
    for i, t in enumerate(raw):
        tools.append(_tool(t, f"tools[{i}]", {x.name for x in tools}))
    names = [t.name for t in tools]
    return ToolRequest(tuple(tools), _choice(choice, names), True if parallel is None else parallel)


def _tool(t: Any, where: str, seen: set[str]) -> Tool:
    if not isinstance(t, dict):
        raise ToolRequestError(f"'{where}' must be an object", where)
    if t.get("type") != "function":
        raise ToolRequestError(f"'{where}.type' must be 'function', got {t.get('type')!r}", f"{where}.type")
    f = t.get("function")
    if not isinstance(f, dict):
        raise ToolRequestError(f"missing required parameter '{where}.function'", f"{where}.function")
    name = f.get("name")
    if not isinstance(name, str) or not TOOL_NAME.match(name):
        raise ToolRequestError(f"'{where}.function.name' must be 1-64 of a-z, A-Z, 0-9, _ and -, got {name!r}",
                               f"{where}.function.name")
    if name in seen:
        raise ToolRequestError(f"duplicate tool name {name!r}", f"{where}.function.name")
    desc = f.get("description") or ""
    if not isinstance(desc, str):
        raise ToolRequestError(f"'{where}.function.description' must be a string", f"{where}.function.description")
    params = f.get("parameters") or {}
    if not isinstance(params, dict) or ("properties" in params and not isinstance(params["properties"], dict)):
        raise ToolRequestError(f"'{where}.function.parameters' must be a JSON Schema object",
                               f"{where}.function.parameters")
    required = params.get("required")
    if required is not None and not (isinstance(required, list) and all(isinstance(k, str) for k in required)):
        raise ToolRequestError(f"'{where}.function.parameters.required' must be a list of property names",
                               f"{where}.function.parameters.required")
    return Tool(name, desc, params)


def _choice(choice: Any, names: list[str]) -> str:
    if choice is None:
        return "auto"
    if choice in ("auto", "none", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("function"), dict):
        name = choice["function"].get("name")
        if name in names:
            return name
        raise ToolRequestError(f"tool_choice names function {name!r}, which is not in 'tools' ({names})",
                               "tool_choice")
    raise ToolRequestError("'tool_choice' must be 'auto', 'none', 'required' or "
                           "{'type': 'function', 'function': {'name': ...}}", "tool_choice")


# ---------------------------------------------------------------------------------------------- rendering
def _type(schema: Any) -> str:
    """A JSON Schema as a short type expression (``string``, ``"a"|"b"``, ``array[integer]``, ``{k: type}``)."""
    if not isinstance(schema, dict):
        return "any"
    if "enum" in schema and isinstance(schema["enum"], list):
        return "|".join(json.dumps(v, ensure_ascii=False) for v in schema["enum"])
    t = schema.get("type")
    if isinstance(t, list):
        return "|".join(str(x) for x in t)
    if t == "array":
        return f"array[{_type(schema.get('items'))}]"
    if (t == "object" or t is None) and isinstance(schema.get("properties"), dict) and schema["properties"]:
        return "{" + _signature(schema) + "}"
    return str(t) if t else "any"


def _signature(schema: dict[str, Any]) -> str:
    required = set(schema.get("required") or ())
    return ", ".join(f"{k}{'' if k in required else '?'}: {_type(v)}" for k, v in schema["properties"].items())


def render_tools_prompt(request: ToolRequest) -> str:
    """The tool list and output-format instruction appended to the system message (format in the module doc)."""
    lines = ["Tools:"]
    for t in request.offered:
        props = t.parameters.get("properties")
        sig = _signature(t.parameters) if isinstance(props, dict) and props else ""
        desc = " ".join(t.description.split())
        lines.append(f"- {t.name}({sig})" + (f": {desc}" if desc else ""))
    lines.append(FORMAT_AUTO if request.choice == "auto" else FORMAT_REQUIRED)
    if request.offered:
        first = request.offered[0].parameters
        props = first.get("properties") if isinstance(first.get("properties"), dict) else {}
        example = {k: f"<{_type(props[k])}>" for k in first.get("required") or () if k in props}
        lines.append(f"Example: CALL {request.offered[0].name} {json.dumps(example, ensure_ascii=False)}")
    return "\n".join(lines)


def call_line(name: str, arguments: str, where: str) -> str:
    """``CALL <name> <json-args>`` for an assistant message's tool call; ``arguments`` is OpenAI's JSON string."""
    try:
        args = json.loads(arguments) if arguments.strip() else {}
    except ValueError:
        raise ToolRequestError(f"'{where}.function.arguments' is not valid JSON", f"{where}.function.arguments") \
            from None
    if not isinstance(args, dict):
        raise ToolRequestError(f"'{where}.function.arguments' must be a JSON object", f"{where}.function.arguments")
    return f"CALL {name} {json.dumps(args, ensure_ascii=False)}"


def _text(c: Any, where: str, allow_none: bool = False) -> str:
    if c is None and allow_none:
        return ""
    if isinstance(c, list):
        if not all(isinstance(p, dict) and p.get("type") == "text" for p in c):
            raise ToolRequestError(f"{where}: only text content parts are supported", where)
        return "".join(str(p.get("text", "")) for p in c)
    if not isinstance(c, str):
        raise ToolRequestError(f"{where}: content must be a string or text parts", where)
    return c


def template_messages(messages: Any, request: ToolRequest | None, *, tool_role: bool) -> list[dict[str, str]]:
    """OpenAI chat messages (roles system/developer/user/assistant/tool, assistant ``tool_calls``) as plain
    ``{role, content}`` dicts for a chat template; ``tool_role`` says whether the template renders role ``tool``.
    Raises ``ToolRequestError`` naming the bad message field."""
    if not isinstance(messages, list) or not messages:
        raise ToolRequestError("'messages' must be a non-empty list", "messages")
    out: list[dict[str, str]] = []
    names: dict[str, str] = {}                 # tool_call_id → function name, for the fallback rendering
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        role = m.get("role") if isinstance(m, dict) else None
        if role not in ("system", "developer", "user", "assistant", "tool"):
            raise ToolRequestError(f"{where}: role must be system, developer, user, assistant or tool",
                                   f"{where}.role")
        if role == "assistant" and m.get("tool_calls"):
            lines = [t] if (t := _text(m.get("content"), where, allow_none=True).strip()) else []
            calls = m["tool_calls"]
            if not isinstance(calls, list):
                raise ToolRequestError(f"'{where}.tool_calls' must be a list", f"{where}.tool_calls")
            for j, tc in enumerate(calls):
                cw = f"{where}.tool_calls[{j}]"
                f = tc.get("function") if isinstance(tc, dict) else None
                if not isinstance(f, dict) or not isinstance(f.get("name"), str) or \
                        not isinstance(f.get("arguments", ""), str):
                    raise ToolRequestError(f"'{cw}' must be {{id, type: 'function', function: {{name, arguments}}}}",
                                           cw)
                if isinstance(tc.get("id"), str):
                    names[tc["id"]] = f["name"]
                lines.append(call_line(f["name"], f.get("arguments", ""), cw))
            out.append({"role": "assistant", "content": "\n".join(lines)})
        elif role == "tool":
            tcid = m.get("tool_call_id")
            if not isinstance(tcid, str) or not tcid:
                raise ToolRequestError(f"missing required parameter '{where}.tool_call_id'", f"{where}.tool_call_id")
            content = _text(m.get("content"), where)
            if tool_role:
                out.append({"role": "tool", "content": content})
            else:
                out.append({"role": "user", "content": f"Tool result {names.get(tcid, '?')} ({tcid}):\n{content}"})
        else:
            out.append({"role": "system" if role == "developer" else role,
                        "content": _text(m.get("content"), where, allow_none=role == "assistant")})
    if request is not None and request.active:
        block = render_tools_prompt(request)
        if out[0]["role"] == "system":
            out[0] = {"role": "system", "content": (out[0]["content"].rstrip() + "\n\n" + block).lstrip()}
        else:
            out.insert(0, {"role": "system", "content": block})
    return out


def template_renders_tool_role(tokenizer: Any) -> bool:
    """Whether the chat template renders a ``tool`` message's content (ChatML renders any role; templates that
    raise on or drop unknown roles do not), so tool results can keep their role."""
    probe = "agentmill-tool-role-probe"
    try:
        text = tokenizer.apply_chat_template([{"role": "user", "content": "x"}, {"role": "tool", "content": probe}],
                                             add_generation_prompt=True, tokenize=False)
    except Exception:  # noqa: BLE001 - jinja raise_exception, KeyError, ...: any failure means "not supported"
        return False
    return isinstance(text, str) and probe in text


def chat_prompt_ids(tokenizer: Any, messages: Any, request: ToolRequest | None = None, *,
                    tool_role: bool | None = None) -> list[int]:
    """Token ids of a chat prompt as the server feeds it: :func:`template_messages`, the tokenizer's chat template
    with the generation prompt (used as shipped: SmolLM2's injects a default system message when none is given),
    then ``request.prefill``. ``tool_role`` defaults to :func:`template_renders_tool_role`. Raises
    ``ToolRequestError`` naming a bad message field."""
    if tool_role is None:
        tool_role = template_renders_tool_role(tokenizer)
    clean = template_messages(messages, request, tool_role=tool_role)
    ids = tokenizer.apply_chat_template(clean, add_generation_prompt=True, tokenize=True)
    if hasattr(ids, "keys"):            # transformers 5 returns a BatchEncoding
        ids = ids["input_ids"]
    ids = [int(t) for t in ids]
    if request is not None and request.prefill:
        ids += [int(t) for t in tokenizer.encode(request.prefill, add_special_tokens=False)]
    return ids


# ---------------------------------------------------------------------------------------------- parsing
def _args(raw: Any) -> dict[str, Any] | None:
    """Arguments as a dict: an object, or a JSON string holding one (some models quote them); else ``None``."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else {}
        except ValueError:
            return None
    return raw if isinstance(raw, dict) else None


def _from_object(obj: Any) -> tuple[str, Any] | None:
    """(name, raw arguments) of a call-shaped JSON object, else ``None``."""
    if not isinstance(obj, dict):
        return None
    if isinstance(obj.get("function"), dict):          # {"type": "function", "function": {...}}
        obj = obj["function"]
    for n, a in (("name", "arguments"), ("name", "parameters"), ("tool", "args"), ("tool", "arguments")):
        if isinstance(obj.get(n), str) and a in obj:
            return obj[n], obj.get(a, {})
    return None


def _checked(found: list[tuple[str, Any]], text: str, declared: set[str]) -> ParsedOutput:
    calls = []
    for name, raw in found:
        if name not in declared:
            return ParsedOutput((), text, "undeclared_tool")
        args = _args(raw)
        if args is None:
            return ParsedOutput((), text, "bad_arguments")
        calls.append(ParsedCall(name, args))
    return ParsedOutput(tuple(calls), "")


def parse_tool_call(text: str, declared_names: Any) -> ParsedOutput:
    """Tool calls in a model's ``text`` (formats and precedence in the module doc); ``declared_names`` are the
    tools the request offered. Never raises on model output."""
    declared = set(declared_names)
    s = text.strip()
    if s == "REPLY" or s.startswith(("REPLY ", "REPLY\n", "REPLY:")):
        return ParsedOutput((), s[len("REPLY"):].lstrip(":").strip())

    if "<tool_call>" in s:
        found = []
        for body in _HERMES.findall(s):
            try:
                got = _from_object(json.loads(body))
            except ValueError:
                return ParsedOutput((), text, "bad_arguments")
            if got is None:
                return ParsedOutput((), text, "bad_format")
            found.append(got)
        return _checked(found, text, declared)

    lines = [ln.strip() for ln in s.splitlines() if ln.strip().startswith("CALL")]
    lines = [ln for ln in lines if ln == "CALL" or ln[4] in " \t"]
    if lines:
        found = []
        for ln in lines:
            m = _CALL_LINE.match(ln)
            if m is None:
                return ParsedOutput((), text, "bad_format")
            name, rest = m.group(1), m.group(2).strip()
            if not rest:
                found.append((name, {}))
                continue
            try:
                found.append((name, json.loads(rest)))
            except ValueError:
                return ParsedOutput((), text, "bad_arguments") if name in declared else \
                    ParsedOutput((), text, "undeclared_tool")
        return _checked(found, text, declared)

    fenced = _FENCE.search(s)
    candidate = fenced.group(1).strip() if fenced else s
    if candidate.startswith("{"):
        try:
            got = _from_object(json.loads(candidate))
        except ValueError:
            got = None
        if got is not None:
            return _checked([got], text, declared)
    return ParsedOutput((), text)
