"""The localization loop: one LM, four read-only tools, recovery rules, a case file at the end [C].

Reads top to bottom in execution order (one turn per pass of the ``for`` loop):

1. the first user turn holds the issue and the filtered repository tree; an issue that does not fit the context
   budget is an error before anything runs;
2. history is truncated first-and-recent (system prompt and first turn always kept) to fit the window;
3. three identical consecutive tool calls inject a "you are repeating yourself" turn;
4. a prompt that does not fit ``context_safety_margin`` of the window ends the run (``context_length_exceeded``);
5. the last step injects an instruction to commit to findings and locations now;
6. a reply that hits the generation cap is retried (≤ ``max_retries``) with a request for brevity;
7. ``<tool_call>`` -> run the tool, its output is the next user turn; ``<findings>`` + ``<locations>`` ->
   parse and validate the case file -> success. Locations are accepted only after one successful ``view_file``;
   the first turn must be a tool call.

Every exit is labelled ``success | failed`` + a reason (``context_length_exceeded``, ``max_steps_exceeded``,
``response_truncated``, ``no_parsable_action``, ``lm_error``). Recovery text and the system prompt are
agentmill's paraphrase of the recipe's behaviour [R].
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentmill.core.types import Message
from agentmill.lm.base import GenerateConfig
from agentmill.methods.sherloc.casefile import CaseFileError, parse_final, validate
from agentmill.methods.sherloc.config import SherlocConfig
from agentmill.methods.sherloc.snapshot import RepoSnapshot
from agentmill.methods.sherloc.tools import RangeSet, Tools, approx_tokens

PROMPT_VERSION = "sherloc-agentmill-1"
SYSTEM = """You localize the code that must change to resolve an issue in a repository you can only read.
Tools (call exactly one per turn as <tool_call>{{"tool": NAME, ...arguments}}</tool_call>):
- repo_tree: {{"tool": "repo_tree"}}
- view_file: {{"tool": "view_file", "path": "pkg/mod.py", "view_range": [start, end]}} (end -1 = end of file)
- codebase_search: {{"tool": "codebase_search", "query": "literal text"}}
- connected_tree: {{"tool": "connected_tree", "file": "pkg/mod.py"}} (omit file for a summary)
Think first inside <think>...</think>. Your first turn must be a tool call. After viewing the code, answer with
{final}
<locations>
path/to/file.py:L<start>-L<end>
</locations>
Be exhaustive: list every range that must change, one per line."""
FINDINGS = """<findings>
- Location explanation: why this spot must change
- Root cause: what is wrong
- Solution idea: how to fix it (no code)
- Dependencies: other locations that must change together
- Testing impact: tests to update or add
</findings>"""
EXAMPLE = [Message("user", "Issue: add(2, 2) returns 0.\n\nRepository tree:\ncalc/\n  ops.py"),
           Message("assistant", '<think>Look at ops.py.</think>\n<tool_call>{"tool": "view_file", "path": '
                                '"calc/ops.py"}</tool_call>'),
           Message("user", "File: calc/ops.py (lines 1-2)\n   1: def add(a, b):\n   2:     return a - b"),
           Message("assistant", "<think>add subtracts.</think>\n<findings>\n- Location explanation: add uses -\n"
                                "- Root cause: wrong operator\n- Solution idea: use +\n- Dependencies: none\n"
                                "- Testing impact: tests of add\n</findings>\n<locations>\ncalc/ops.py:L2-L2\n"
                                "</locations>")]
"""The one worked exchange prepended for small models (SmolLM2 follows a tool-call format only with one) [R]."""
REPEAT = "You are repeating yourself: the last {n} tool calls were identical. Try a different tool or argument."
FINAL = ("This is your last turn. Commit now: give your findings and <locations> (path:L<start>-L<end> lines), "
         "no more tool calls.")
BREVITY = "Your reply was cut off at the length limit. Answer again, much more briefly."
NO_PARSE = ("No tool call or final answer found. Reply with one <tool_call>{...}</tool_call>, or with <findings> "
            "and <locations>.")
NEED_VIEW = "Locations are accepted only after you have viewed the code with view_file. Call a tool first."
TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.S)
THINK = re.compile(r"<think>.*?(?:</think>|$)", re.S)


@dataclass
class LocalizationResult:
    case_file: dict[str, Any] | None
    messages: tuple[Message, ...]
    status: str
    reason: str
    turns: int = 0
    tool_calls: Counter = field(default_factory=Counter)
    tokens_in: int = 0
    tokens_out: int = 0
    tool_output_tokens: int = 0
    wall_s: float = 0.0
    viewed: RangeSet = field(default_factory=RangeSet)
    interventions: Counter = field(default_factory=Counter)
    """forced_final, length_retries, loop_warnings, no_parse, rejected_final, invalid_case_file."""
    reasoning_turns: int = 0
    validation_flags: list[str] = field(default_factory=list)

    @property
    def clean_exit(self) -> bool:
        iv = self.interventions
        return self.status == "success" and not (iv["forced_final"] or iv["length_retries"] or iv["loop_warnings"])

    def trace(self) -> dict[str, Any]:
        return {"status": self.status, "reason": self.reason, "turns": self.turns,
                "tool_calls": dict(self.tool_calls), "tokens_in": self.tokens_in, "tokens_out": self.tokens_out,
                "tool_output_tokens": self.tool_output_tokens, "wall_s": round(self.wall_s, 3)}


def find_tool_call(text: str, implicit: bool) -> Any | None:
    """The JSON payload of a ``<tool_call>`` (or, with ``implicit``, the first bare JSON object), else None."""
    m = TOOL_CALL.search(text)
    cands = [m.group(1)] if m else []
    dec = json.JSONDecoder()
    for src in cands:
        try:
            obj, _ = dec.raw_decode(src.strip())
            return obj
        except ValueError:
            pass
    if implicit or m:
        body = m.group(1) if m else text
        for i, ch in enumerate(body):
            if ch == "{":
                try:
                    obj, _ = dec.raw_decode(body[i:])
                except ValueError:
                    continue
                if isinstance(obj, dict):
                    return obj
    return None


def truncate_history(messages: list[Message], budget: int, count: Callable[[str], int]) -> list[Message]:
    """Keep the head (system + first user turn, and the example when present) and the most recent turns that fit."""
    head_n = next((i + 1 for i, m in enumerate(messages) if m.role == "user" and not m.meta.get("example")), 2)
    head, rest = messages[:head_n], messages[head_n:]
    used = sum(count(m.content) for m in head)
    kept: list[Message] = []
    for m in reversed(rest):
        c = count(m.content)
        if used + c > budget:
            break
        kept.append(m)
        used += c
    return head + kept[::-1]


def localize(issue: str, snapshot: RepoSnapshot, lm: Any, cfg: SherlocConfig = SherlocConfig(), *,
             instance_id: str = "", repo_name: str = "", seed: int | None = None, one_shot: bool = False,
             context_window: int | None = None, tokenizer: Callable[[str], int] = approx_tokens) -> LocalizationResult:
    """Run the loop on one issue; never raises for what the model does (every exit is labelled)."""
    t0 = time.perf_counter()
    tools = Tools(snapshot, cfg, tokenizer)
    window = min(cfg.max_seq_length, context_window or cfg.max_seq_length)
    budget = int(cfg.context_safety_margin * window)
    system = SYSTEM.format(final=FINDINGS + "\nthen" if cfg.findings else "")
    first = f"Issue:\n{issue.strip()}\n\nRepository tree:\n{tools.repo_tree().output}"
    msgs: list[Message] = [Message("system", system)]
    if one_shot:
        msgs += [Message(m.role, m.content, meta={"example": True}) for m in EXAMPLE]
    msgs.append(Message("user", first))
    head = sum(tokenizer(m.content) for m in msgs)
    reserve = min(cfg.max_new_tokens, window // 4)
    if head + reserve > budget:
        raise ValueError(f"the issue and repository tree need {head} tokens; with {reserve} reserved for the reply "
                         f"they exceed the context budget of {budget} tokens ({cfg.context_safety_margin} of "
                         f"{window})")
    res = LocalizationResult(None, (), "failed", "max_steps_exceeded")
    res.viewed = tools.viewed
    last_calls: list[str] = []
    viewed_ok = False
    no_parse = 0
    gen = GenerateConfig(max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature, top_p=cfg.top_p,
                         stop=("</tool_call>", "</locations>"))
    for step in range(1, cfg.total_steps + 1):
        if step == cfg.total_steps:
            msgs.append(Message("user", FINAL))
            res.interventions["forced_final"] += 1
        prompt = truncate_history(msgs, budget - reserve, tokenizer)
        p_tokens = sum(tokenizer(m.content) for m in prompt)
        if p_tokens + reserve > budget or prompt[-1] is not msgs[-1]:  # the newest turn itself does not fit
            res.status, res.reason = "failed", "context_length_exceeded"
            break
        text, finish = "", "eos"
        for attempt in range(cfg.max_retries + 1):
            try:
                out = lm.generate([prompt], GenerateConfig(**{**gen.__dict__, "seed": None if seed is None
                                                               else seed * 1000 + step * 10 + attempt}))[0]
            except Exception as e:  # noqa: BLE001 - a failing backend ends this run, labelled
                res.status, res.reason = "failed", f"lm_error: {type(e).__name__}: {str(e)[:200]}"
                res.turns = step
                res.messages = tuple(msgs)
                res.wall_s = time.perf_counter() - t0
                return res
            res.tokens_in += p_tokens
            text, finish = out.text, out.finish_reason
            res.tokens_out += out.completion_tokens or tokenizer(text)
            if finish == "stop":  # the stop string was cut: put the closing tag back
                text += "</locations>" if "<locations>" in text and "</locations>" not in text else (
                    "</tool_call>" if "<tool_call>" in text and "</tool_call>" not in text else "")
            if finish != "length":
                break
            if attempt < cfg.max_retries:
                res.interventions["length_retries"] += 1
                prompt = prompt + [Message("assistant", text), Message("user", BREVITY)]
        res.turns = step
        if "<think>" in text or out.meta.get("reasoning"):
            res.reasoning_turns += 1
        if finish == "length":
            res.status, res.reason = "failed", "response_truncated"
            msgs.append(Message("assistant", text))
            break
        msgs.append(Message("assistant", THINK.sub("", text).strip() if cfg.remove_thinking else text))
        body = THINK.sub("", text)
        if "<locations>" in body.lower():
            if not viewed_ok:
                res.interventions["rejected_final"] += 1
                msgs.append(Message("user", NEED_VIEW))
                continue
            try:
                cf = parse_final(body, instance_id=instance_id, repo_name=repo_name, commit=snapshot.commit,
                                 tree_hash=snapshot.tree_hash, issue=issue)
                cf, flags = validate(cf, snapshot, max_locations=cfg.max_locations)
            except (CaseFileError, ValueError) as e:
                res.interventions["invalid_case_file"] += 1
                msgs.append(Message("user", f"Your final answer could not be used: {str(e)[:600]}. Fix it."))
                continue
            res.case_file, res.validation_flags = cf, flags
            res.status, res.reason = "success", "final_answer"
            break
        payload = find_tool_call(body, cfg.implicit_tool_detection)
        if payload is None:
            no_parse += 1
            res.interventions["no_parse"] += 1
            if no_parse > cfg.max_retries:
                res.status, res.reason = "failed", "no_parsable_action"
                break
            msgs.append(Message("user", NO_PARSE))
            continue
        no_parse = 0
        r = tools.call(payload)
        res.tool_calls[r.name] += 1
        res.tool_output_tokens += tools.calls[-1]["tokens"]
        if r.name == "view_file" and r.ok:
            viewed_ok = True
        key = json.dumps(payload, sort_keys=True, default=str)
        last_calls = (last_calls + [key])[-cfg.loop_threshold:]
        msgs.append(Message("user", r.content()))
        if len(last_calls) == cfg.loop_threshold and len(set(last_calls)) == 1:
            res.interventions["loop_warnings"] += 1
            msgs.append(Message("user", REPEAT.format(n=cfg.loop_threshold)))
            last_calls = []
    res.messages = tuple(msgs)
    res.wall_s = time.perf_counter() - t0
    if res.case_file is not None:
        res.case_file["trace"] = res.trace()
        res.case_file["provenance"] = {"lm": getattr(lm, "spec", "?"), "prompt_version": PROMPT_VERSION,
                                       "sampling": {"temperature": cfg.temperature, "top_p": cfg.top_p,
                                                    "max_new_tokens": cfg.max_new_tokens, "seed": seed},
                                       "tool_versions": "sherloc-tools-1"}
    return res
