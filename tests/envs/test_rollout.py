"""collect_groups: shapes, seeding, oracle stripping, labels, JSONL; RandomPolicy and EpsilonOraclePolicy."""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pytest
from scipy import stats

from agentmill.core.types import DEAD_END_DISTANCE, END_TERMINATED, END_TRUNCATED, StepTable
from agentmill.envs.keydoor import KeyDoorConfig, KeyDoorEnv, generate_layout
from agentmill.envs.rollout import EpsilonOraclePolicy, Policy, RandomPolicy, collect_groups

CFG = KeyDoorConfig()
TASKS = [generate_layout(s, CFG) for s in (0, 1, 2)]


def factory(layout):
    return KeyDoorEnv(layout, CFG)


class SpyPolicy(RandomPolicy):
    """Records every info it is shown."""

    def __init__(self, uses_oracle=False):
        self.uses_oracle = uses_oracle
        self.seen = []

    def act(self, obs, info, rng):
        self.seen.append(info)
        return super().act(obs, info, rng)


def test_shapes_ids_and_trajectories():
    steps, labels, trajs = collect_groups(factory, RandomPolicy(), TASKS, group_size=4, seed=1)
    assert isinstance(steps, StepTable) and len(labels) == len(steps)
    assert steps.n_groups == 3 and steps.n_trajectories == 12 and len(trajs) == 12
    assert sorted(set(steps.group_id.tolist())) == sorted(f"{lay.task_id}@1/{k}" for k, lay in enumerate(TASKS))
    assert sum(len(t.steps) for t in trajs) == len(steps)
    starts = steps.traj_starts
    for tr, s in zip(trajs, starts):
        n = len(tr.steps)
        assert [st.action for st in tr.steps] == steps.action[s:s + n].tolist()
        assert tr.reward == pytest.approx(steps.reward[s:s + n].sum())
        assert tr.meta["success"] == steps.success[s]
        assert steps.next_obs[s + n - 1] == tr.meta["final_obs"]
        # every episode either won (terminated) or hit KeyDoor's 30-step limit (truncated)
        end = steps.end[s + n - 1]
        assert (end == END_TERMINATED) == tr.meta["success"]
        assert end == END_TERMINATED or n == CFG.max_steps
    # candidates are the admissible commands the policy chose among, and it chose from them
    for act, cands, info in zip(steps.action, steps.candidates, steps.info):
        assert act in cands and list(cands) == info["admissible_commands"]


def test_oracle_is_stripped_from_tables_and_from_policies_that_do_not_ask_for_it():
    spy = SpyPolicy()
    steps, labels, trajs = collect_groups(factory, spy, TASKS[:1], group_size=3, seed=0)
    assert spy.seen and all("oracle" not in info for info in spy.seen)
    assert all("oracle" not in d for d in list(steps.info) + list(steps.next_info))
    assert all("oracle" not in st.info for tr in trajs for st in tr.steps)
    spy = SpyPolicy(uses_oracle=True)
    collect_groups(factory, spy, TASKS[:1], group_size=1, seed=0)
    assert all("oracle" in info for info in spy.seen)


def test_seeded_per_task_and_rollout_and_independent_of_other_tasks():
    a = collect_groups(factory, RandomPolicy(), TASKS, group_size=3, seed=7)[0]
    b = collect_groups(factory, RandomPolicy(), TASKS, group_size=3, seed=7)[0]
    assert a.equals(b)
    c = collect_groups(factory, RandomPolicy(), TASKS, group_size=3, seed=8)[0]
    assert not a.equals(c)
    first = collect_groups(factory, RandomPolicy(), TASKS[:1], group_size=3, seed=7)[0]
    assert first.equals(a.take(np.flatnonzero(a.group_index == 0)))
    # rollouts within a group differ (each has its own stream)
    assert len({tuple(a.action[a.traj_index == j]) for j in range(3)}) == 3


def test_labels_follow_the_oracle_distances():
    steps, labels, _ = collect_groups(factory, EpsilonOraclePolicy(0.5), TASKS, group_size=8, seed=3)
    last = steps.is_last
    # consecutive rows chain: the distance after step t is the distance before step t+1
    assert np.array_equal(labels.dist_after[:-1][~last[:-1]], labels.dist_before[1:][~last[:-1]])
    assert np.array_equal(labels.progress, (labels.dist_after < labels.dist_before).astype(np.int8))
    won = steps.success & last
    assert np.all(labels.dist_after[won] == 0)
    assert np.array_equal(labels.dead_end, labels.dist_after >= DEAD_END_DISTANCE)
    assert labels.progress.min() == 0 and labels.progress.max() == 1


def test_greedy_oracle_wins_in_the_oracle_distance_with_progress_on_every_step():
    steps, labels, trajs = collect_groups(factory, EpsilonOraclePolicy(0.0), TASKS, group_size=2, seed=0)
    assert steps.success.all()
    for tr, s in zip(trajs, steps.traj_starts):
        assert len(tr.steps) == labels.dist_before[s]
    assert (labels.progress == 1).all()


def test_max_steps_truncates():
    steps, _, trajs = collect_groups(factory, RandomPolicy(), TASKS[:1], group_size=4, max_steps=5, seed=0)
    for tr, s in zip(trajs, steps.traj_starts):
        n = len(tr.steps)
        assert n <= 5 and (n == 5 or steps.end[s + n - 1] == END_TERMINATED)
        assert steps.end[s + n - 1] in (END_TERMINATED, END_TRUNCATED)
    with pytest.raises(ValueError):
        collect_groups(factory, RandomPolicy(), TASKS, max_steps=0)
    with pytest.raises(ValueError):
        collect_groups(factory, RandomPolicy(), [])


def test_jsonl_is_appended_per_group_and_round_trips(tmp_path):
    out = tmp_path / "rollouts.jsonl"
    steps, labels, _ = collect_groups(factory, RandomPolicy(), TASKS[:2], group_size=3, seed=2, out=out,
                                      env_name="keydoor-v0", meta={"policy": "random"})
    lines = out.read_text().splitlines()
    assert len(lines) == 6
    back, back_labels = StepTable.from_jsonl(out)
    assert back.equals(steps)
    assert np.array_equal(back_labels.dist_before, labels.dist_before)
    assert np.array_equal(back_labels.progress, labels.progress)
    import json
    rec = json.loads(lines[0])
    assert rec["env"] == "keydoor-v0" and rec["meta"] == {"policy": "random"} and rec["task_id"] == TASKS[0].task_id


# ---- policies ------------------------------------------------------------------------------------------------


def test_random_policy_is_uniform():
    pol = RandomPolicy()
    assert isinstance(pol, Policy)
    info = {"admissible_commands": ["a", "b", "c", "d"]}
    rng = np.random.default_rng(0)
    counts = Counter(pol.act("", info, rng)[0] for _ in range(4000))
    assert stats.chisquare([counts[c] for c in "abcd"]).pvalue > 1e-3
    assert pol.logprob("", info, "b") == pytest.approx(-math.log(4))
    assert pol.logprob("", info, "z") == -math.inf
    with pytest.raises(ValueError, match="empty"):
        pol.act("", {"admissible_commands": []}, rng)


def test_epsilon_oracle_probabilities_and_sampling():
    pol = EpsilonOraclePolicy(0.4)
    info = {"admissible_commands": ["a", "b", "c", "d"], "oracle": {"plan_commands": ["b", "c"]}}
    p = pol.probs(info)
    assert p == pytest.approx({"a": 0.1, "b": 0.4, "c": 0.4, "d": 0.1})
    rng = np.random.default_rng(1)
    draws = [pol.act("", info, rng) for _ in range(5000)]
    assert all(lp == pytest.approx(math.log(p[a])) for a, lp in draws)
    counts = Counter(a for a, _ in draws)
    assert stats.chisquare([counts[c] for c in "abcd"], [5000 * p[c] for c in "abcd"]).pvalue > 1e-3
    # no plan (won, dead end, unknown): uniform
    dead = {"admissible_commands": ["a", "b"], "oracle": {"plan_commands": []}}
    assert pol.probs(dead) == {"a": 0.5, "b": 0.5}
    with pytest.raises(ValueError, match="oracle"):
        pol.act("", {"admissible_commands": ["a"]}, rng)
    with pytest.raises(ValueError):
        EpsilonOraclePolicy(1.5)
