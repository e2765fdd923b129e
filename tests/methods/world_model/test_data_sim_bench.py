"""Transition data, the simulated env, and AgentWorldBench interop."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from agentmill.envs.base import check_info, make
from agentmill.envs.keydoor import KeyDoorEnv, generate_layout
from agentmill.methods.world_model.bench import bench_messages, check_record, export_bench, load_bench, score
from agentmill.methods.world_model.data import WM_WORLD, TransitionTable, assign_splits, collect_keydoor
from agentmill.methods.world_model.domain import KeyDoorDomain
from agentmill.methods.world_model.format import QwenFormat
from agentmill.methods.world_model.simulator import CopyPrevious, SimulatedEnv


def test_collection_is_deterministic_and_split_by_task(tmp_path) -> None:
    tasks = assign_splits(2, 1, 1, 1, 0)
    a = collect_keydoor(tasks, 2, seed=3)
    b = collect_keydoor(tasks, 2, seed=3)
    assert a.rows == b.rows and {r.split for r in a.rows} == {"train", "cpt", "dev", "test"}
    assert any(r.changed for r in a.rows) and any(not r.changed for r in a.rows) and any(r.invalid for r in a.rows)
    assert all(r.changed == bool(r.diff) for r in a.rows)
    a.to_jsonl(tmp_path / "t.jsonl")
    assert TransitionTable.from_jsonl(tmp_path / "t.jsonl").rows == a.rows
    bad = dataclasses.replace(a.rows[0], split="test" if a.rows[0].split != "test" else "train")
    with pytest.raises(ValueError, match="is in split"):
        TransitionTable([a.rows[0], bad])


class Oracle:
    """A predictor that steps a real env in lock-step: the perfect world model."""

    def __init__(self, layout) -> None:
        self.env = KeyDoorEnv(layout, WM_WORLD)

    def predict_next(self, items):
        return [self.env.step(a)[0] for _, a, _, _ in items]


def test_oracle_simulator_equals_the_real_env() -> None:
    lay = generate_layout(11, WM_WORLD)
    real, oracle = KeyDoorEnv(lay, WM_WORLD), Oracle(lay)
    sim = SimulatedEnv(oracle, lay, WM_WORLD)
    for ep in range(5):
        rng = np.random.default_rng(ep)
        o1, i1 = real.reset(seed=ep)
        oracle.env.reset(seed=ep)
        o2, i2 = sim.reset(seed=ep)
        assert o1 == o2
        done = False
        while not done:
            check_info(i2)
            assert i1["admissible_commands"] == i2["admissible_commands"]
            a = i1["admissible_commands"][int(rng.integers(len(i1["admissible_commands"])))]
            o1, r1, t1, u1, i1 = real.step(a)
            o2, r2, t2, u2, i2 = sim.step(a)
            assert (o1, r1, t1, u1, i1["won"]) == (o2, r2, t2, u2, i2["won"])
            assert (i1["description"], i1["inventory"]) == (i2["description"], i2["inventory"])
            done = t1 or u1


def test_copy_previous_never_wins_and_parse_failures_are_flagged() -> None:
    lay = generate_layout(12, WM_WORLD)
    sim = SimulatedEnv(CopyPrevious(), lay, WM_WORLD)
    obs, info = sim.reset()
    for _ in range(WM_WORLD.max_steps):
        obs, r, term, trunc, info = sim.step(info["admissible_commands"][0])
        assert not term
    assert trunc

    class Garbage:
        def predict_next(self, items):
            return ["???"] * len(items)

    sim = SimulatedEnv(Garbage(), lay, WM_WORLD)
    _, info = sim.reset()
    obs, r, term, trunc, info = sim.step("look")
    assert info["sim_parse_failure"] and info["invalid_action"] and KeyDoorDomain().parse(obs) is not None


def test_wm_prefix_builds_a_simulated_env(tmp_path) -> None:
    from agentmill.methods.world_model.simulator import save_world_model
    from agentmill.methods.world_model.train import new_model

    save_world_model(tmp_path / "wm", new_model(1, 16, 2, 64, 0), WM_WORLD)
    env = make(f"wm:{tmp_path / 'wm'}", layout_seed=5)
    assert isinstance(env, SimulatedEnv) and env.layout.seed == 5
    with pytest.raises(FileNotFoundError):
        make(f"wm:{tmp_path / 'nothing'}")


def test_bench_roundtrip_and_scores(tmp_path) -> None:
    table = collect_keydoor(assign_splits(0, 0, 0, 1, 2), 1, seed=0)
    fmt = QwenFormat(history_k=None)
    export_bench(table.episodes(), fmt, tmp_path)
    recs = load_bench(tmp_path)
    ep = table.episodes()[0]
    last = recs[len(ep) - 1]
    msgs = bench_messages(last)
    assert len(msgs) == 1 + 2 * (len(ep) - 1) + 1 and msgs[0].role == "system"
    with pytest.raises(ValueError, match="lacks"):
        check_record({"prompt": []})
    with pytest.raises(ValueError, match="out of range"):
        check_record({"prompt": ["a"], "response": ["b"], "turn_idx": 3})
    judged = [{"task": "mcp", "failed": 0.0, "format": 5, "factuality": 3, "consistency": 0, "realism": 5,
               "quality": 5, "total_score": 4.5}, {"task": "mcp", "failed": 1.0}]
    off, strict = score(judged, "official"), score(judged, "strict")
    assert off["overall"] == pytest.approx((4.5 - 1) / 4 * 100)
    assert strict["overall"] == pytest.approx(((4.5 + 1) / 2 - 1) / 4 * 100)
    assert off["subtasks"]["mcp"]["scores"]["consistency"] != off["subtasks"]["mcp"]["scores"]["consistency"]  # NaN
    assert json.dumps(strict["subtasks"]["mcp"]["failed"]) == "1"


def test_project_fixture_rebuilds_as_the_official_rule() -> None:
    from pathlib import Path

    from agentmill.core.types import Message
    from agentmill.methods.world_model.bench import ground_truth

    recs = {r["id"]: r for r in load_bench(Path(__file__).parents[2] / "fixtures" / "agentworldbench")}
    mcp = recs["fx-mcp-1"]
    assert bench_messages(mcp) == [Message("system", mcp["system_str"]), Message("user", mcp["prompt"][0]),
                                   Message("assistant", mcp["response"][0]), Message("user", mcp["prompt"][1])]
    assert "buy milk" in ground_truth(mcp) and "{tool_definitions}" in mcp["system_str"]
    text = recs["fx-text-1"]  # no system_str: no system message; current_prompt overrides prompt[turn_idx - 1]
    assert bench_messages(text) == [Message("user", "### Turn 1 (override)")]
