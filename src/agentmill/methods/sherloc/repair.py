"""The reference repair agent: an LM with tools over a pyrepo :class:`RepairWorkspace` (a harness, not a paper
method), used to measure what an injected case file does to repair.

Tools (the ``lm/chat_tools.py`` ``CALL name {json}`` protocol): ``view_file`` and ``codebase_search`` (sherloc's own
tools over a snapshot of the workspace, refreshed after each edit), ``edit(path, old, new)`` (exact search/replace
matching once), ``run_tests(ids?)`` and ``submit()``. At most ``max_steps`` turns; tokens are counted per turn. The
localization phase is the turns before the first successful edit. Injection prepends ``render(case_file, mode)``
to the first user message.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentmill.core.types import Message
from agentmill.lm.base import GenerateConfig
from agentmill.lm.chat_tools import Tool, ToolRequest, parse_tool_call, render_tools_prompt
from agentmill.methods.sherloc.casefile import render
from agentmill.methods.sherloc.config import SherlocConfig
from agentmill.methods.sherloc.snapshot import RepoSnapshot
from agentmill.methods.sherloc.tools import Tools, approx_tokens

_S = {"type": "string"}
TOOLS = (
    Tool("view_file", "Show a file (optionally lines [start, end]).",
         {"type": "object", "properties": {"path": _S, "view_range": {"type": "array", "items": {"type": "integer"}}},
          "required": ["path"]}),
    Tool("codebase_search", "Case-insensitive literal search over the code.",
         {"type": "object", "properties": {"query": _S}, "required": ["query"]}),
    Tool("edit", "Replace the exact text old (must occur once) with new in a source file.",
         {"type": "object", "properties": {"path": _S, "old": _S, "new": _S}, "required": ["path", "old", "new"]}),
    Tool("run_tests", "Run tests (node ids or files; none = the whole suite).",
         {"type": "object", "properties": {"ids": {"type": "array", "items": _S}}}),
    Tool("submit", "Submit the current code as the fix.", {"type": "object", "properties": {}}),
)
SYSTEM = "You fix a bug in a Python repository. Use the tools, then submit.\n" + render_tools_prompt(
    ToolRequest(TOOLS, "required"))


@dataclass
class RepairRun:
    resolved: bool
    submitted: bool
    status: str
    turns: int
    first_edit_turn: int | None
    tokens_in: list[int] = field(default_factory=list)
    tokens_out: list[int] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def localization_turns(self) -> int:
        return self.first_edit_turn - 1 if self.first_edit_turn else self.turns

    @property
    def localization_tokens(self) -> int:
        k = self.localization_turns
        return sum(self.tokens_in[:k]) + sum(self.tokens_out[:k])

    @property
    def total_tokens(self) -> int:
        return sum(self.tokens_in) + sum(self.tokens_out)


def repair(ws: Any, issue: str, lm: Any, *, case_file: Mapping[str, Any] | None = None, mode: str = "full",
           max_steps: int = 30, max_new_tokens: int = 512, temperature: float = 0.0, seed: int = 0,
           tokenizer: Callable[[str], int] = approx_tokens) -> RepairRun:
    """Run the agent on one workspace; never raises for what the model does."""
    t0 = time.perf_counter()
    names = [t.name for t in TOOLS]
    first = (render(case_file, mode) + "\n\n" if case_file is not None else "") + f"Issue:\n{issue.strip()}"
    msgs = [Message("system", SYSTEM), Message("user", first)]
    run = RepairRun(False, False, "max_steps_exceeded", 0, None)
    cfg = SherlocConfig(mode="product", max_tool_output_tokens=1500)
    tools = Tools(RepoSnapshot.from_mapping(ws.files()), cfg, tokenizer)
    for step in range(1, max_steps + 1):
        run.turns = step
        prompt_tokens = sum(tokenizer(m.content) for m in msgs)
        try:
            out = lm.generate([msgs], GenerateConfig(max_new_tokens=max_new_tokens, temperature=temperature,
                                                     seed=seed * 1000 + step))[0]
        except Exception as e:  # noqa: BLE001 - labelled exit
            run.status = f"lm_error: {type(e).__name__}"
            break
        run.tokens_in.append(out.prompt_tokens or prompt_tokens)
        run.tokens_out.append(out.completion_tokens or tokenizer(out.text))
        msgs.append(Message("assistant", out.text))
        parsed = parse_tool_call(out.text, names)
        if not parsed.calls:
            run.calls.append(f"no_call:{parsed.failure or 'text'}")
            msgs.append(Message("user", "Call exactly one tool: CALL <tool> <json-args>."))
            continue
        c = parsed.calls[0]
        a = c.arguments if isinstance(c.arguments, dict) else {}
        run.calls.append(c.name)
        if c.name == "submit":
            sub = ws.submit()
            run.resolved, run.submitted, run.status = sub.resolved, True, "submitted"
            break
        if c.name == "edit":
            r = ws.edit(str(a.get("path", "")), a.get("old"), a.get("new"))
            if r.ok:
                run.first_edit_turn = run.first_edit_turn or step
                tools = Tools(RepoSnapshot.from_mapping(ws.files()), cfg, tokenizer)
        elif c.name == "run_tests":
            ids = a.get("ids")
            r = ws.run_tests([str(i) for i in ids] if isinstance(ids, list) else None)
        else:
            r = tools.call({"tool": c.name, **a})
        msgs.append(Message("user", f"Tool result {c.name}:\n{r.content()}"))
    run.wall_s = time.perf_counter() - t0
    return run
