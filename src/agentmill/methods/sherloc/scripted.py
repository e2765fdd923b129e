"""The offline arms, whose behaviour is known: a scripted localizer and a scripted repairer.

Neither is a stand-in for a model's competence; they exist so the loop, the case file, injection and the oracle
run end to end without an endpoint, and every row they produce is labelled with their name.

**Scripted localizer** (an ``LM`` that plays the loop's protocol): it reads identifiers from the issue (calls in the
failing assertions first), searches ``def <name>(`` for up to two of them, views each hit's function, then cites
each function's whole extent. It localizes a seeded bug iff the bug sits in a function the failing assertions
call by name (it searches ``def <name>`` for up to four names, until two definitions are found).

**Scripted repairer**: over a :class:`~agentmill.envs.pyrepo.RepairWorkspace`, it tries one-token edits from the
mutation catalogue on the lines of the cited ranges, in order, keeps the first that makes the issue's failing
tests pass, then submits. The catalogue is closed under inversion except ``return None`` (its original name is
unknown), so it resolves a seeded bug iff a cited range holds the mutated line, the bug is not a ``return None``,
and the fix is within ``max_attempts`` edits. Without a case file it has nothing to try and submits no edit.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agentmill.core.types import Message
from agentmill.lm.base import Completion, GenerateConfig, LMError

IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]{2,}")
CALL = re.compile(r"([A-Za-z_][A-Za-z0-9_]{2,})\s*\(")
FAILED = re.compile(r"^FAILED (\S+)", re.M)
HIT = re.compile(r"^(\S+\.py):(\d+)$", re.M)
VIEW_HEAD = re.compile(r"^File: (\S+) \(lines (\d+)-(\d+)\)", re.M)
NUMBERED = re.compile(r"^\s*(\d+): (.*)$")
STOP = frozenset("""assert self none true false return def class import from not and for while with the that this
isinstance len str int float list dict set tuple print range raise pytest raises where type object test equal
running suite gives failing more does support unsupported""".split())


def _useful(name: str) -> bool:
    low = name.lower()
    return low not in STOP and not low.startswith(("test", "assert")) and not name.endswith(("Error", "Exception"))


def issue_identifiers(issue: str) -> list[str]:
    """Identifiers the failing assertions call (in order), then the other identifiers of the ``E``/code lines."""
    body = "\n".join(ln for ln in issue.splitlines() if not ln.startswith("FAILED") and ":" not in ln[:40]
                     or ln.lstrip().startswith(("E ", "assert")))
    calls = [c for c in CALL.findall(body) if _useful(c)]
    rest = [c for c in IDENT.findall(body) if _useful(c)]
    out: list[str] = []
    for c in calls + rest:
        if c not in out:
            out.append(c)
    return out


def function_extent(numbered: list[tuple[int, str]], def_line: int) -> tuple[int, int]:
    """From a view's numbered lines: the ``def`` at ``def_line`` through its last indented line."""
    lines = dict(numbered)
    text = lines.get(def_line, "")
    indent = len(text) - len(text.lstrip())
    end = def_line
    for n in sorted(k for k in lines if k > def_line):
        t = lines[n]
        if t.strip() and len(t) - len(t.lstrip()) <= indent:
            break
        if t.strip():
            end = n
    return def_line, end


class ScriptedLocalizer:
    """A deterministic localizer speaking the loop's protocol (module docstring)."""

    spec = "scripted:sherloc-localizer"

    def __init__(self, max_names: int = 2, view_lines: int = 80, max_searches: int = 4) -> None:
        self.max_names, self.view_lines, self.max_searches = max_names, view_lines, max_searches
        self.calls = 0

    def logprobs(self, prompt: Any, continuation: str) -> np.ndarray:
        raise LMError("the scripted localizer has no log-probabilities")

    def generate(self, prompts: Sequence[Any], config: GenerateConfig = GenerateConfig()) -> list[Completion]:
        self.calls += 1
        return [Completion(self.reply(list(p)), "eos") for p in prompts]

    def reply(self, msgs: list[Message]) -> str:
        convo = [m for m in msgs if not m.meta.get("example") and m.role != "system"]
        issue = convo[0].content if convo else ""
        issue = issue.split("\n\nRepository tree:", 1)[0]
        outputs = [m.content for m in convo[1:] if m.role == "user"]
        done = [m.content for m in convo if m.role == "assistant"]
        names = issue_identifiers(issue)[: self.max_searches]
        searches = [f"def {n}" for n in names]
        n_search = sum('"codebase_search"' in d for d in done)
        final_now = bool(outputs) and outputs[-1].startswith("This is your last turn")
        hits: list[tuple[str, int]] = []
        for out in outputs:
            for path, ln in HIT.findall(out):
                if (path, int(ln)) not in hits and "/test" not in "/" + path:
                    hits.append((path, int(ln)))
        hits = hits[: self.max_names]
        if not final_now and n_search < len(searches) and len(hits) < self.max_names:
            return f'<think>Search for {names[n_search]}.</think>\n<tool_call>{{"tool": "codebase_search", ' \
                   f'"query": "{searches[n_search]}"}}</tool_call>'
        views = [m for m in outputs if m.startswith("File: ") or "\nFile: " in m[:200]]
        n_view = sum('"view_file"' in d for d in done)
        if not final_now and n_view < len(hits):
            path, ln = hits[n_view]
            return (f'<think>View {path} around line {ln}.</think>\n<tool_call>{{"tool": "view_file", "path": '
                    f'"{path}", "view_range": [{ln}, {ln + self.view_lines}]}}</tool_call>')
        locs = []
        for out in views:
            m = VIEW_HEAD.search(out)
            if not m:
                continue
            path = m.group(1)
            numbered = [(int(a), b) for a, b in (NUMBERED.match(x).groups() for x in out.splitlines()
                                                 if NUMBERED.match(x))]
            for hp, hl in hits:
                if hp == path and any(n == hl for n, _ in numbered):
                    s, e = function_extent(numbered, hl)
                    locs.append(f"{path}:L{s}-L{e}")
        body = "\n".join(dict.fromkeys(locs))
        names_txt = ", ".join(names) or "nothing"
        return ("<think>Cite the functions the failing tests call.</think>\n<findings>\n"
                f"- Location explanation: the failing assertions call {names_txt}\n"
                "- Root cause: unknown (scripted localizer)\n- Solution idea: inspect the cited function\n"
                "- Dependencies: none\n- Testing impact: the failing tests named in the issue\n</findings>\n"
                f"<locations>\n{body}\n</locations>")


@dataclass
class RepairOutcome:
    resolved: bool
    submitted: bool
    attempts: int
    test_runs: int
    edits: int
    wall_s: float
    turns_before_first_edit: int = 0
    notes: list[str] = field(default_factory=list)


def failing_tests(issue: str) -> list[str]:
    return FAILED.findall(issue)


def scripted_repair(ws: Any, locations: Sequence[tuple[str, int, int]] | None, issue: str, *,
                    max_attempts: int = 8) -> RepairOutcome:
    """Try catalogue edits inside ``locations`` until the issue's failing tests pass (module docstring)."""
    from agentmill.envs.pyrepo.mutate import mutations

    t0 = time.perf_counter()
    tests = failing_tests(issue)
    out = RepairOutcome(False, False, 0, 0, 0, 0.0)
    if not locations:
        out.notes.append("no locations: nothing to try; submitted no edit")
        out.wall_s = time.perf_counter() - t0
        return out
    for path, s, e in locations:
        if out.attempts >= max_attempts:
            break
        try:
            text = ws.read(path)
        except ValueError as e:  # JailError: a refused or missing path
            out.notes.append(f"cannot read {path}: {e}")
            continue
        lines = text.splitlines(keepends=True)
        for m in mutations(path, text):
            if not s <= m.line <= e or out.attempts >= max_attempts:
                continue
            out.attempts += 1
            lo, hi = max(0, m.line - 2), min(len(lines), m.line + 1)
            old = "".join(lines[lo:hi])
            new_text = m.apply(text)
            new = "".join(new_text.splitlines(keepends=True)[lo:hi])
            if not ws.edit(path, old, new).ok:
                continue
            out.edits += 1
            res = ws.run_tests(tests or None)
            out.test_runs += 1
            if res.ok and " 0 failed" in res.output and not res.output.startswith("0 passed"):
                sub = ws.submit()
                out.submitted, out.resolved = True, sub.resolved
                out.wall_s = time.perf_counter() - t0
                return out
            ws.edit(path, new, old)  # undo
    out.wall_s = time.perf_counter() - t0
    return out
