"""The recurrence gate, the codify request and the memory store."""

from __future__ import annotations

import dataclasses
import inspect

import numpy as np
import pytest

from agentmill.methods.metis.gate import RecurrenceGate
from agentmill.methods.metis.records import CodifyRequest, Fact


@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_gate_opens_at_the_kth_occurrence_even_after_failures(k: int) -> None:
    rng = np.random.default_rng(k)
    for _ in range(50):
        g = RecurrenceGate(k=k)
        ok = rng.random(k) < 0.3  # mostly failed runs: they count as demand all the same
        for i in range(k):
            g.observe("p", i)
            succ = int(ok[: i + 1].sum()) or (1 if i == k - 1 else 0)
            d = g.decide("p", i, has_active_tool=False, plan_successes=succ or None)
            assert d.codify == (i == k - 1), (i, d.reason)


def test_gate_needs_a_plan_no_active_tool_and_waits_after_a_block() -> None:
    g = RecurrenceGate(k=2, rebuild_after=3)
    for i in range(4):
        g.observe("p", i)
    assert not g.decide("p", 4, has_active_tool=False, plan_successes=None).codify
    assert not g.decide("p", 4, has_active_tool=True, plan_successes=2).codify
    assert g.decide("p", 4, has_active_tool=False, plan_successes=2).codify
    g.block("p")
    for i in range(5, 7):
        g.observe("p", i)
        assert not g.decide("p", i, has_active_tool=False, plan_successes=2).codify
    g.observe("p", 7)
    assert g.decide("p", 7, has_active_tool=False, plan_successes=2).codify
    with pytest.raises(ValueError):
        RecurrenceGate(k=0)


def test_gate_window_counts_recent_demand_only() -> None:
    g = RecurrenceGate(k=2, window=5)
    g.observe("p", 0)
    g.observe("p", 10)
    assert g.demand("p", 10) == 1 and not g.decide("p", 10, has_active_tool=False, plan_successes=1).codify


def test_codify_request_has_no_trajectory() -> None:
    from agentmill.methods.metis.codify import CompileCodifier

    names = {f.name for f in dataclasses.fields(CodifyRequest)}
    assert names == {"pattern_key", "signature", "plan_steps", "api_docs", "facts"}
    with pytest.raises(TypeError):
        CodifyRequest("k", (), (), trajectory=[])  # type: ignore[call-arg]
    assert list(inspect.signature(CompileCodifier().codify).parameters) == ["request"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        CodifyRequest("k", (), ()).pattern_key = "x"  # type: ignore[misc]


def test_codify_request_names_a_missing_slot() -> None:
    from agentmill.envs.appsim import PATTERN_BY_ID

    p = PATTERN_BY_ID["total_sent_month"]
    with pytest.raises(ValueError, match=r"slot \{month\}"):
        CodifyRequest(p.key, (), p.steps)


def test_config_errors_name_the_field() -> None:
    from agentmill.methods.metis.config import MetisConfig

    with pytest.raises(ValueError, match="k must be >= 1"):
        MetisConfig(k=0)
    with pytest.raises(ValueError, match="mode"):
        MetisConfig(mode="magic")  # type: ignore[arg-type]
    assert MetisConfig(mode="eager", k=5).gate_k == 1


def test_facts_are_superseded_never_deleted_and_the_ledger_replays(tmp_path) -> None:
    from agentmill.envs.appsim import PATTERN_BY_ID
    from agentmill.methods.metis.memory import MemoryStore
    from agentmill.methods.metis.records import Plan, Pitfall

    store = MemoryStore(tmp_path)
    assert store.put_fact(Fact("payments.list", "page_limit_max", 20), 1)
    assert not store.put_fact(Fact("payments.list", "page_limit_max", 20), 2)  # same value: no event
    assert store.put_fact(Fact("payments.list", "page_limit_max", 5), 3)
    assert store.fact("payments.list", "page_limit_max").value == 5
    old = [f for f in store.facts(current_only=False) if f.value == 20]
    assert len(old) == 1 and old[0].superseded_by is not None
    p = PATTERN_BY_ID["total_sent_month"]
    store.put_plan(Plan(p.key, p.steps, 1, 1, 0, 3, ()), 3)
    store.put_pitfall(Pitfall("payments.list", 401, "not logged in", "log in first", "login"), 4)
    store.write_snapshot()
    again = MemoryStore.replay(tmp_path)
    assert again.snapshot_dict() == store.snapshot_dict()
    assert again.plan(p.key).steps == p.steps
    assert again.ledger is not None and again.ledger.verify() == []
