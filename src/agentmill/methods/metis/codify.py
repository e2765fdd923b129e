"""Codifiers: plan → ``def run(api, **slots)`` source. Both take a :class:`CodifyRequest` only (no trajectory).

``CompileCodifier`` [R] maps each plan step one to one; ``list_all`` becomes a pagination loop iff a current fact
says the endpoint paginates (page size from the fact's ``page_limit_max``), and logical fields (``amount``) use the
current schema fact. The same compiler, driven by a run's literal page counts and field names, is the
``TrajectoryTranscriber`` of the ``code_naive`` baseline (:mod:`agentmill.methods.metis.baselines`)."""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from typing import Any, Protocol

from agentmill.core.sandbox import CodeRejected, SandboxPolicy
from agentmill.envs.appsim import SLOT_RE, Step, step_endpoints
from agentmill.methods.metis.records import CodifyRequest, Fact, ToolSource

TOOL_POLICY = SandboxPolicy(imports=("math", "re", "json", "datetime"))
"""Tools may import only math, re, json and datetime; the core policy forbids eval/exec/open/getattr … and
underscore attributes."""


def metis_check(source: str) -> None:
    """Metis's additions to the static policy: no attribute assignment (``x.y = …``) and exactly one top-level
    ``def run(api, **slots)`` — so one call cannot alter what the next call sees."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        targets = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        elif isinstance(node, ast.Delete):
            targets = node.targets
        for t in targets:
            for sub in ast.walk(t):
                if isinstance(sub, ast.Attribute) and isinstance(sub.ctx, (ast.Store, ast.Del)):
                    raise CodeRejected("attribute assignment is not allowed", getattr(node, "lineno", None))
    defs = [n for n in tree.body if not isinstance(n, (ast.Import, ast.Expr))]
    if len(defs) != 1 or not isinstance(defs[0], ast.FunctionDef) or defs[0].name != "run":
        raise CodeRejected("a tool is exactly one top-level 'def run(api, **slots)' (imports aside)",
                           getattr(defs[0], "lineno", None) if defs else None)
    a = defs[0].args
    if [x.arg for x in a.args] != ["api"] or a.kwarg is None:
        raise CodeRejected("the tool's signature must be run(api, **slots)", defs[0].lineno)


class Codifier(Protocol):
    def codify(self, request: CodifyRequest) -> ToolSource: ...


Pagination = Callable[[int, Step], tuple[str, int | None, int]]
"""(step index, step) → (``"loop"`` | ``"pages"``, page_limit or None, pages to fetch when ``"pages"``)."""
FieldMap = Callable[[str, str], tuple[str, float]]


def _var(name: str) -> str:
    return "v_" + re.sub(r"\W", "_", name)


def _expr(value: Any, item: bool = False) -> str:
    """Python expression for a step argument (literal, slot ref, result ref, ``$item`` ref)."""
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(_expr(v, item) for v in value) + "]"
    if not isinstance(value, str):
        return repr(value)
    if value.startswith("$"):
        head, *path = value[1:].split(".")
        out = "item" if head == "item" else _var(head)
        for p in path:
            out += f"[{int(p)}]" if p.isdigit() else f"[{p!r}]"
        return out
    m = SLOT_RE.fullmatch(value)
    if m:
        base = f"slots[{m.group(1)!r}]"
        return base if m.group(2) is None else f"month_{m.group(2)}({base})"
    if SLOT_RE.search(value):
        parts, pos = [], 0
        for mm in SLOT_RE.finditer(value):
            if mm.start() > pos:
                parts.append(repr(value[pos:mm.start()]))
            parts.append(f"str({_expr(mm.group(0))})")
            pos = mm.end()
        if pos < len(value):
            parts.append(repr(value[pos:]))
        return " + ".join(parts)
    return repr(value)


def _get(var: str, endpoint: str, logical: str, fields: FieldMap) -> str:
    name, scale = fields(endpoint, logical)
    if scale != 1.0:
        return f"round({var}[{name!r}] * {scale!r}, 2)"
    return f"{var}[{name!r}]"


def compile_steps(steps: tuple[Step, ...], *, pagination: Pagination, fields: FieldMap,
                  header: str = "") -> str:
    """The source of ``def run(api, **slots)`` executing ``steps``."""
    L = [f"# {line}" for line in header.splitlines()] + ["def run(api, **slots):"]
    body: list[str] = []
    uses_month = any(isinstance(v, str) and re.search(r"\.(start|end)\}", v)
                     for s in steps for _, v in s.args)
    if uses_month:
        body += ["def month_start(m):", "    y, mo = str(m).split('-')[:2]", "    return y + '-' + mo + '-01'",
                 "def month_end(m):", "    y, mo = (int(x) for x in str(m).split('-')[:2])",
                 "    days = [31, 29 if (y % 4 == 0 and y % 100 != 0) or y % 400 == 0 else 28, 31, 30, 31, 30, 31,"
                 " 31, 30, 31, 30, 31][mo - 1]",
                 "    return str(y) + '-' + str(mo).zfill(2) + '-' + str(days)"]
    src_of: dict[str, str] = {}
    answer = "None"
    for i, s in enumerate(steps):
        if s.op == "login":
            body.append(f"api.call('auth', 'login', app={s.endpoint!r})")
        elif s.op in ("call", "mutate"):
            app, ep = s.endpoint.split(".")
            args = "".join(f", {k}={_expr(v)}" for k, v in s.args)
            line = f"api.call({app!r}, {ep!r}{args})"
            if s.out:
                body.append(f"{_var(s.out)} = {line}")
                src_of[s.out] = s.endpoint
            else:
                body.append(line)
        elif s.op == "list_all":
            app, ep = s.endpoint.split(".")
            mode, limit, pages = pagination(i, s)
            args = "".join(f", {k}={_expr(v)}" for k, v in s.args)
            lim = f", page_limit={limit}" if limit is not None else ""
            out = _var(s.out)
            if mode == "loop":
                body += [f"{out} = []", "page = 0", "while True:",
                         f"    r = api.call({app!r}, {ep!r}{args}, page_index=page{lim})",
                         f"    {out}.extend(r['items'])", "    if r['next_page'] is None:", "        break",
                         "    page = r['next_page']"]
            else:
                body += [f"{out} = []"] + [f"{out}.extend(api.call({app!r}, {ep!r}{args}, page_index={p}{lim})"
                                           f"['items'])" for p in range(max(1, pages))]
            src_of[s.out] = s.endpoint
        elif s.op == "filter":
            ep = src_of.get(s.src, "")
            g = _get("it", ep, s.field, fields)
            rhs = _expr(s.value)
            cond = {"==": f"{g} == {rhs}", "<": f"{g} < {rhs}", ">": f"{g} > {rhs}",
                    "contains": f"{rhs} in {g}"}[s.cmp]
            body.append(f"{_var(s.out)} = [it for it in {_var(s.src)} if {cond}]")
            src_of[s.out] = ep
        elif s.op == "aggregate":
            ep = src_of.get(s.src, "")
            v = _var(s.src)
            g = _get("it", ep, s.field, fields) if s.field else ""
            o = _var(s.out)
            if s.cmp == "count":
                body.append(f"{o} = len({v})")
            elif s.cmp == "values":
                body.append(f"{o} = sorted(set({g} for it in {v}))")
            elif s.cmp == "argmax":
                body.append(f"{o} = max({v}, key=lambda it: {g}) if {v} else None")
                src_of[s.out] = ep
            elif s.cmp == "sum":
                body.append(f"{o} = round(sum({g} for it in {v}), 2)")
            else:
                body.append(f"{o} = {s.cmp}([{g} for it in {v}]) if {v} else None")
        elif s.op == "for_each":
            assert s.each is not None
            app, ep = s.each.endpoint.split(".")
            args = "".join(f", {k}={_expr(v, True)}" for k, v in s.each.args)
            body += [f"for item in {_var(s.src)}:", f"    api.call({app!r}, {ep!r}{args})"]
        elif s.op == "answer":
            answer = _expr(s.value)
    body.append(f"return {answer}")
    return "\n".join(L + ["    " + b for b in body]) + "\n"


def fact_value(facts: tuple[Fact, ...], subject: str, key: str) -> Any:
    for f in facts:
        if f.subject == subject and f.key == key and f.superseded_by is None:
            return f.value
    return None


class CompileCodifier:
    """The LLM-free codifier [R]: compiles the plan with the request's current facts. Counts one virtual codifier
    call per request, with tokens = (request text + source) / 4."""

    name = "compile"

    def codify(self, request: CodifyRequest) -> ToolSource:
        facts = request.facts

        def pagination(i: int, s: Step) -> tuple[str, int | None, int]:
            if fact_value(facts, s.endpoint, "paginates"):
                return "loop", fact_value(facts, s.endpoint, "page_limit_max"), 0
            return "pages", fact_value(facts, s.endpoint, "page_limit_max"), 1

        def fields(ep: str, logical: str) -> tuple[str, float]:
            v = fact_value(facts, ep, f"field:{logical}")
            return (v["name"], float(v["scale"])) if isinstance(v, dict) else (logical, 1.0)

        src = compile_steps(request.plan_steps, pagination=pagination, fields=fields,
                            header=f"tool for pattern: {request.pattern_key}")
        return ToolSource(src, "run", tuple(step_endpoints(request.plan_steps)))


def render_codify_prompt(request: CodifyRequest) -> str:
    """The request as the LM codifier sees it (JSON, so a scripted responder can read it back)."""
    import json

    body = {"pattern_key": request.pattern_key, "signature": [list(x) for x in request.signature],
            "plan_steps": [s.to_dict() for s in request.plan_steps],
            "facts": [{"subject": f.subject, "key": f.key, "value": f.value} for f in request.facts]}
    return ("ROLE: codifier\nWrite one Python function `def run(api, **slots)` that executes the plan using only "
            "api.call(app, endpoint, **args); imports: math, re, json, datetime only; no attribute assignment.\n"
            "REQUEST: " + json.dumps(body, sort_keys=True))


class LMCodifier:
    """The LM writes the tool from the rendered :class:`CodifyRequest` (never a trajectory). Its source goes through
    the static policy in the validator's sandbox runs; a source that does not compile or breaks the policy fails
    validation (each replay raises), so it is rejected and a pitfall is written."""

    name = "lm"

    def __init__(self, lm) -> None:
        from agentmill.lm.base import GenerateConfig

        self.lm = lm
        self.gen = GenerateConfig(max_new_tokens=1200, temperature=0.0)
        self.calls = 0

    def codify(self, request: CodifyRequest) -> ToolSource:
        self.calls += 1
        out = self.lm.generate([render_codify_prompt(request)], self.gen)[0].text
        m = re.search(r"```(?:python)?\n(.*?)```", out, flags=re.S)
        return ToolSource(m.group(1) if m else out, "run", tuple(step_endpoints(request.plan_steps)))
