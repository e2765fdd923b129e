"""Tool-call parsing and rendering without a model: each accepted output format, fences and whitespace, bad JSON
and undeclared tools as text with a failure reason, ``REPLY``; request validation naming the bad param; the tool
list and tool traffic as chat-template messages."""

from __future__ import annotations

import pytest

from agentmill.lm.chat_tools import ParsedCall, ToolRequest, ToolRequestError, parse_tool_call, parse_tool_request, \
    render_tools_prompt, template_messages

DECLARED = {"send_email", "list_inbox"}
EMAIL = ParsedCall("send_email", {"to": "a@b.com", "n": 2})


def fn(name, props=None, required=(), desc=""):
    params = {"type": "object", "properties": props or {}, "required": list(required)}
    return {"type": "function", "function": {"name": name, "description": desc, "parameters": params}}


# ---------------------------------------------------------------------------------------------- parsing
@pytest.mark.parametrize("text", [
    'CALL send_email {"to": "a@b.com", "n": 2}',
    '  \n CALL send_email   {"to":"a@b.com","n":2}  \n',
    'Sure.\nCALL send_email {"to": "a@b.com", "n": 2}',
    '<tool_call>{"name": "send_email", "arguments": {"to": "a@b.com", "n": 2}}</tool_call>',
    '<tool_call>\n{"name": "send_email", "arguments": {"to": "a@b.com", "n": 2}}\n</tool_call>\n',
    '<tool_call>{"name": "send_email", "arguments": {"to": "a@b.com", "n": 2}}',          # cut before the close tag
    '{"name": "send_email", "arguments": {"to": "a@b.com", "n": 2}}',
    '{"name": "send_email", "arguments": "{\\"to\\": \\"a@b.com\\", \\"n\\": 2}"}',       # arguments as a string
    '{"tool": "send_email", "args": {"to": "a@b.com", "n": 2}}',
    '{"name": "send_email", "parameters": {"to": "a@b.com", "n": 2}}',
    '```json\n{"tool": "send_email", "args": {"to": "a@b.com", "n": 2}}\n```',
    'Here it is:\n```\n{"name": "send_email", "arguments": {"to": "a@b.com", "n": 2}}\n```\nDone.',
])
def test_each_format_parses_to_the_same_call(text):
    p = parse_tool_call(text, DECLARED)
    assert p.calls == (EMAIL,) and p.failure is None and p.text == ""


def test_call_without_arguments_and_parallel_calls():
    assert parse_tool_call("CALL list_inbox", DECLARED).calls == (ParsedCall("list_inbox", {}),)
    p = parse_tool_call('CALL list_inbox {}\nCALL send_email {"to": "x"}', DECLARED)
    assert p.calls == (ParsedCall("list_inbox", {}), ParsedCall("send_email", {"to": "x"}))
    p = parse_tool_call('<tool_call>{"name": "list_inbox", "arguments": {}}</tool_call>'
                        '<tool_call>{"name": "send_email", "arguments": {"to": "x"}}</tool_call>', DECLARED)
    assert [c.name for c in p.calls] == ["list_inbox", "send_email"]


@pytest.mark.parametrize("text, reply", [
    ("REPLY I cannot send that.", "I cannot send that."),
    ("  REPLY   two words \n", "two words"),
    ("REPLY: ok", "ok"),
    ("REPLY", ""),
])
def test_reply_is_text_without_the_marker(text, reply):
    p = parse_tool_call(text, DECLARED)
    assert p.calls == () and p.text == reply and p.failure is None


@pytest.mark.parametrize("text", [
    "Hello there, how can I help?",
    '{"name": "Alice", "age": 3}',                       # JSON, but not a call
    "CALLING you back later",                            # not the CALL keyword
    "REPLYING is hard",
    "",
])
def test_plain_text_is_returned_unchanged(text):
    p = parse_tool_call(text, DECLARED)
    assert p.calls == () and p.text == text and p.failure is None


@pytest.mark.parametrize("text, reason", [
    ('CALL delete_all {"x": 1}', "undeclared_tool"),
    ('CALL send_email {"to": "a@b.com",', "bad_arguments"),
    ('CALL send_email {"to": "x"} and then more', "bad_arguments"),
    ("CALL send_email [1, 2]", "bad_arguments"),
    ('CALL list_inbox {}\nCALL rm_rf {}', "undeclared_tool"),
    ("CALL", "bad_format"),
    ('<tool_call>{"name": "send_email", "arguments": {oops}}</tool_call>', "bad_arguments"),
    ('<tool_call>{"foo": 1}</tool_call>', "bad_format"),
    ('<tool_call>{"name": "nope", "arguments": {}}</tool_call>', "undeclared_tool"),
    ('```json\n{"name": "nope", "arguments": {}}\n```', "undeclared_tool"),
    ('{"name": "send_email", "arguments": "not json"}', "bad_arguments"),
])
def test_bad_calls_come_back_as_text_with_a_reason(text, reason):
    p = parse_tool_call(text, DECLARED)
    assert p.calls == () and p.text == text and p.failure == reason


# ---------------------------------------------------------------------------------------------- request validation
def test_tool_request_normalises_choice_and_parallel():
    tools = [fn("send_email"), fn("list_inbox")]
    assert parse_tool_request({}) is None and parse_tool_request({"tools": [], "tool_choice": "none"}) is None
    r = parse_tool_request({"tools": tools})
    assert r.choice == "auto" and r.parallel and r.active and r.prefill == ""
    assert [t.name for t in r.offered] == ["send_email", "list_inbox"]
    r = parse_tool_request({"tools": tools, "tool_choice": {"type": "function", "function": {"name": "list_inbox"}},
                            "parallel_tool_calls": False})
    assert r.choice == "list_inbox" and not r.parallel and r.prefill == "CALL list_inbox"
    assert [t.name for t in r.offered] == ["list_inbox"]
    assert parse_tool_request({"tools": tools, "tool_choice": "required"}).prefill == "CALL"
    none = parse_tool_request({"tools": tools, "tool_choice": "none"})
    assert not none.active and none.prefill == ""


@pytest.mark.parametrize("body, param", [
    ({"tools": {"name": "x"}}, "tools"),
    ({"tools": ["x"]}, "tools[0]"),
    ({"tools": [{"type": "function"}]}, "tools[0].function"),
    ({"tools": [{"type": "retrieval", "function": {"name": "x"}}]}, "tools[0].type"),
    ({"tools": [{"type": "function", "function": {"name": "has space"}}]}, "tools[0].function.name"),
    ({"tools": [{"type": "function", "function": {"name": "a" * 65}}]}, "tools[0].function.name"),
    ({"tools": [fn("a"), fn("a")]}, "tools[1].function.name"),
    ({"tools": [{"type": "function", "function": {"name": "a", "description": 3}}]},
     "tools[0].function.description"),
    ({"tools": [{"type": "function", "function": {"name": "a", "parameters": [1]}}]}, "tools[0].function.parameters"),
    ({"tools": [{"type": "function", "function": {"name": "a", "parameters": {"properties": {"x": {}},
                                                                              "required": 5}}}]},
     "tools[0].function.parameters.required"),
    ({"tools": [{"type": "function", "function": {"name": "a", "parameters": {"required": [{"x": 1}]}}}]},
     "tools[0].function.parameters.required"),
    ({"tools": [fn("a")], "tool_choice": {"type": "function", "function": {"name": "b"}}}, "tool_choice"),
    ({"tools": [fn("a")], "tool_choice": "always"}, "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
    ({"tools": [fn("a")], "parallel_tool_calls": "yes"}, "parallel_tool_calls"),
])
def test_malformed_tool_fields_name_the_param(body, param):
    with pytest.raises(ToolRequestError) as e:
        parse_tool_request(body)
    assert e.value.param == param


# ---------------------------------------------------------------------------------------------- rendering
def test_tools_prompt_is_a_compact_signature_list():
    r = parse_tool_request({"tools": [
        fn("send_email", {"to": {"type": "string"}, "cc": {"type": "array", "items": {"type": "string"}}},
           required=["to"], desc="Send an\n email."),
        fn("set_mode", {"mode": {"enum": ["fast", "slow"]},
                        "opts": {"type": "object", "properties": {"level": {"type": "integer"}}}}, required=["mode"]),
        {"type": "function", "function": {"name": "list_inbox"}},
    ]})
    assert render_tools_prompt(r) == (
        "Tools:\n"
        "- send_email(to: string, cc?: array[string]): Send an email.\n"
        '- set_mode(mode: "fast"|"slow", opts?: {level?: integer})\n'
        "- list_inbox()\n"
        "Answer with exactly one line: CALL <tool> <json-args> to call a tool, or REPLY <text> to answer.\n"
        'Example: CALL send_email {"to": "<string>"}')
    named = ToolRequest(r.tools, "set_mode")
    assert render_tools_prompt(named) == ('Tools:\n- set_mode(mode: "fast"|"slow", opts?: {level?: integer})\n'
                                          "Answer with exactly one line: CALL <tool> <json-args>.\n"
                                          'Example: CALL set_mode {"mode": "<\\"fast\\"|\\"slow\\">"}')
    assert render_tools_prompt(ToolRequest(r.tools, "list_inbox")).endswith("\nExample: CALL list_inbox {}")


def test_tool_traffic_renders_as_call_lines_and_tool_role():
    r = parse_tool_request({"tools": [fn("list_inbox")]})
    msgs = [{"role": "system", "content": "Be careful."}, {"role": "user", "content": "inbox?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "list_inbox", "arguments": '{"n":2}'}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "2 mails"}]}]
    got = template_messages(msgs, r, tool_role=True)
    assert got == [{"role": "system", "content": "Be careful.\n\n" + render_tools_prompt(r)},
                   {"role": "user", "content": "inbox?"},
                   {"role": "assistant", "content": 'CALL list_inbox {"n": 2}'},
                   {"role": "tool", "content": "2 mails"}]
    fallback = template_messages(msgs[1:], r, tool_role=False)
    assert fallback[0] == {"role": "system", "content": render_tools_prompt(r)}
    assert fallback[-1] == {"role": "user", "content": "Tool result list_inbox (call_1):\n2 mails"}
    # tool_choice "none" (or no tools): no tool list, history still rendered; developer counts as system
    plain = template_messages([{"role": "developer", "content": "d"}] + msgs[1:], None, tool_role=True)
    assert plain[0] == {"role": "system", "content": "d"} and plain[2]["content"] == 'CALL list_inbox {"n": 2}'


@pytest.mark.parametrize("msgs, param", [
    ([{"role": "tool", "content": "x"}], "messages[0].tool_call_id"),
    ([{"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "a", "arguments": "{oops"}}]}],
     "messages[0].tool_calls[0].function.arguments"),
    ([{"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "a", "arguments": "[1]"}}]}],
     "messages[0].tool_calls[0].function.arguments"),
    ([{"role": "assistant", "tool_calls": [{"id": "c"}]}], "messages[0].tool_calls[0]"),
    ([{"role": "assistant", "tool_calls": "x"}], "messages[0].tool_calls"),
    ([{"role": "robot", "content": "x"}], "messages[0].role"),
    ([{"role": "user", "content": 3}], "messages[0]"),
    ([], "messages"),
])
def test_bad_messages_name_the_field(msgs, param):
    with pytest.raises(ToolRequestError) as e:
        template_messages(msgs, None, tool_role=True)
    assert e.value.param == param
