"""Scoring a model's output as a tool call, strict and lax side by side. Outputs are parsed, never executed.

Strict: the output holds ``<tool_call>`` … ``</tool_call>`` whose span (≤ 10 kB) parses with ``json.loads`` into an
object with ``name`` (str) and ``arguments`` (object): ``strict_format``; ``tool_exact``: name equals the gold
tool; ``args_exact``: arguments equal the gold after normalisation (strings casefolded and stripped, numbers as
floats).

Lax (E175 ``sweep_eval.score_response`` [P]): ``lax_format`` = the output contains ``<tool_call>`` and a
``"name": "…"`` match; ``lax_tool`` = that name (found anywhere) equals or is a substring, either way and
case-insensitively, of any tool listed in the prompt; ``overall`` ∈ {−1, 0, +1, +2} as E175 scores it: −1 no format,
0 format without a listed tool, +1 a listed tool that is not the gold one, +2 the gold tool.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MAX_SPAN = 10_000
_SPAN = re.compile(r"<tool_call>(.*?)</tool_call>", re.S)
_NAME = re.compile(r'"name"\s*:\s*"([^"]+)"')


@dataclass(frozen=True)
class ToolScore:
    strict_format: bool
    tool_exact: bool
    args_exact: bool
    lax_format: bool
    lax_tool: bool
    overall: int


def _norm(v: Any) -> Any:
    if isinstance(v, bool) or v is None:
        return v
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        return v.strip().casefold()
    if isinstance(v, Mapping):
        return {str(k).strip().casefold(): _norm(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_norm(x) for x in v]
    return v


def score_tool_call(text: str, *, gold_name: str, tools: Sequence[str],
                    gold_args: Mapping[str, Any] | None = None) -> ToolScore:
    """Strict and lax scores of ``text`` against the gold call and the listed ``tools``."""
    strict = tool = args = False
    m = _SPAN.search(text)
    if m and len(m.group(1)) <= MAX_SPAN:
        try:
            obj = json.loads(m.group(1))
        except ValueError:
            obj = None
        if isinstance(obj, dict) and isinstance(obj.get("name"), str) and isinstance(obj.get("arguments"), dict):
            strict = True
            tool = obj["name"] == gold_name
            args = gold_args is not None and _norm(obj["arguments"]) == _norm(dict(gold_args))
    nm = _NAME.search(text)
    lax_format = "<tool_call>" in text and nm is not None
    listed = False
    if nm is not None:
        got = nm.group(1).casefold()
        listed = any(got in t.casefold() or t.casefold() in got for t in tools)
    if not lax_format:
        overall = -1
    elif nm is not None and nm.group(1) == gold_name:
        overall = 2
    elif listed:
        overall = 1
    else:
        overall = 0
    return ToolScore(strict, tool, args, lax_format, listed, overall)


def emits_tool_tag(text: str) -> bool:
    """Whether an output opens a tool call at all (the generic-prompt gate)."""
    return "<tool_call>" in text
