"""CollapseMonitor: group flags, the TRL reward wrapper, lake telemetry."""

import json
import math

import numpy as np
import pytest

from agentmill.methods.tree_rollouts.monitor import CollapseMonitor


def test_summary_by_hand():
    m = CollapseMonitor()
    m.observe("a", [1, 1, 1, 1])
    m.observe("b", [0, 0, 0, 0])
    m.observe("c", [0, 1, None, 0])
    m.observe("d", [0.2, 0.2 + 1e-9])          # fp32-style noise is still collapse
    s = m.summary()
    assert s["collapse/rate"] == 0.75 and s["collapse/all_success"] == 0.25 and s["collapse/all_fail"] == 0.5
    assert s["collapse/mixed_ratio"] == 0.25
    assert math.isnan(s["collapse/lake_fit_z0"])   # < 8 prompts: no fit


def test_wrapper_groups_trl_rows_and_flags_the_empty_lake(tmp_path):
    m = CollapseMonitor()

    def reward(prompts, completions, **kw):
        return [1.0 if p == "easy" else 0.0 for p in prompts]

    wrapped = m.wrap_reward_fn(reward, group_size=4)
    for _ in range(30):   # 120 failures: Jeffreys 95% upper bound on p < 0.02
        assert wrapped(prompts=["easy"] * 4 + ["lake"] * 4, completions=["x"] * 8) == [1.0] * 4 + [0.0] * 4
    s = m.summary()
    assert s["collapse/empty_lake_prompts"] == 1 and s["collapse/budget_on_empty_lake"] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="whole groups"):
        wrapped(prompts=["easy"] * 3, completions=["x"] * 3)
    m.to_jsonl(tmp_path / "g.jsonl")
    rows = [json.loads(x) for x in (tmp_path / "g.jsonl").read_text().splitlines()]
    assert len(rows) == 60 and rows[1] == {"prompt": "lake", "n": 4, "k": 0, "collapsed": True,
                                           "all_success": False, "all_fail": True}


def test_lake_fit_runs_with_enough_prompts():
    rng = np.random.default_rng(0)
    m = CollapseMonitor()
    for i in range(30):
        p = 0.0 if i < 12 else rng.beta(1, 3)
        m.observe(f"p{i}", list((rng.random(16) < p).astype(float)))
    s = m.summary()
    assert 0.0 <= s["collapse/lake_fit_z0"] <= 1.0
