"""Constraint Pinning for Claude Code (and Codex CLI compact hooks): the ``SessionStart`` hook output
(docs/methods/constraint_rot.md "Use it" 5).

Claude Code runs ``SessionStart`` hooks when a session starts, resumes, is cleared, or — matcher ``compact`` —
right after an (auto-)compaction. A command hook that prints JSON of the shape

    {"hookSpecificOutput": {"hookEventName": "SessionStart", "additionalContext": "<text>"}}

has ``<text>`` added to the model's context (Claude Code hooks reference, https://code.claude.com/docs/en/hooks,
"SessionStart" decision control; the same wire shape is built by the Elixir ``claude_code`` SDK's
``Hook.Output.SessionStart.to_wire``). :func:`session_start_hook_output` prints the registry's cards as that text,
so every compaction is followed by a fresh copy of each card. :func:`hook_settings` is the ``settings.json``
snippet that wires a command to the ``compact`` matcher.

This is presence-only by nature: the hook cannot strip forged cards from the transcript or verify what the model
reads, and CLAUDE.md (re-read after compaction) is the harness's own pinning channel for repository rules.
"""

from __future__ import annotations

import json
from typing import Any

from agentmill.methods.constraint_rot.pinning.card import render_card
from agentmill.methods.constraint_rot.pinning.registry import PolicyRegistry

HOOK_EVENT = "SessionStart"
COMPACT_MATCHER = "compact"


def session_start_hook_output(registry: PolicyRegistry, *, counter: Any = None, max_tokens: int = 60) -> str:
    """The JSON a ``SessionStart`` hook prints: ``hookSpecificOutput.additionalContext`` holds one card per
    registered rule (rendered and length-checked by :func:`render_card`; ``counter=None`` counts with SmolLM2)."""
    if len(registry) == 0:
        raise ValueError("session_start_hook_output: the registry has no rules")
    cards = [render_card(rule, counter, max_tokens=max_tokens).text for rule in registry]
    return json.dumps({"hookSpecificOutput": {"hookEventName": HOOK_EVENT,
                                              "additionalContext": "\n\n".join(cards)}}, ensure_ascii=False)


def hook_settings(command: str, *, matcher: str = COMPACT_MATCHER) -> dict[str, Any]:
    """The ``.claude/settings.json`` ``hooks`` entry that runs ``command`` after every compaction, e.g.
    ``hook_settings("agentmill constraint-rot pin-hook --registry rules.yaml")``."""
    if not isinstance(command, str) or not command.strip():
        raise ValueError(f"hook_settings: command must be a non-empty string, got {command!r}")
    return {"hooks": {HOOK_EVENT: [{"matcher": matcher, "hooks": [{"type": "command", "command": command}]}]}}


__all__ = ["COMPACT_MATCHER", "HOOK_EVENT", "hook_settings", "session_start_hook_output"]
