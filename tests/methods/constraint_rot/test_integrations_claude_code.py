"""The Claude Code SessionStart (matcher ``compact``) hook output carries one card per registered rule."""

from __future__ import annotations

import json

import pytest

from agentmill.methods.constraint_rot.messages import WhitespaceCounter
from agentmill.methods.constraint_rot.pinning import CardTooLong, PolicyRegistry, parse_cards
from agentmill.methods.constraint_rot.pinning.integrations import hook_settings, session_start_hook_output


def make_registry() -> PolicyRegistry:
    reg = PolicyRegistry(version="2")
    reg.register("mail.external_domain", "Email only to @acme.com recipients.", issuer="op", kind="soft",
                 scope_tools=["send_email"])
    reg.register("git.no_force_main", "Never force-push to main.", issuer="op", kind="soft",
                 scope_tools=["git_push"])
    return reg


def test_hook_json_shape_and_cards() -> None:
    out = json.loads(session_start_hook_output(make_registry(), counter=WhitespaceCounter()))
    assert set(out) == {"hookSpecificOutput"}
    spec = out["hookSpecificOutput"]
    assert spec["hookEventName"] == "SessionStart"
    cards = parse_cards(spec["additionalContext"])
    reg = make_registry()
    assert [(c.rule_id, c.digest) for c in cards] == [(r.rule_id, r.short) for r in reg]
    assert cards[1].body.startswith("Never force-push to main.")


def test_card_limit_and_empty_registry() -> None:
    with pytest.raises(CardTooLong):
        session_start_hook_output(make_registry(), counter=WhitespaceCounter(), max_tokens=5)
    with pytest.raises(ValueError, match="no rules"):
        session_start_hook_output(PolicyRegistry(), counter=WhitespaceCounter())


def test_settings_snippet() -> None:
    s = hook_settings("agentmill constraint-rot pin-hook --registry rules.yaml")
    entry = s["hooks"]["SessionStart"][0]
    assert entry["matcher"] == "compact" and entry["hooks"][0]["type"] == "command"
    with pytest.raises(ValueError, match="command"):
        hook_settings("  ")
