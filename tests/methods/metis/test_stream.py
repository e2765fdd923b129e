"""run_stream end to end (LLM-free): memory arms learn, Metis codifies, demotes after the API change."""

from __future__ import annotations

import pytest

from agentmill.envs.appsim import TaskStream
from agentmill.methods.metis import MetisConfig, ScriptedPolicyConfig, run_stream


@pytest.mark.slow  # five 80-task streams, ~6 s
def test_memory_helps_and_metis_codifies_and_demotes() -> None:
    stream = TaskStream(n_tasks=80, shift_at=40, seed=0)
    res = {m: run_stream(MetisConfig(mode=m), stream) for m in ("none", "text_only", "metis")}
    assert res["text_only"].accuracy() > res["none"].accuracy()
    assert res["metis"].total("llm_calls") < res["text_only"].total("llm_calls")
    tools = res["metis"].tools
    assert any(t["admitted"] for t in tools)
    assert res["none"].total("codifier_calls") == 0 and not res["none"].tools
    # deterministic given seeds
    again = run_stream(MetisConfig(mode="metis"), stream)
    assert [r["success"] for r in again.rows] == [r["success"] for r in res["metis"].rows]


def test_no_demotion_for_code_naive_and_trust_switch() -> None:
    stream = TaskStream(n_tasks=40, shift_at=20, seed=1)
    naive = run_stream(MetisConfig(mode="code_naive"), stream)
    assert all(t["status"] != "demoted" for t in naive.tools)
    assert sum(r["built"] == "transcribed" for r in naive.rows) >= 1
    sceptic = run_stream(MetisConfig(mode="code_naive"), stream, policy_config=ScriptedPolicyConfig(p_trust_tool=0.0))
    tool_rows = [r for r in sceptic.rows if r["tool_id"] and r["tool_error"] is None]
    assert all(r["llm_calls"] >= 3 for r in tool_rows)  # every returned tool answer was verified (+2 calls)


def test_lm_codifier_needs_an_lm() -> None:
    with pytest.raises(ValueError, match="needs an LM"):
        run_stream(MetisConfig(codifier="lm"), TaskStream(n_tasks=5, shift_at=None))


def test_ledger_records_every_memory_event(tmp_path) -> None:
    from agentmill.methods.metis import MemoryStore

    r = run_stream(MetisConfig(mode="metis"), TaskStream(n_tasks=30, shift_at=15, seed=2), out=tmp_path)
    again = MemoryStore.replay(tmp_path)
    assert again.snapshot_dict() == r.store.snapshot_dict()  # type: ignore[attr-defined]
    assert again.ledger.verify() == []
