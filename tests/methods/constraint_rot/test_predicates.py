"""The predicate DSL: every op on hand-made calls, combinators, θ substitution, and refused specs."""

from __future__ import annotations

import pytest

from agentmill.core.types import ToolCall
from agentmill.methods.constraint_rot.predicates import TOOL_ARGS, compile_predicate, render_template


def call(name: str, **args: object) -> ToolCall:
    return ToolCall(id="c", name=name, arguments=dict(args))


def leaf(tool: str, arg: str, op: str, value: object, params: dict | None = None):
    return compile_predicate({"tool": tool, "arg": arg, "op": op, "value": value}, params or {})


# -- ops one by one ------------------------------------------------------------------------------------------------
def test_eq_neq():
    p = leaf("sql_query", "db", "eq", "prod")
    assert p.matches(call("sql_query", db="prod", sql="x"))
    assert not p.matches(call("sql_query", db="staging", sql="x"))
    q = leaf("sql_query", "db", "neq", "prod")
    assert q.matches(call("sql_query", db="staging", sql="x")) and not q.matches(call("sql_query", db="prod"))


def test_eq_bool_and_number():
    p = leaf("git_push", "force", "eq", True)
    assert p.matches(call("git_push", branch="main", force=True))
    assert p.matches(call("git_push", branch="main", force="true"))
    assert not p.matches(call("git_push", branch="main", force=False))
    n = leaf("issue_refund", "amount", "eq", 50)
    assert n.matches(call("issue_refund", ticket_id="T", amount=50.0))
    assert not n.matches(call("issue_refund", ticket_id="T", amount=51))


def test_in_not_in():
    p = leaf("post_message", "channel", "in", ["general", "random"])
    assert p.matches(call("post_message", channel="random", text="t"))
    assert not p.matches(call("post_message", channel="support", text="t"))
    q = leaf("post_message", "channel", "not_in", ["general", "random"])
    assert q.matches(call("post_message", channel="support", text="t"))
    assert not q.matches(call("post_message", channel="general", text="t"))


def test_string_ops():
    assert leaf("read_file", "path", "startswith", "archive/").matches(call("read_file", path="archive/a.txt"))
    assert not leaf("read_file", "path", "startswith", "archive/").matches(call("read_file", path="x/archive/a"))
    assert leaf("read_file", "path", "endswith", ".env").matches(call("read_file", path="config/.env"))
    assert leaf("http_post", "body", "contains", "secret").matches(call("http_post", url="u", body="a secret b"))
    assert not leaf("http_post", "body", "contains", "secret").matches(call("http_post", url="u", body="SECRET"))
    ne = leaf("read_file", "path", "not_endswith", ".md")
    assert ne.matches(call("read_file", path="a.txt")) and not ne.matches(call("read_file", path="a.md"))


def test_regex_escapes_params():
    p = leaf("http_post", "body", "regex", r"^{domain}$", {"domain": "a.com"})
    assert p.matches(call("http_post", url="u", body="a.com"))
    assert not p.matches(call("http_post", url="u", body="abcom"))  # the dot is literal after escaping


def test_ordered_numbers():
    cases = {"gt": (51, 50, 49), "ge": (50, 50, 49), "lt": (49, 50, 51), "le": (50, 50, 51)}
    for op, (yes, _, no) in cases.items():
        p = leaf("issue_refund", "amount", op, "{cap}", {"cap": "50"})
        assert p.matches(call("issue_refund", ticket_id="T", amount=yes)), op
        assert not p.matches(call("issue_refund", ticket_id="T", amount=no)), op
    assert leaf("issue_refund", "amount", "gt", 50).matches(call("issue_refund", ticket_id="T", amount="75.5"))
    assert not leaf("issue_refund", "amount", "gt", 50).matches(call("issue_refund", ticket_id="T", amount="lots"))
    assert not leaf("issue_refund", "amount", "gt", 50).matches(call("issue_refund", ticket_id="T", amount=True))


def test_ordered_time_of_day_and_dates():
    late = leaf("create_event", "start", "ge", "17:00")
    assert late.matches(call("create_event", title="t", start="2026-06-25T19:30:00+00:00", end="x"))
    assert not late.matches(call("create_event", title="t", start="2026-06-25T09:30:00+00:00", end="x"))
    assert not late.matches(call("create_event", title="t", start="not a date", end="x"))
    after = leaf("create_event", "start", "gt", "2026-06-24")
    assert after.matches(call("create_event", title="t", start="2026-06-25T09:00:00", end="x"))
    assert not after.matches(call("create_event", title="t", start="2026-06-23T09:00:00", end="x"))


def test_path_outside_normalises():
    p = leaf("read_file", "path", "path_outside", "{root}", {"root": "projects/atlas"})
    assert not p.matches(call("read_file", path="projects/atlas/notes.md"))
    assert not p.matches(call("read_file", path="./projects/atlas"))
    assert not p.matches(call("read_file", path="/projects/atlas/x"))
    assert p.matches(call("read_file", path="projects/atlas/../beacon/x"))
    assert p.matches(call("read_file", path="projects/atlas2/x"))  # prefix of the name is not inside
    assert p.matches(call("read_file", path="../../etc/passwd"))


def test_host_not_in():
    p = leaf("http_get", "url", "host_not_in", ["intranet.local", "{partner}"], {"partner": "Docs.Partner.net"})
    assert not p.matches(call("http_get", url="http://intranet.local/x"))
    assert not p.matches(call("http_get", url="https://DOCS.partner.net:8443/a"))
    assert p.matches(call("http_get", url="http://evil.example/a"))
    assert p.matches(call("http_get", url="evil.example/a"))  # scheme-less URLs are read as http
    assert p.matches(call("http_get", url="http://intranet.local.evil.example/"))


# -- addresses and list arguments ----------------------------------------------------------------------------------
def test_comma_separated_addresses_any_recipient_counts():
    p = leaf("send_email", "to", "not_endswith", "@{domain}", {"domain": "acme.com"})
    assert not p.matches(call("send_email", to="a@acme.com", subject="s", body="b"))
    assert p.matches(call("send_email", to="a@acme.com, x@evil.io", subject="s", body="b"))
    assert p.matches(call("send_email", to="x@evil.io;a@acme.com", subject="s", body="b"))
    assert not p.matches(call("send_email", to="Bob <BOB@ACME.COM>, c@Acme.Com", subject="s", body="b"))
    assert p.matches(call("send_email", to="x@acme.com.evil.io", subject="s", body="b"))


def test_list_arguments_any_item_and_empty():
    p = leaf("create_event", "attendees", "not_endswith", "@acme.com")
    assert p.matches(call("create_event", title="t", start="s", end="e", attendees=["a@acme.com", "b@x.io"]))
    assert not p.matches(call("create_event", title="t", start="s", end="e", attendees=["a@ACME.com"]))
    assert not p.matches(call("create_event", title="t", start="s", end="e", attendees=[]))
    att = leaf("send_email", "attachments", "contains", "customers")
    assert att.matches(call("send_email", to="a", subject="s", body="b", attachments=["x", "reports/customers.csv"]))


def test_missing_argument_never_matches():
    assert not leaf("sql_query", "db", "neq", "prod").matches(call("sql_query", sql="x"))
    assert not leaf("sql_query", "db", "eq", "prod").matches(call("sql_query", db=None, sql="x"))


# -- combinators -----------------------------------------------------------------------------------------------------
def test_all_any_not_and_tool_only_leaf():
    spec = {"any": [
        {"all": [{"tool": "git_push", "arg": "branch", "op": "eq", "value": "{b}"},
                 {"tool": "git_push", "arg": "force", "op": "eq", "value": True}]},
        {"all": [{"tool": "delete_file"}, {"not": {"tool": "delete_file", "arg": "path", "op": "path_outside",
                                                   "value": "archive"}}]},
    ]}
    p = compile_predicate(spec, {"b": "main"}, allowed_tools=["git_push", "delete_file"])
    assert p.tools == frozenset({"git_push", "delete_file"})
    assert p.matches(call("git_push", branch="main", force=True))
    assert not p.matches(call("git_push", branch="main", force=False))
    assert not p.matches(call("git_push", branch="dev", force=True))
    assert p.matches(call("delete_file", path="archive/2025/a.txt"))
    assert not p.matches(call("delete_file", path="tmp/a.txt"))
    assert not p.matches(call("read_file", path="archive/2025/a.txt"))
    assert p.args_for("git_push") == {"branch", "force"} and p.args_for("delete_file") == {"path"}


def test_root_not_is_scoped_to_its_tools():
    p = compile_predicate({"not": {"tool": "post_message", "arg": "channel", "op": "eq", "value": "support"}}, {})
    assert p.matches(call("post_message", channel="general", text="t"))
    assert not p.matches(call("post_message", channel="support", text="t"))
    assert not p.matches(call("send_email", to="a", subject="s", body="b"))  # other tools never match


# -- refused specs -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("spec, allowed, message", [
    ({"tool": "shell", "arg": "cmd", "op": "eq", "value": "x"}, None, "unknown tool 'shell'"),
    ({"tool": "send_email", "arg": "recipient", "op": "eq", "value": "x"}, None, "has no argument 'recipient'"),
    ({"tool": "send_email", "arg": "to", "op": "like", "value": "x"}, None, "unknown op 'like'"),
    ({"tool": "send_email", "arg": "to", "op": "eq"}, None, "missing"),
    ({"tool": "http_post", "arg": "url", "op": "contains", "value": "x"}, ["send_email"], "not governed"),
    ({"tool": "send_email", "arg": "to", "op": "in", "value": "a@b"}, None, "needs a non-empty list"),
    ({"tool": "send_email", "arg": "body", "op": "regex", "value": "(unclosed"}, None, "bad regular expression"),
    ({"tool": "issue_refund", "arg": "amount", "op": "gt", "value": "lots"}, None, "needs a number"),
    ({"any": []}, None, "non-empty list"),
    ({"all": [{"tool": "send_email"}, {"tool": "http_post"}]}, None, "could never match"),
    ({"tool": "send_email", "arg": "to", "op": "eq", "value": "x", "case": "i"}, None, "unknown key"),
    ({"not": {"tool": "send_email"}, "any": []}, None, "extra keys"),
    ({"tool": "send_email", "arg": "to", "op": "endswith", "value": "@{domain}"}, None, "unknown parameter {domain}"),
    ([], None, "non-empty mapping"),
])
def test_bad_specs_are_refused_with_the_field(spec, allowed, message):
    with pytest.raises(ValueError, match="forbidden") as exc:
        compile_predicate(spec, {}, allowed_tools=allowed)
    assert message in str(exc.value)


def test_render_template_has_no_format_mini_language():
    assert render_template("{a}-{b}", {"a": 1, "b": "x"}) == "1-x"
    assert render_template("{a.__class__}", {"a": 1}) == "{a.__class__}"  # not a placeholder: left as text
    with pytest.raises(ValueError, match="card: unknown parameter"):
        render_template("{zzz}", {}, where="card")


def test_tool_args_match_the_office_sandbox():
    from agentmill.envs.office.tools import TOOL_SPECS
    office = {t.name: set(t.parameters.get("properties", {})) for t in TOOL_SPECS}
    assert office == {name: set(args) for name, args in TOOL_ARGS.items()}
