"""Smoke run of e176.llm (AC-12) over the loopback stub, and its judge failing on a leak."""

from __future__ import annotations

import pytest

from agentmill.core.executor import make_executor
from agentmill.core.stats import Estimate
from agentmill.experiments import get
from agentmill.experiments.protocol import RunContext


@pytest.mark.slow
def test_llm_smoke(tmp_path) -> None:
    exp = get("e176.llm")
    ctx = RunContext(profile="smoke", model="none", executor=make_executor("serial"), work_dir=tmp_path)
    m = exp.measure(exp.setups["smoke"], ctx)
    (run,) = ctx.data["runs"]
    assert run["ok"] and run["retried_malformed"] and run["failed_candidate_logged"], run
    assert run["critic_verdicts"] == ["continue"] and run["critic_ok"] and run["by_role"]["critic"] == 1
    assert run["metric_code_used"] == 1 and run["metric_code_fallbacks"] == 1
    assert run["lm_calls"] == run["http_requests"] > 0 and run["replay_requests"] == 0
    assert exp.judge("quick", m) == {"E176-AC12a": "supported", "E176-AC12b": "supported",
                                     "E176-AC12c": "supported"}
    m["ac12_leaked_tokens"] = Estimate.exact(1.0)
    assert exp.judge("quick", m)["E176-AC12c"] == "not_supported"
    assert len(exp.plots(ctx.data, tmp_path)) == 1
