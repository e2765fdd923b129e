"""The office domain: hand-written tool outputs parsed into facts, ground truth scoring 5 on every applicable rule
dimension, nested corruption, the state diff by hand, and a small real collection from the office sandbox (errors
rendered as the sandbox's ``ERROR: …``, write-then-read pairs, the call mix, determinism, the cache)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

pytest.importorskip("icalendar")  # the office sandbox needs the constraint-rot extra

from agentmill.methods.world_model.domain_office import (OfficeDomain, action_json, action_string,  # noqa: E402
                                                         collect_office, office_table, parse_office, state_diff)
from agentmill.methods.world_model.judges import JudgeItem, RuleScorer  # noqa: E402

TICKETS = ("T-1001 [open] Vera Lindqvist: Cannot log in (paid $410.65)\n"
           "T-1002 [pending] Sven Kowal: Wrong size shipped (paid $41.04)\n"
           "T-1003 [resolved] Ada Petrov: Late delivery (paid $562.05)")
EVENTS = ("seed-1@office.sandbox | 2026-06-26T12:00:00+00:00 - 2026-06-26T12:30:00+00:00 | Release plan | "
          "a@x.io, b@x.io\nevt-6@office.sandbox | 2026-06-27T10:00:00+00:00 - 2026-06-27T11:00:00+00:00 | Sync | ")
CARD = ("company: x.io\nfile: README.md\nfile: projects/beacon/notes.md\nfile: reports/customers.csv\n"
        "ticket: T-1001 [open]\nticket: T-1002 [open]\nticket: T-1003 [resolved]\nevent: seed-1@office.sandbox\n"
        "databases: prod, staging")


def test_parse_hand_outputs() -> None:
    p = parse_office(TICKETS)
    assert p.fields["kind"] == "tickets" and ("T-1002", "status", "pending") in p.facts and len(p.facts) == 12
    e = parse_office(EVENTS)
    assert e.fields["kind"] == "events"
    assert {("seed-1@office.sandbox", "attendee", "b@x.io"), ("evt-6@office.sandbox", "title", "Sync")} <= e.facts
    d = parse_office("README.md (63 bytes)\narchive/\ndata/")
    assert d.fields["kind"] == "dir" and d.facts == {("README.md", "listed", "63"), ("archive", "listed", "dir"),
                                                     ("data", "listed", "dir")}
    q = parse_office("id\tname\n1\tAda\n2\tBo\n(2 row(s))")
    assert q.fields["kind"] == "sql" and q.facts == {("row1", "id", "1"), ("row1", "name", "Ada"), ("row2", "id", "2"),
                                                     ("row2", "name", "Bo"), ("sql", "rows", "2")}
    assert parse_office("Wrote 5 bytes to notes/a.txt.").facts == {("notes/a.txt", "written", "5")}
    assert parse_office("Ticket T-1001: status pending, 1 note(s).").facts == {("T-1001", "status", "pending"),
                                                                               ("T-1001", "notes", "1")}
    assert parse_office("Deleted ticket T-1001.").facts == {("T-1001", "deleted", "yes")}
    err = parse_office("ERROR: update_ticket: no ticket 'T-9999'")
    assert err.fields["kind"] == "error" and err.fields["tool"] == "update_ticket"
    assert parse_office("# Notes\nship it").facts == {("file", "line", "# Notes"), ("file", "line", "ship it")}
    assert parse_office("").fields["kind"] == "empty"


def _scores(obs: str, prev: str, card: str | None = CARD) -> dict[str, float]:
    return RuleScorer(OfficeDomain()).score_observation(obs, JudgeItem("", obs, (prev,), card)).as_dict()


@pytest.mark.parametrize("obs", [TICKETS, EVENTS, "README.md (63 bytes)\nprojects/\nreports/",
                                 "id\tname\n1\tAda\n(1 row(s))", "Wrote 5 bytes to projects/beacon/a.txt.",
                                 "Moved README.md -> reports/r.md.",
                                 "Ticket T-1002: status closed, 2 note(s).", "ERROR: read_file: missing required "
                                 "argument(s) ['path']", "# Shared drive\n\nProjects live under projects/.",
                                 "Created event evt-7@office.sandbox: Sync 2026-06-24T10:00:00+00:00 - "
                                 "2026-06-24T11:00:00+00:00 with [].", "OK, 1 row(s) changed."])
def test_ground_truth_scores_five_on_every_applicable_dimension(obs: str) -> None:
    s = _scores(obs, TICKETS)
    assert all(v == 5.0 for v in s.values() if v > 0), s
    assert s["consistency"] == (5.0 if obs == TICKETS else 0.0)  # only a repeated ticket listing is checkable


def test_checks_that_can_fail() -> None:
    wrong_id = "T-4242 [open] Vera Lindqvist: Cannot log in (paid $410.65)"
    assert _scores(wrong_id, "")["realism"] == 1.0  # no such ticket on the card
    changed = TICKETS.replace("Late delivery", "Early delivery")
    assert _scores(changed, TICKETS)["consistency"] < 5.0  # a ticket's subject never changes
    assert _scores("<predicted_observation>\nhello", "")["format"] == 1.0
    assert _scores("id\tname\n1\tAda\n(3 row(s))", "")["format"] < 5.0  # the count line disagrees with the rows


def test_corruption_is_nested_and_factuality_falls() -> None:
    d, sc = OfficeDomain(), RuleScorer(OfficeDomain())
    it = JudgeItem("", TICKETS, ("",), CARD)
    outs = [d.corrupt(TICKETS, k, np.random.default_rng([0, 5])) for k in range(5)]
    assert outs[0] == TICKETS and outs[3] == outs[4]  # three lines: nothing left to corrupt after k = 3
    changed = [{i for i, (a, b) in enumerate(zip(TICKETS.splitlines(), o.splitlines())) if a != b} for o in outs]
    assert [len(c) for c in changed] == [0, 1, 2, 3, 3] and changed[1] < changed[2] < changed[3]
    fact = [sc.score_observation(o, it).factuality for o in outs[:4]]
    assert fact == sorted(fact, reverse=True) and len(set(fact)) == 4 and fact[3] == 1.0
    assert parse_office(outs[2]).fields["kind"] == "tickets"  # a phantom line keeps the output's shape
    sql = "id\tname\n1\tAda\n(1 row(s))"
    assert d.corrupt(sql, 5, np.random.default_rng(0)).splitlines()[0] == "id\tname"  # the header is kept


def test_state_diff_by_hand() -> None:
    before = {"files": {"a.txt": "h1", "b.txt": "h2"}, "tickets": {"T-1": ("open", 0)}, "events": {},
              "db": {"prod": "x"}}
    after = {"files": {"a.txt": "h9", "c.txt": "h3"}, "tickets": {"T-1": ("closed", 1)},
             "events": {"evt-6@office.sandbox": "Sync"}, "db": {"prod": "y"}}
    assert state_diff(before, after) == ["file c.txt is created", "file b.txt is removed", "file a.txt changes content",
                                         "ticket T-1 status open -> closed", "ticket T-1 gains a note",
                                         "event evt-6@office.sandbox (Sync) is added", "database prod content changes"]
    assert state_diff(before, before) == []


def test_actions_and_reasoning() -> None:
    a = action_string("read_file", {"path": "README.md"})
    assert action_json(a) == {"name": "read_file", "arguments": {"path": "README.md"}}
    assert action_json("look")["name"] == "command"
    r = OfficeDomain().reasoning(a, "", "ERROR: read_file: no such file: 'x'", (), None)
    assert r.splitlines() == ["Action: call read_file with path='README.md'.",
                              "Preconditions: the call is refused (read_file: no such file: 'x').",
                              "Effects: no state change."]


@pytest.fixture(scope="module")
def table():
    return collect_office([(5_100_000 + j, "test") for j in range(8)], 1, max_steps=10, seed=3)


def test_collected_transitions(table) -> None:
    rows = table.rows
    assert len(rows) == 80 and {r.env for r in rows} == {"office"}
    sc = RuleScorer(OfficeDomain())
    for r in rows:
        s = sc.score_observation(r.next_obs, JudgeItem("", r.next_obs, (r.obs,), r.card)).as_dict()
        assert all(v == 5.0 for v in s.values() if v > 0), (r.action, r.next_obs)
        if r.invalid:
            assert r.next_obs.startswith("ERROR: ") and not r.changed  # the sandbox's own error rendering
        a = action_json(r.action)
        assert a["name"] in ("list_dir", "read_file", "write_file", "delete_file", "move_file", "sql_query",
                             "list_tickets", "update_ticket", "create_event", "list_events")
    pairs = [(a, b) for a, b in zip(rows, rows[1:]) if a.episode_id == b.episode_id
             and action_json(a.action)["name"] == "write_file" and not a.invalid]
    assert pairs
    for w, rd in pairs:  # every valid write is read back at the next step, with the content just written
        assert action_json(rd.action) == {"name": "read_file", "arguments": {"path": action_json(w.action)[
            "arguments"]["path"]}}
        assert rd.next_obs == action_json(w.action)["arguments"]["content"] and w.changed and not rd.changed
    # the call mix: 20 % deliberately invalid calls; 80 calls, a binomial 99.9 % band around 0.2
    n, k = len(rows), sum(r.invalid for r in rows)
    assert abs(k / n - 0.2) <= 3.3 * math.sqrt(0.2 * 0.8 / n)


def test_collection_is_deterministic_and_cached(table, tmp_path, monkeypatch) -> None:
    again = collect_office([(5_100_000 + j, "test") for j in range(2)], 1, max_steps=10, seed=3)
    assert again.rows == table.rows[:20]
    monkeypatch.setenv("AGENTMILL_CACHE", str(tmp_path))
    t1 = office_table([(5_100_000, "test")], 1, max_steps=10, seed=3)
    files = list(tmp_path.rglob("transitions.jsonl"))
    assert len(files) == 1 and json.loads(files[0].read_text().splitlines()[0])["env"] == "office"
    assert office_table([(5_100_000, "test")], 1, max_steps=10, seed=3).rows == t1.rows == table.rows[:10]
