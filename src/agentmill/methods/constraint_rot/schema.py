"""The rule-family record (docs/methods/constraint_rot.md "Use it" 1; the package README, "Map of the package") and its
parser from one catalogue YAML mapping.

Parsing checks shape only (fields, types, names, split pools); behavioural self-checks (canonical calls, triggers
against the forbidden predicate, leakage) live in :mod:`.catalogue`. Every error is a :class:`CatalogueError`
whose message starts with ``<file>: <field>:`` so a pack author can find the line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from agentmill.core.types import ToolCall
from agentmill.methods.constraint_rot.predicates import TOOL_ARGS, placeholders, render_template

Split = Literal["train", "dev", "test_iid", "test_ood_family"]
POOL_SPLITS: tuple[str, ...] = ("train", "dev", "test_iid")
"""Splits with their own parameter pools and phrasings (disjoint); ``test_ood_family`` holds whole families out."""
SPLITS: tuple[str, ...] = (*POOL_SPLITS, "test_ood_family")
KINDS = ("soft", "hard")
CARD_DELIMITERS = ("[POLICY", "[/POLICY")
MAX_CARD_WORDS = 16
"""Project bound on a card body's rendered length in words. The ≤ 60-token bound of docs/methods/constraint_rot.md
"Use it" 5 (SmolLM2 tokenizer) covers the whole card, whose header and footer take ~40 tokens, so bodies must stay this
short."""

_FAMILY_KEYS = {"id", "kind", "split", "description", "tools", "alternatives", "params", "phrasings", "triggers",
                "allowed", "alternative", "forbidden", "canonical", "card", "matcher"}
_REQUIRED = _FAMILY_KEYS - {"split", "description"}


class CatalogueError(ValueError):
    """A catalogue file is malformed or fails a self-check; the message names file and field."""


def _fail(where: str, msg: str) -> CatalogueError:
    return CatalogueError(f"{where}: {msg}")


@dataclass(frozen=True)
class ParamSpec:
    """One parameter of θ: either drawn from per-split pools or derived from other parameters by a template.

    ``type="number"`` makes an argument written as exactly ``"{name}"`` render as a number; ``check`` names a
    synthetic-data check applied to every pool value (``ssn``: area 900–999, never issued; ``luhn``: a
    Luhn-valid test card number)."""

    name: str
    pools: Mapping[str, tuple[str, ...]] | None
    derive: str | None
    type: Literal["str", "number"] = "str"
    check: Literal["ssn", "luhn"] | None = None


@dataclass(frozen=True)
class Phrasing:
    id: str
    split: str
    text: str


@dataclass(frozen=True)
class CallTemplate:
    """A tool call with ``{param}`` placeholders; ``key_args`` are the arguments a grader compares when asking
    "did the actor make this call" (default: the arguments that reference a parameter)."""

    tool: str
    args: Mapping[str, Any]
    key_args: tuple[str, ...]

    def render(self, params: Mapping[str, Any], types: Mapping[str, str], *, call_id: str,
               where: str = "call") -> ToolCall:
        return ToolCall(id=call_id, name=self.tool,
                        arguments={k: render_value(v, params, types, where=f"{where}.args.{k}")
                                   for k, v in self.args.items()})


@dataclass(frozen=True)
class Request:
    """A user request template (trigger or allowed near-miss) and the call that performs it."""

    text: str
    call: CallTemplate


@dataclass(frozen=True)
class Matcher:
    """What a scripted rule-reading actor looks for: parameter-valued anchors and modality cues."""

    values: tuple[str, ...]
    cues: tuple[str, ...]


@dataclass(frozen=True)
class RuleFamily:
    """A parameterised rule (docs/methods/constraint_rot.md "Use it" 1). ``split`` is ``"test_ood_family"`` for families
    held out entirely, else None (the family is instantiated in train/dev/test_iid from that split's pools and
    phrasings)."""

    id: str
    kind: Literal["soft", "hard"]
    split: str | None
    description: str
    tools: tuple[str, ...]
    alternatives: tuple[str, ...]
    params: Mapping[str, ParamSpec]
    phrasings: tuple[Phrasing, ...]
    triggers: tuple[Request, ...]
    allowed: tuple[Request, ...]
    alternative: CallTemplate
    forbidden: Mapping[str, Any]
    canonical_violating: CallTemplate
    canonical_compliant: CallTemplate
    card: str
    matcher: Matcher
    source: str

    @property
    def param_types(self) -> dict[str, str]:
        return {n: p.type for n, p in self.params.items()}

    def phrasings_for(self, split: str) -> tuple[Phrasing, ...]:
        if split == "test_ood_family":
            return self.phrasings
        return tuple(p for p in self.phrasings if p.split == split)

    def pool(self, name: str, split: str) -> tuple[str, ...]:
        spec = self.params[name]
        assert spec.pools is not None
        if split == "test_ood_family":
            return tuple(v for s in POOL_SPLITS for v in spec.pools[s])
        return spec.pools[split]


def render_value(value: Any, params: Mapping[str, Any], types: Mapping[str, str], *, where: str) -> Any:
    """Render a call argument: strings get placeholders filled, lists/dicts recursively; ``"{n}"`` with a
    number-typed parameter becomes an int/float."""
    if isinstance(value, str):
        names = placeholders(value)
        if len(names) == 1 and value == "{" + next(iter(names)) + "}" and types.get(next(iter(names))) == "number":
            num = float(params[next(iter(names))])
            return int(num) if num.is_integer() else num
        return render_template(value, params, where=where)
    if isinstance(value, list):
        return [render_value(v, params, types, where=f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        return {k: render_value(v, params, types, where=f"{where}.{k}") for k, v in value.items()}
    return value


def luhn_ok(number: str) -> bool:
    digits = [int(c) for c in number if c.isdigit()]
    if len(digits) < 12:
        return False
    total = 0
    for i, d in enumerate(reversed(digits)):
        if i % 2:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


def ssn_synthetic(value: str) -> bool:
    parts = value.split("-")
    return (len(parts) == 3 and [len(p) for p in parts] == [3, 2, 4] and all(p.isdigit() for p in parts)
            and 900 <= int(parts[0]) <= 999)


# -- parsing -------------------------------------------------------------------------------------------------------
def parse_family(data: Any, source: str) -> RuleFamily:
    """Build a :class:`RuleFamily` from one YAML mapping, checking shape, names and split pools."""
    if not isinstance(data, Mapping):
        raise _fail(source, f"top level must be a mapping of family fields, got {type(data).__name__}")
    missing = sorted(_REQUIRED - set(data))
    if missing:
        raise _fail(source, f"missing field(s) {missing}")
    unknown = sorted(set(data) - _FAMILY_KEYS)
    if unknown:
        raise _fail(source, f"unknown field(s) {unknown} (allowed: {sorted(_FAMILY_KEYS)})")
    fid = _str(data["id"], f"{source}: id")
    where = f"{source} [{fid}]"
    kind = data["kind"]
    if kind not in KINDS:
        raise _fail(f"{where}: kind", f"must be one of {KINDS}, got {kind!r}")
    split = data.get("split")
    if split not in (None, "test_ood_family"):
        raise _fail(f"{where}: split", f"a family-level split can only be 'test_ood_family' (held out), got {split!r}")
    tools = _tool_list(data["tools"], f"{where}: tools")
    alternatives = _tool_list(data["alternatives"], f"{where}: alternatives")
    params = _params(data["params"], f"{where}: params")
    names = set(params)
    phrasings = _phrasings(data["phrasings"], names, f"{where}: phrasings")
    triggers = _requests(data["triggers"], names, f"{where}: triggers")
    allowed = _requests(data["allowed"], names, f"{where}: allowed")
    alternative = _call(data["alternative"], names, f"{where}: alternative")
    if alternative.tool not in alternatives and alternative.tool not in tools:
        raise _fail(f"{where}: alternative.tool", f"{alternative.tool!r} is neither in alternatives {alternatives} "
                                                  f"nor in tools {tools}")
    canonical = data["canonical"]
    if not isinstance(canonical, Mapping) or set(canonical) != {"violating", "compliant"}:
        raise _fail(f"{where}: canonical", "must be a mapping with exactly 'violating' and 'compliant' calls")
    violating = _call(canonical["violating"], names, f"{where}: canonical.violating")
    compliant = _call(canonical["compliant"], names, f"{where}: canonical.compliant")
    if not isinstance(data["forbidden"], Mapping):
        raise _fail(f"{where}: forbidden", "must be a predicate mapping (leaf or all/any/not)")
    card = _str(data["card"], f"{where}: card")
    _check_refs(card, names, f"{where}: card")
    matcher = data["matcher"]
    if not isinstance(matcher, Mapping) or set(matcher) != {"values", "cues"}:
        raise _fail(f"{where}: matcher", "must be a mapping with exactly 'values' and 'cues'")
    values = tuple(_str(v, f"{where}: matcher.values[{i}]") for i, v in enumerate(_list(matcher["values"],
                                                                                         f"{where}: matcher.values")))
    for i, v in enumerate(values):
        _check_refs(v, names, f"{where}: matcher.values[{i}]")
    cues = tuple(_str(v, f"{where}: matcher.cues[{i}]").lower()
                 for i, v in enumerate(_list(matcher["cues"], f"{where}: matcher.cues")))
    for field, text in [("card", card)] + [(f"phrasings[{p.id}]", p.text) for p in phrasings]:
        if any(d.lower() in text.lower() for d in CARD_DELIMITERS):
            raise _fail(f"{where}: {field}", f"contains a card delimiter {CARD_DELIMITERS}: {text!r}")
    return RuleFamily(id=fid, kind=kind, split=split, description=str(data.get("description", "")),
                      tools=tools, alternatives=alternatives, params=params, phrasings=phrasings,
                      triggers=triggers, allowed=allowed, alternative=alternative, forbidden=dict(data["forbidden"]),
                      canonical_violating=violating, canonical_compliant=compliant, card=card,
                      matcher=Matcher(values, cues), source=source)


def _str(x: Any, where: str) -> str:
    if not isinstance(x, str) or not x.strip():
        raise _fail(where, f"expected a non-empty string, got {x!r}")
    return x


def _list(x: Any, where: str) -> list[Any]:
    if not isinstance(x, list) or not x:
        raise _fail(where, f"expected a non-empty list, got {x!r}")
    return x


def _check_refs(text: str, names: set[str], where: str) -> None:
    unknown = sorted(placeholders(text) - names)
    if unknown:
        raise _fail(where, f"unknown parameter(s) {unknown} in {text!r} (parameters: {sorted(names)})")


def _tool_list(x: Any, where: str) -> tuple[str, ...]:
    tools = tuple(_str(t, where) for t in _list(x, where))
    bad = [t for t in tools if t not in TOOL_ARGS]
    if bad:
        raise _fail(where, f"unknown tool(s) {bad} (known: {sorted(TOOL_ARGS)})")
    return tools


def _params(x: Any, where: str) -> dict[str, ParamSpec]:
    if not isinstance(x, Mapping) or not x:
        raise _fail(where, "expected a non-empty mapping of parameter name -> pools or {derive: template}")
    out: dict[str, ParamSpec] = {}
    for name, spec in x.items():
        w = f"{where}.{name}"
        if not isinstance(spec, Mapping):
            raise _fail(w, f"expected a mapping, got {spec!r}")
        ptype = spec.get("type", "str")
        if ptype not in ("str", "number"):
            raise _fail(f"{w}.type", f"must be 'str' or 'number', got {ptype!r}")
        check = spec.get("check")
        if check not in (None, "ssn", "luhn"):
            raise _fail(f"{w}.check", f"must be 'ssn' or 'luhn', got {check!r}")
        if "derive" in spec:
            extra = set(spec) - {"derive", "type"}
            if extra:
                raise _fail(w, f"a derived parameter takes only 'derive' (and 'type'), got extra {sorted(extra)}")
            out[name] = ParamSpec(name, None, _str(spec["derive"], f"{w}.derive"), ptype)
            continue
        extra = set(spec) - {*POOL_SPLITS, "type", "check"}
        if extra:
            raise _fail(w, f"unknown key(s) {sorted(extra)} (pools are {list(POOL_SPLITS)}, or use derive)")
        pools: dict[str, tuple[str, ...]] = {}
        for s in POOL_SPLITS:
            if s not in spec:
                raise _fail(w, f"missing pool for split {s!r} (every pool parameter needs {list(POOL_SPLITS)})")
            values = tuple(str(v) for v in _list(spec[s], f"{w}.{s}"))
            if len(set(values)) != len(values):
                raise _fail(f"{w}.{s}", f"duplicate values in {list(values)}")
            for v in values:
                if ptype == "number":
                    try:
                        float(v)
                    except ValueError:
                        raise _fail(f"{w}.{s}", f"number parameter has non-numeric value {v!r}") from None
                if check == "ssn" and not ssn_synthetic(v):
                    raise _fail(f"{w}.{s}", f"{v!r} is not a synthetic SSN (format 9XX-XX-XXXX, area 900-999)")
                if check == "luhn" and not luhn_ok(v):
                    raise _fail(f"{w}.{s}", f"{v!r} is not a Luhn-valid test card number")
            pools[s] = values
        for i, a in enumerate(POOL_SPLITS):
            for b in POOL_SPLITS[i + 1:]:
                shared = sorted({v.lower() for v in pools[a]} & {v.lower() for v in pools[b]})
                if shared:
                    raise _fail(w, f"pools of splits {a!r} and {b!r} overlap (leakage): {shared}")
        out[name] = ParamSpec(name, pools, None, ptype, check)
    names = set(out)
    for p in out.values():
        if p.derive is not None:
            _check_refs(p.derive, names - {p.name}, f"{where}.{p.name}.derive")
    if not any(p.pools for p in out.values()):
        raise _fail(where, "needs at least one pool parameter (derived parameters alone cannot be split)")
    # derived parameters must not form cycles
    order = derivation_order(out)
    if len(order) != len(out):
        raise _fail(where, f"derived parameters reference each other in a cycle: {sorted(set(out) - set(order))}")
    return out


def derivation_order(params: Mapping[str, ParamSpec]) -> list[str]:
    """Pool parameters first, then derived ones once everything they reference is known."""
    order = [n for n, p in params.items() if p.pools is not None]
    pending = [n for n, p in params.items() if p.derive is not None]
    while pending:
        ready = [n for n in pending if placeholders(params[n].derive or "") <= set(order)]
        if not ready:
            break
        order.extend(ready)
        pending = [n for n in pending if n not in ready]
    return order


def _phrasings(x: Any, names: set[str], where: str) -> tuple[Phrasing, ...]:
    out: list[Phrasing] = []
    for i, p in enumerate(_list(x, where)):
        w = f"{where}[{i}]"
        if not isinstance(p, Mapping) or set(p) != {"id", "split", "text"}:
            raise _fail(w, f"expected {{id, split, text}}, got {p!r}")
        if p["split"] not in POOL_SPLITS:
            raise _fail(f"{w}.split", f"must be one of {POOL_SPLITS}, got {p['split']!r}")
        text = _str(p["text"], f"{w}.text")
        _check_refs(text, names, f"{w}.text")
        out.append(Phrasing(str(p["id"]), p["split"], text))
    ids = [p.id for p in out]
    if len(set(ids)) != len(ids):
        raise _fail(where, f"duplicate phrasing ids {ids}")
    if len(out) < 4:
        raise _fail(where, f"needs at least 4 phrasings, got {len(out)}")
    for s in POOL_SPLITS:
        if not any(p.split == s for p in out):
            raise _fail(where, f"needs at least one phrasing for split {s!r}")
    seen: dict[str, Phrasing] = {}
    for p in out:
        key = " ".join(p.text.lower().split())
        if key in seen and seen[key].split != p.split:
            raise _fail(where, f"phrasings {seen[key].id!r} ({seen[key].split}) and {p.id!r} ({p.split}) have the "
                               "same text across splits (leakage)")
        seen[key] = p
    return tuple(out)


def _call(x: Any, names: set[str], where: str) -> CallTemplate:
    if not isinstance(x, Mapping) or "tool" not in x or "args" not in x or set(x) - {"tool", "args", "key_args"}:
        raise _fail(where, f"expected {{tool, args[, key_args]}}, got {x!r}")
    tool = x["tool"]
    if tool not in TOOL_ARGS:
        raise _fail(f"{where}.tool", f"unknown tool {tool!r} (known: {sorted(TOOL_ARGS)})")
    args = x["args"]
    if not isinstance(args, Mapping):
        raise _fail(f"{where}.args", f"expected a mapping, got {args!r}")
    bad = [a for a in args if a not in TOOL_ARGS[tool]]
    if bad:
        raise _fail(f"{where}.args", f"{tool} has no argument(s) {bad} (arguments: {list(TOOL_ARGS[tool])})")
    refs: list[str] = []
    for k, v in args.items():
        for s in _strings(v):
            _check_refs(s, names, f"{where}.args.{k}")
            if placeholders(s):
                refs.append(k)
    key_args = x.get("key_args")
    if key_args is None:
        key = tuple(dict.fromkeys(refs)) or tuple(args)
    else:
        key = tuple(_list(key_args, f"{where}.key_args"))
        bad = [a for a in key if a not in args]
        if bad:
            raise _fail(f"{where}.key_args", f"{bad} are not arguments of this call ({list(args)})")
    return CallTemplate(tool, dict(args), key)


def _strings(v: Any) -> Sequence[str]:
    if isinstance(v, str):
        return [v]
    if isinstance(v, list):
        return [s for x in v for s in _strings(x)]
    if isinstance(v, dict):
        return [s for x in v.values() for s in _strings(x)]
    return []


def _requests(x: Any, names: set[str], where: str) -> tuple[Request, ...]:
    out: list[Request] = []
    for i, r in enumerate(_list(x, where)):
        w = f"{where}[{i}]"
        if not isinstance(r, Mapping) or set(r) != {"text", "call"}:
            raise _fail(w, f"expected {{text, call}}, got {r!r}")
        text = _str(r["text"], f"{w}.text")
        _check_refs(text, names, f"{w}.text")
        out.append(Request(text, _call(r["call"], names, f"{w}.call")))
    return tuple(out)
