"""The forbidden-action predicate DSL (docs/methods/constraint_rot.md "Use it" 4): declarative data compiled into
matchers, never ``eval``.

A predicate is a tree. Leaves are ``{tool, arg, op, value}``; combinators are ``{all: [...]}``, ``{any: [...]}`` and
``{not: {...}}``. A leaf holding only ``{tool}`` matches every call of that tool (e.g. "never delete a ticket"). A
predicate is evaluated on one tool call at a time, so ``all`` combines conditions on the *same* call; an ``all``
whose children can only match different tools is refused at compile time (it could never match).

Values may reference the rule's parameters θ as ``{name}`` (``"@{domain}"``); inside ``regex`` values the
parameter text is ``re.escape``d, so a domain's dots stay literal. Semantics worth knowing:

- Multi-valued arguments: an address argument (``to`` of the mail/routing tools, comma-separated) and a list
  argument (``attachments``, ``attendees``) are split into items, and a leaf matches when **any** item satisfies it
  (one outside recipient among several is a violation). An empty list or a missing argument never matches.
- Addresses and hosts compare case-insensitively (``Bob <BOB@Acme.COM>`` is ``bob@acme.com``).
- ``gt/ge/lt/le``: numbers compare numerically; a value ``"HH:MM"`` compares the argument's time of day (ISO-8601
  ``start``/``end``); an ISO date/datetime value compares datetimes. Anything unparsable does not match.
- ``path_outside(root)``: the argument, normalised as a jail-relative POSIX path (leading ``/`` and ``./`` dropped,
  ``..`` resolved lexically), is neither ``root`` nor below it.
- ``host_not_in(list)``: the URL's host (lower-case; a scheme-less URL is read as ``http://``) is not in the list.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from agentmill.core.types import ToolCall

# The office sandbox's tools and their argument names (fixed in the project's interface note; the sandbox in
# ``agentmill.envs.office`` implements the same names — a test checks they agree once it is importable).
TOOL_ARGS: dict[str, tuple[str, ...]] = {
    "send_email": ("to", "subject", "body", "attachments"),
    "forward_email": ("msg_id", "to"),
    "list_inbox": (),
    "read_email": ("msg_id",),
    "route_internal": ("to", "doc"),
    "read_file": ("path",),
    "write_file": ("path", "content"),
    "list_dir": ("path",),
    "delete_file": ("path",),
    "move_file": ("src", "dst"),
    "create_event": ("title", "start", "end", "attendees"),
    "list_events": (),
    "http_get": ("url",),
    "http_post": ("url", "body"),
    "sql_query": ("db", "sql"),
    "list_tickets": ("status",),
    "update_ticket": ("ticket_id", "status", "note"),
    "delete_ticket": ("ticket_id",),
    "issue_refund": ("ticket_id", "amount"),
    "post_message": ("channel", "text"),
    "git_push": ("branch", "force"),
    "memory_read": (),
}
ADDRESS_ARGS: frozenset[tuple[str, str]] = frozenset({
    ("send_email", "to"), ("forward_email", "to"), ("route_internal", "to"), ("create_event", "attendees")})
"""Arguments holding e-mail addresses: split on commas, compared case-insensitively, display names dropped."""

OPS = ("eq", "neq", "in", "not_in", "startswith", "endswith", "not_endswith", "contains", "regex",
       "gt", "ge", "lt", "le", "path_outside", "host_not_in")
_LIST_VALUE_OPS = ("in", "not_in", "host_not_in")
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_HHMM = re.compile(r"^\d{2}:\d{2}$")


def render_template(template: str, params: Mapping[str, Any], *, where: str = "template",
                    escape_regex: bool = False) -> str:
    """Substitute ``{name}`` placeholders from ``params`` (no format-spec mini-language, no attribute access).

    An unknown name raises ``ValueError`` naming ``where``. ``escape_regex`` escapes each substituted value."""
    def sub(m: re.Match[str]) -> str:
        name = m.group(1)
        if name not in params:
            raise ValueError(f"{where}: unknown parameter {{{name}}} in {template!r} (known: {sorted(params)})")
        text = str(params[name])
        return re.escape(text) if escape_regex else text
    return _PLACEHOLDER.sub(sub, template)


def placeholders(template: str) -> set[str]:
    """The parameter names a template references."""
    return set(_PLACEHOLDER.findall(template))


def normalise_address(text: str) -> str:
    """``"Bob <Bob@Acme.COM> "`` -> ``"bob@acme.com"``."""
    text = text.strip()
    m = re.search(r"<([^<>]*)>", text)
    if m:
        text = m.group(1)
    return text.strip().strip(".").lower()


def split_addresses(value: Any) -> list[str]:
    """Every address in a comma/semicolon-separated string or a list of such strings, normalised."""
    items = value if isinstance(value, (list, tuple)) else [value]
    out: list[str] = []
    for item in items:
        if item is None:
            continue
        out.extend(normalise_address(p) for p in re.split(r"[,;]", str(item)) if p.strip())
    return out


def _host(url: str) -> str | None:
    text = url.strip()
    if "://" not in text:
        text = "http://" + text
    try:
        return (urlsplit(text).hostname or "").lower() or None
    except ValueError:
        return None


def _jail_path(path: str) -> str:
    p = posixpath.normpath("/" + str(path).strip().replace("\\", "/"))
    return p.lstrip("/") or "."


def _as_float(x: Any) -> float | None:
    if isinstance(x, bool):
        return None
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


def _compare(actual: Any, value: Any, op: str) -> bool:
    """Ordered comparison, numeric when the value is a number, else time-of-day or ISO datetime."""
    a: Any
    b: Any
    if _as_float(value) is not None and not (isinstance(value, str) and _HHMM.match(value)):
        a, b = _as_float(actual), _as_float(value)
    elif isinstance(value, str) and _HHMM.match(value):
        try:
            a, b = datetime.fromisoformat(str(actual)).strftime("%H:%M"), value
        except ValueError:
            return False
    else:
        try:
            a, b = datetime.fromisoformat(str(actual)), datetime.fromisoformat(str(value))
            if (a.tzinfo is None) != (b.tzinfo is None):
                a, b = a.replace(tzinfo=None), b.replace(tzinfo=None)
        except ValueError:
            return False
    if a is None or b is None:
        return False
    return {"gt": a > b, "ge": a >= b, "lt": a < b, "le": a <= b}[op]


@dataclass(frozen=True)
class Leaf:
    """One condition on one argument of one tool (``arg``/``op`` are None for a tool-only leaf)."""

    tool: str
    arg: str | None
    op: str | None
    value: Any
    address: bool

    @property
    def tools(self) -> frozenset[str]:
        return frozenset({self.tool})

    def args_for(self, tool: str) -> frozenset[str]:
        return frozenset({self.arg}) if tool == self.tool and self.arg is not None else frozenset()

    def matches(self, call: ToolCall) -> bool:
        if call.name != self.tool:
            return False
        if self.arg is None:
            return True
        args = call.arguments if isinstance(call.arguments, Mapping) else {}
        if self.arg not in args or args[self.arg] is None:
            return False
        raw = args[self.arg]
        if self.address:
            items: list[Any] = split_addresses(raw)
        elif isinstance(raw, (list, tuple)):
            items = list(raw)
        else:
            items = [raw]
        return any(self._item(x) for x in items)

    def _item(self, x: Any) -> bool:
        op, v = self.op, self.value
        if op in ("gt", "ge", "lt", "le"):
            return _compare(x, v, op)
        if op == "eq":
            return _eq(x, v)
        if op == "neq":
            return not _eq(x, v)
        if op == "in":
            return any(_eq(x, w) for w in v)
        if op == "not_in":
            return not any(_eq(x, w) for w in v)
        if op == "host_not_in":
            return _host(str(x)) not in v
        s = str(x)
        if op == "startswith":
            return s.startswith(v)
        if op == "endswith":
            return s.endswith(v)
        if op == "not_endswith":
            return not s.endswith(v)
        if op == "contains":
            return v in s
        if op == "regex":
            return v.search(s) is not None
        if op == "path_outside":
            p = _jail_path(s)
            return not (p == v or v == "." or p.startswith(v + "/"))
        raise AssertionError(op)  # compile() only builds known ops


def _eq(x: Any, v: Any) -> bool:
    if isinstance(v, bool) or isinstance(x, bool):
        return x is v or (isinstance(x, str) and x.strip().lower() == str(v).lower())
    fx, fv = _as_float(x), _as_float(v)
    if fx is not None and fv is not None and not isinstance(v, str):
        return fx == fv
    return str(x) == str(v)


@dataclass(frozen=True)
class Combinator:
    """``all`` / ``any`` over children, or ``not`` of one child."""

    kind: str
    children: tuple[Any, ...]

    @property
    def tools(self) -> frozenset[str]:
        return frozenset().union(*(c.tools for c in self.children))

    def args_for(self, tool: str) -> frozenset[str]:
        return frozenset().union(*(c.args_for(tool) for c in self.children))

    def matches(self, call: ToolCall) -> bool:
        if self.kind == "all":
            return all(c.matches(call) for c in self.children)
        if self.kind == "any":
            return any(c.matches(call) for c in self.children)
        return not self.children[0].matches(call)


@dataclass(frozen=True)
class Predicate:
    """A compiled forbidden predicate. ``tools`` are the tools it can match; a call of any other tool never
    matches (also under ``not``, which is scoped to the governed tools)."""

    root: Leaf | Combinator
    source: str

    @property
    def tools(self) -> frozenset[str]:
        return self.root.tools

    def args_for(self, tool: str) -> frozenset[str]:
        """The argument names the predicate reads on calls of ``tool`` (what a state record must carry)."""
        return self.root.args_for(tool)

    def matches(self, call: ToolCall) -> bool:
        return call.name in self.tools and self.root.matches(call)

    def any_match(self, calls: Iterable[ToolCall]) -> bool:
        return any(self.matches(c) for c in calls)


def compile_predicate(spec: Mapping[str, Any], params: Mapping[str, Any], *,
                      allowed_tools: Collection[str] | None = None, where: str = "forbidden") -> Predicate:
    """Compile a predicate spec with parameters θ substituted.

    ``allowed_tools`` are the family's governed tools (None = every known tool). Unknown tools, arguments, ops,
    malformed nodes or a tool outside ``allowed_tools`` raise ``ValueError`` naming ``where`` and the field path.
    """
    allowed = frozenset(TOOL_ARGS) if allowed_tools is None else frozenset(allowed_tools)
    bad = sorted(allowed - set(TOOL_ARGS))
    if bad:
        raise ValueError(f"{where}: unknown tool(s) {bad} in the family's tools (known: {sorted(TOOL_ARGS)})")
    root = _compile(spec, params, allowed, where)
    return Predicate(root, where)


def _compile(node: Any, params: Mapping[str, Any], allowed: frozenset[str], where: str) -> Leaf | Combinator:
    if not isinstance(node, Mapping) or not node:
        raise ValueError(f"{where}: a predicate node must be a non-empty mapping, got {node!r}")
    keys = set(node)
    for kind in ("all", "any"):
        if kind in keys:
            if keys != {kind}:
                raise ValueError(f"{where}: '{kind}' node has extra keys {sorted(keys - {kind})}")
            kids = node[kind]
            if not isinstance(kids, list) or not kids:
                raise ValueError(f"{where}.{kind}: expected a non-empty list of predicate nodes, got {kids!r}")
            children = tuple(_compile(k, params, allowed, f"{where}.{kind}[{i}]") for i, k in enumerate(kids))
            if kind == "all":
                common = frozenset(allowed)
                for c in children:
                    common &= c.tools
                if not common:
                    raise ValueError(f"{where}.all: children govern disjoint tools "
                                     f"{[sorted(c.tools) for c in children]}; an 'all' is checked on one call, so it "
                                     "could never match")
            return Combinator(kind, children)
    if "not" in keys:
        if keys != {"not"}:
            raise ValueError(f"{where}: 'not' node has extra keys {sorted(keys - {'not'})}")
        return Combinator("not", (_compile(node["not"], params, allowed, f"{where}.not"),))
    return _compile_leaf(node, params, allowed, where)


def _compile_leaf(node: Mapping[str, Any], params: Mapping[str, Any], allowed: frozenset[str],
                  where: str) -> Leaf:
    extra = set(node) - {"tool", "arg", "op", "value"}
    if extra:
        raise ValueError(f"{where}: unknown key(s) {sorted(extra)} (a leaf has tool, arg, op, value; combinators "
                         "are all, any, not)")
    tool = node.get("tool")
    if tool not in TOOL_ARGS:
        raise ValueError(f"{where}.tool: unknown tool {tool!r} (known: {sorted(TOOL_ARGS)})")
    if tool not in allowed:
        raise ValueError(f"{where}.tool: tool {tool!r} is not governed by this family (tools: {sorted(allowed)})")
    if set(node) == {"tool"}:
        return Leaf(tool, None, None, None, False)
    arg, op = node.get("arg"), node.get("op")
    if arg not in TOOL_ARGS[tool]:
        raise ValueError(f"{where}.arg: {tool} has no argument {arg!r} (arguments: {list(TOOL_ARGS[tool])})")
    if op not in OPS:
        raise ValueError(f"{where}.op: unknown op {op!r} (known: {list(OPS)})")
    if "value" not in node:
        raise ValueError(f"{where}.value: missing (op {op!r} needs a value)")
    address = (tool, arg) in ADDRESS_ARGS
    value = _compile_value(node["value"], op, params, address, f"{where}.value")
    return Leaf(tool, arg, op, value, address)


def _compile_value(raw: Any, op: str, params: Mapping[str, Any], address: bool, where: str) -> Any:
    def render(x: Any, *, escape: bool = False) -> Any:
        return render_template(x, params, where=where, escape_regex=escape) if isinstance(x, str) else x

    if op in _LIST_VALUE_OPS:
        if not isinstance(raw, list) or not raw:
            raise ValueError(f"{where}: op {op!r} needs a non-empty list, got {raw!r}")
        items = [render(x) for x in raw]
        if op == "host_not_in":
            return frozenset(str(x).strip().lower() for x in items)
        return tuple(normalise_address(str(x)) if address else x for x in items)
    if isinstance(raw, (list, dict)):
        raise ValueError(f"{where}: op {op!r} needs a scalar value, got {raw!r}")
    if op == "regex":
        if not isinstance(raw, str):
            raise ValueError(f"{where}: regex value must be a string, got {raw!r}")
        pattern = render(raw, escape=True)
        try:
            return re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"{where}: bad regular expression {pattern!r}: {exc}") from exc
    if op in ("gt", "ge", "lt", "le"):
        value = render(raw)
        if _as_float(value) is None and not (isinstance(value, str) and _HHMM.match(value)):
            try:
                datetime.fromisoformat(str(value))
            except ValueError:
                raise ValueError(f"{where}: op {op!r} needs a number, 'HH:MM' or an ISO date, got {value!r}") \
                    from None
        return value
    if op == "path_outside":
        return _jail_path(str(render(raw)))
    value = render(raw)
    if op in ("startswith", "endswith", "not_endswith", "contains"):
        if not isinstance(value, str):
            raise ValueError(f"{where}: op {op!r} needs a string, got {value!r}")
    if address and isinstance(value, str):
        value = value.strip().lower() if op != "eq" and op != "neq" else normalise_address(value)
    return value
