"""AppSim: the API world, its 48 patterns, checkers, streams and the API change."""

from __future__ import annotations

import numpy as np
import pytest

from agentmill.envs.appsim import (APPS, INTENT_OF, PATTERNS, ApiError, AppSim, TaskStream, affected, check,
                                   expected_outcome, render_query, run_reference, sample_slots, step_endpoints)


@pytest.fixture(scope="module")
def world() -> AppSim:
    return AppSim(0)


def test_world_sizes_and_snapshot_roundtrip(world: AppSim) -> None:
    counts = {t: len(rows) for t, rows in world.state_rows().items()}
    assert counts["contacts"] == 40 and counts["payments"] == 400 and counts["events"] == 120
    assert counts["notes"] == 30 and counts["products"] == 80 and counts["orders"] == 20
    w2 = AppSim.restore(world.snapshot())
    assert w2.state_digest() == world.state_digest()
    assert AppSim(0).state_digest() == world.state_digest() != AppSim(1).state_digest()


def test_pattern_coverage() -> None:
    assert len(PATTERNS) == 48 and len({p.id for p in PATTERNS}) == 48
    assert len(set(INTENT_OF.values())) == 24 and all(list(INTENT_OF.values()).count(i) == 2
                                                      for i in set(INTENT_OF.values()))
    assert sum(p.reads_pages for p in PATTERNS) >= 12
    assert sum(p.mutates for p in PATTERNS) >= 12
    assert sum(p.reads_amounts for p in PATTERNS) >= 8
    assert all(any(s.op == "login" for s in p.steps) for p in PATTERNS)
    assert len({p.key for p in PATTERNS}) == 48


def test_every_reference_solution_passes_its_checker(world: AppSim) -> None:
    rng = np.random.default_rng(0)
    for p in PATTERNS:
        w = world.copy()
        slots = sample_slots(p, w, rng)
        from agentmill.envs.appsim import Task

        task = Task("t", 0, p.id, tuple(sorted(slots.items())), render_query(p, slots, 0))
        exp = expected_outcome(w, task)
        assert exp[2], p.id
        start = w.state_digest()
        w.begin_task()
        ans = run_reference(w, p.steps, slots)
        assert check(exp, w, ans, start).success, p.id
        assert (w.state_digest() != start) == p.mutates or p.id in ("bulk_request", "bulk_send", "delete_with_month",
                                                                    "delete_with_range", "delete_titled_month",
                                                                    "delete_titled_range"), p.id


def test_checker_catches_collateral_damage(world: AppSim) -> None:
    from agentmill.envs.appsim import PATTERN_BY_ID, Task

    p = PATTERN_BY_ID["total_sent_month"]
    slots = {"month": "2025-03"}
    w = world.copy()
    task = Task("t", 0, p.id, (("month", "2025-03"),), "")
    exp = expected_outcome(w, task)
    start = w.state_digest()
    w.begin_task()
    ans = run_reference(w, p.steps, slots)
    w.call("auth", "login", app="notes")
    w.call("notes", "create", title="x", body="y")  # an unrequested mutation
    r = check(exp, w, ans, start)
    assert r.answer_ok and not r.state_ok and r.collateral and not r.success


def test_login_is_per_task_and_required(world: AppSim) -> None:
    w = world.copy()
    with pytest.raises(ApiError) as e:
        w.call("payments", "list", direction="sent")
    assert e.value.code == 401
    w.call("auth", "login", app="payments")
    w.call("payments", "list", direction="sent")
    w.begin_task()
    with pytest.raises(ApiError):
        w.call("payments", "list", direction="sent")
    assert set(APPS) == {"contacts", "payments", "calendar", "notes", "shop"}


def test_api_change_is_loud_and_silent(world: AppSim) -> None:
    w = world.copy()
    w.call("auth", "login", app="payments")
    before = w.call("payments", "list", direction="sent", page_limit=20)
    assert len(before["items"]) == 20 and "amount" in before["items"][0]
    w.shift()
    with pytest.raises(ApiError, match="page_limit must be <= 5") as e:
        w.call("payments", "list", direction="sent", page_limit=20)
    assert e.value.code == 422
    after = w.call("payments", "list", direction="sent")  # the default shrank silently
    assert len(after["items"]) == 5 and after["next_page"] == 1
    assert "amount" not in after["items"][0] and isinstance(after["items"][0]["amount_cents"], int)
    assert w.call("docs", "get", app="payments", endpoint="list")["page_limit_max"] == 5


def test_streams_are_seeded_and_validated() -> None:
    a = [t.query for t in TaskStream(n_tasks=30, shift_at=10, seed=3).tasks(AppSim(3))]
    b = [t.query for t in TaskStream(n_tasks=30, shift_at=10, seed=3).tasks(AppSim(3))]
    assert a == b
    with pytest.raises(ValueError, match="shorter than t_shift"):
        TaskStream(n_tasks=100, shift_at=150)
    tasks = list(TaskStream(kind="disjoint", n_tasks=200, shift_at=None, seed=1).tasks(AppSim(1)))
    first = {t.pattern_id for t in tasks[:100]}
    assert len(first) <= 24 and len({t.pattern_id for t in tasks[100:]} - first) > 0
    zipf = [t.pattern_id for t in TaskStream(n_tasks=300, seed=0).tasks(AppSim(0))]
    counts = sorted(np.unique(zipf, return_counts=True)[1], reverse=True)
    assert counts[0] > 5 * counts[len(counts) // 2]  # heavy head


def test_affected_and_endpoints() -> None:
    from agentmill.envs.appsim import PATTERN_BY_ID

    assert affected(PATTERN_BY_ID["total_sent_month"]) and not affected(PATTERN_BY_ID["note_create"])
    assert step_endpoints(PATTERN_BY_ID["total_sent_month"].steps) == ["auth.login", "payments.list"]


def test_step_language_rejects_unknown_endpoints() -> None:
    from agentmill.envs.appsim import Step

    with pytest.raises(ValueError, match="unknown endpoint"):
        Step("call", "payments.teleport")
    with pytest.raises(ValueError, match="unknown app"):
        Step("login", "bank")
