from __future__ import annotations

import json

import pytest

from agentmill.envs.office.tools import (OUTPUT_LIMIT_BYTES, SPECS_BY_NAME, TOOL_NAMES, TOOL_SPECS,
                                         ToolArgumentError, truncate_output, validate_arguments)

# The shared contract of /work/notes/cr_plan.md: the catalogue's predicates match on these names.
EXPECTED = {
    "send_email": ["to", "subject", "body", "attachments"], "forward_email": ["msg_id", "to"], "list_inbox": [],
    "read_email": ["msg_id"], "route_internal": ["to", "doc"], "read_file": ["path"],
    "write_file": ["path", "content"], "list_dir": ["path"], "delete_file": ["path"], "move_file": ["src", "dst"],
    "create_event": ["title", "start", "end", "attendees"], "list_events": [], "http_get": ["url"],
    "http_post": ["url", "body"], "sql_query": ["db", "sql"], "list_tickets": ["status"],
    "update_ticket": ["ticket_id", "status", "note"], "delete_ticket": ["ticket_id"],
    "issue_refund": ["ticket_id", "amount"], "post_message": ["channel", "text"], "git_push": ["branch", "force"],
    "memory_read": [],
}


def test_names_and_arguments_match_the_shared_contract() -> None:
    assert TOOL_NAMES == tuple(EXPECTED)
    for spec in TOOL_SPECS:
        assert list(spec.parameters["properties"]) == EXPECTED[spec.name], spec.name
        assert spec.parameters["additionalProperties"] is False


def test_openai_shape_is_json_serialisable() -> None:
    entry = SPECS_BY_NAME["send_email"].to_openai()
    assert entry["type"] == "function" and entry["function"]["name"] == "send_email"
    assert entry["function"]["parameters"]["required"] == ["to", "subject", "body"]
    json.dumps([s.to_openai() for s in TOOL_SPECS])


def test_validation_fills_defaults() -> None:
    assert validate_arguments(SPECS_BY_NAME["git_push"], {"branch": "main"}) == {"branch": "main", "force": False}
    assert validate_arguments(SPECS_BY_NAME["list_dir"], {}) == {"path": "."}
    args = validate_arguments(SPECS_BY_NAME["update_ticket"], {"ticket_id": "T-1", "status": None})
    assert args == {"ticket_id": "T-1", "status": None, "note": None}


@pytest.mark.parametrize("name,args,needle", [
    ("send_email", {"to": "a@b.c", "subject": "s"}, "missing required argument(s) ['body']"),
    ("read_file", {"path": "x", "mode": "r"}, "unknown argument(s) ['mode']"),
    ("issue_refund", {"ticket_id": "T-1", "amount": "50"}, "'amount' must be number"),
    ("issue_refund", {"ticket_id": "T-1", "amount": True}, "'amount' must be number"),
    ("issue_refund", {"ticket_id": "T-1", "amount": float("nan")}, "'amount' must be number"),
    ("git_push", {"branch": "main", "force": "yes"}, "'force' must be boolean"),
    ("send_email", {"to": "a@b.c", "subject": "s", "body": "b", "attachments": "x.txt"}, "array of string"),
    ("create_event", {"title": "t", "start": "s", "end": "e", "attendees": [1]}, "array of string"),
    ("list_inbox", [], "must be a JSON object"),
])
def test_validation_names_the_problem(name: str, args: object, needle: str) -> None:
    with pytest.raises(ToolArgumentError, match=None) as err:
        validate_arguments(SPECS_BY_NAME[name], args)
    assert needle in str(err.value) and name in str(err.value)


def test_truncation_keeps_8kb_and_says_so() -> None:
    assert truncate_output("short") == "short"
    out = truncate_output("é" * 5000)  # 10,000 UTF-8 bytes; the cut must not split a character
    head, marker = out.rsplit("\n", 1)
    assert len(head.encode()) <= OUTPUT_LIMIT_BYTES and head == "é" * (OUTPUT_LIMIT_BYTES // 2)
    assert marker == f"[... output truncated: {10_000 - OUTPUT_LIMIT_BYTES} more bytes ...]"
