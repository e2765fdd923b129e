"""GRPO, GiGPO and G2PO-style estimators: the worked example of docs/methods/g2po.md,
reference re-implementations, bad input."""

from __future__ import annotations

import io
import math
import warnings
from collections import defaultdict

import numpy as np
import pytest

from agentmill.core.types import StepTable
from agentmill.methods.g2po import G2POConfig, g2po_advantages, gigpo_advantages, grpo_advantages, token_advantages
from agentmill.methods.g2po.config import GiGPOConfig, GRPOConfig
from agentmill.methods.g2po.keys import ExactKey
from tests.helpers.step_tables import golden_table, random_step_table

KEY = ExactKey()


# -- worked example (gamma = 0.5, epsilon = 1e-6) ---------------------------------------------------------------

def test_golden_g2po_graph_term() -> None:
    res = g2po_advantages(golden_table(), KEY, G2POConfig(gamma=0.5))
    expected = [0.242535, 0.970140, 0.0, -0.485070, 0.970140, 0.242535, -1.940279]
    np.testing.assert_allclose(res.step, expected, atol=1e-6)
    np.testing.assert_allclose(res.returns, [0.5, 1, 0.25, 0.5, 1, 0, 0], atol=1e-15)
    np.testing.assert_allclose(res.episode, [0.577349] * 5 + [-1.154699] * 2, atol=1e-6)
    np.testing.assert_allclose(res.advantages, res.episode + res.step, atol=1e-15)  # omega = 1
    assert res.diagnostics["sigma_delta"] == pytest.approx(0.343592, abs=1e-6)
    assert abs(res.diagnostics["mu_delta"]) < 1e-15  # P2
    # P5: tau3's first move S->A, inside a failed run, gets positive graph credit; tau2's detour B->A negative
    assert res.step[5] > 0 and res.episode[5] < 0 and res.step[3] < 0


def test_golden_grpo_and_gigpo() -> None:
    tb = golden_table()
    np.testing.assert_allclose(grpo_advantages(tb).advantages, [0.577349] * 5 + [-1.154699] * 2, atol=1e-6)
    gi = gigpo_advantages(tb, KEY, GiGPOConfig(gamma=0.5))
    np.testing.assert_allclose(gi.step, [0.25, 1 / 3, 0, 0, 1 / 3, -0.25, -2 / 3], atol=1e-12)
    # GiGPO's default mode is mean-only for both terms: episode = R - mean R
    np.testing.assert_allclose(gi.episode, [1 / 3] * 5 + [-2 / 3] * 2, atol=1e-12)
    np.testing.assert_allclose(gi.advantages, gi.episode + gi.step, atol=1e-15)


def test_golden_graph_only_combination_and_omega() -> None:
    tb = golden_table()
    only = g2po_advantages(tb, KEY, G2POConfig(gamma=0.5, combine="graph"))
    both = g2po_advantages(tb, KEY, G2POConfig(gamma=0.5, omega=0.5))
    np.testing.assert_array_equal(only.advantages, only.step)
    assert not only.episode.any()
    np.testing.assert_allclose(both.advantages, both.episode + 0.5 * only.step, atol=1e-15)


# -- GRPO against TRL's formula on single-step groups ------------------------------------------------------------

def _trl_grpo(rewards: np.ndarray, num_generations: int, scale: bool) -> np.ndarray:
    """TRL ``GRPOTrainer._generate_and_score_completions``: reward minus the mean of its ``num_generations`` group,
    divided by (unbiased group std + 1e-4) unless ``scale_rewards="none"``."""
    grouped = rewards.reshape(-1, num_generations)
    mean = np.repeat(grouped.mean(axis=1), num_generations)
    std = np.repeat(grouped.std(axis=1, ddof=1), num_generations)
    adv = rewards - mean
    return adv / (std + 1e-4) if scale else adv


@pytest.mark.parametrize("num_generations", [2, 3, 8])
@pytest.mark.parametrize("scale", [True, False])
def test_grpo_matches_trl_on_single_step_groups(num_generations: int, scale: bool) -> None:
    rng = np.random.default_rng(num_generations)
    rewards = rng.choice([0.0, 0.5, 1.0], size=6 * num_generations)
    rewards[:num_generations] = 1.0  # one group with all rewards equal: TRL gives 0 / (0 + 1e-4) = 0
    tb = StepTable.from_episodes(
        dict(group_id=f"p{k // num_generations}", traj_id=f"c{k}", obs=["prompt", "done"], actions=["answer"],
             rewards=[r]) for k, r in enumerate(rewards))
    ours = grpo_advantages(tb, GRPOConfig(norm="mean_std" if scale else "mean", epsilon=1e-4)).advantages
    assert np.max(np.abs(ours - _trl_grpo(rewards, num_generations, scale))) < 1e-12


def test_grpo_singleton_group_gets_zero_and_broadcasts_over_steps() -> None:
    tb = StepTable.from_episodes([
        dict(group_id="solo", traj_id="x", obs="abc", actions=["u", "v"], rewards=[0, 1]),
        dict(group_id="pair", traj_id="y", obs="ab", actions=["u"], rewards=[1]),
        dict(group_id="pair", traj_id="z", obs="abc", actions=["u", "v"], rewards=[0, 0], end="truncated"),
    ])
    res = grpo_advantages(tb)
    assert res.advantages[:2].tolist() == [0.0, 0.0]
    assert res.advantages[3] == res.advantages[4] and res.advantages[2] == -res.advantages[3] > 0
    assert res.diagnostics["singleton_groups"] == 1.0


# -- GiGPO against a plain reference loop of verl-agent's semantics ----------------------------------------------

def _reference_gigpo(tb: StepTable, gamma: float, omega: float, norm: str, eps: float) -> np.ndarray:
    """Row loops, as verl-agent's ``core_gigpo``: per-trajectory discounted returns computed backwards; episode
    groups by uid with (score - mean)[/ (std + eps)]; step groups = identical anchor observation inside a uid;
    unbiased std. The singleton policy is this project's (0 for a singleton episode or step group; g2po README deviation
    3), not verl-agent's mean 0 / std 1."""
    rows = list(range(len(tb)))
    traj_rows: dict[tuple[str, str], list[int]] = defaultdict(list)
    for r in rows:
        traj_rows[(str(tb.group_id[r]), str(tb.traj_id[r]))].append(r)
    G = [0.0] * len(rows)
    score = {}
    for key, rs in traj_rows.items():
        running = 0.0
        for r in reversed(rs):
            running = float(tb.reward[r]) + gamma * running
            G[r] = running
        score[key] = sum(float(tb.reward[r]) for r in rs)

    def norm_groups(members: dict, value) -> dict:
        out = {}
        for _, items in members.items():
            vals = [value(x) for x in items]
            n = len(vals)
            if n == 1:
                out[items[0]] = 0.0
                continue
            mean = sum(vals) / n
            std = math.sqrt(sum((v - mean) ** 2 for v in vals) / (n - 1))
            for x, v in zip(items, vals):
                if max(vals) == min(vals):
                    out[x] = 0.0
                elif norm == "mean_std":
                    out[x] = (v - mean) / (std + eps)
                else:
                    out[x] = v - mean
        return out

    ep_groups: dict[str, list] = defaultdict(list)
    for key in traj_rows:
        ep_groups[key[0]].append(key)
    ep = norm_groups(ep_groups, lambda k: score[k])
    step_groups: dict[tuple[str, str], list] = defaultdict(list)
    for r in rows:
        step_groups[(str(tb.group_id[r]), KEY(tb.obs[r], tb.info[r]))].append(r)
    st = norm_groups(step_groups, lambda r: G[r])
    return np.array([ep[(str(tb.group_id[r]), str(tb.traj_id[r]))] + omega * st[r] for r in rows])


def test_gigpo_matches_reference_loop_on_200_random_tables() -> None:
    rng = np.random.default_rng(0)
    worst = 0.0
    for k in range(200):
        tb = random_step_table(rng, n_groups=int(rng.integers(1, 4)), group_size=int(rng.integers(1, 6)),
                               dense=bool(k % 2))
        norm = ("mean", "mean_std")[k % 3 == 0]
        gamma, omega = (0.95, 1.0) if k % 4 else (0.7, 0.5)
        cfg = GiGPOConfig(gamma=gamma, omega=omega, norm=norm)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ours = gigpo_advantages(tb, KEY, cfg).advantages
        worst = max(worst, float(np.max(np.abs(ours - _reference_gigpo(tb, gamma, omega, norm, 1e-6)))))
    assert worst < 1e-12


def test_gigpo_similarity_merges_near_duplicates_only() -> None:
    long = "You are in the kitchen. There is a table here with a red key on it. Exits: north, east."
    near = long.replace("red", "rad")  # ratio > 0.95
    tb = StepTable.from_episodes([
        dict(group_id="g", traj_id="a", obs=[long, "far"], actions=["x"], rewards=[1]),
        dict(group_id="g", traj_id="b", obs=[near, "far"], actions=["x"], rewards=[0], success=False),
        dict(group_id="g", traj_id="c", obs=["something else entirely", "far"], actions=["x"], rewards=[0],
             success=False),
    ])
    exact = gigpo_advantages(tb, KEY, GiGPOConfig())
    sim = gigpo_advantages(tb, KEY, GiGPOConfig(similarity=0.95))
    assert exact.step.tolist() == [0.0, 0.0, 0.0]  # three singleton anchors
    np.testing.assert_allclose(sim.step, [0.5, -0.5, 0.0], atol=1e-12)
    assert sim.diagnostics["n_anchor_groups"] == 2.0


# -- consistency, determinism, I/O -------------------------------------------------------------------------------

def test_outputs_are_bitwise_deterministic_and_survive_jsonl() -> None:
    tb = random_step_table(np.random.default_rng(7), n_groups=3, group_size=8, max_len=10)
    buf = io.StringIO()
    tb.to_jsonl(buf)
    buf.seek(0)
    tb2, _ = StepTable.from_jsonl(buf)
    for fn in (lambda t: g2po_advantages(t, KEY), lambda t: gigpo_advantages(t, KEY), grpo_advantages):
        a, b, c = fn(tb), fn(tb), fn(tb2)
        assert a.advantages.tobytes() == b.advantages.tobytes() == c.advantages.tobytes()
        assert a.advantages.dtype == np.float64 and a.advantages.shape == (len(tb),)


def test_token_advantages_broadcast_over_response_tokens() -> None:
    mask = np.array([[0, 1, 1, 0], [1, 1, 1, 1]])
    out = token_advantages(np.array([0.5, -2.0]), mask)
    assert out.tolist() == [[0, 0.5, 0.5, 0], [-2, -2, -2, -2]] and out.dtype == np.float64
    with pytest.raises(ValueError, match="response_mask"):
        token_advantages(np.zeros(3), mask)


@pytest.mark.parametrize("make, match", [
    (lambda: G2POConfig(gamma=0.0), "gamma"), (lambda: G2POConfig(gamma=1.5), "gamma"),
    (lambda: G2POConfig(omega=-1), "omega"), (lambda: G2POConfig(graph_norm="zscore"), "graph_norm"),
    (lambda: G2POConfig(std_over="nodes"), "std_over"), (lambda: G2POConfig(scope="world"), "scope"),
    (lambda: G2POConfig(visit="last"), "visit"), (lambda: G2POConfig(truncation="x"), "truncation"),
    (lambda: G2POConfig(combine="sum"), "combine"), (lambda: GiGPOConfig(similarity=1.0), "similarity"),
    (lambda: GiGPOConfig(norm="std"), "norm"), (lambda: GRPOConfig(epsilon=0), "epsilon"),
])
def test_bad_config_values_raise(make, match) -> None:
    with pytest.raises(ValueError, match=match):
        make()


def test_key_errors_name_the_row_and_copied_rewards_warn() -> None:
    from agentmill.methods.g2po.keys import FieldsKey
    with pytest.raises(KeyError, match=r"description.*group 'g', trajectory 't1', row 0"):
        g2po_advantages(golden_table(), FieldsKey(("description",)))
    copied = StepTable.from_episodes([
        dict(group_id="g", traj_id="a", obs="xyz", actions=["u", "v"], rewards=[1, 1]),
        dict(group_id="g", traj_id="b", obs="xwz", actions=["u", "v"], rewards=[0, 0], success=False)])
    with pytest.warns(UserWarning, match="same nonzero reward on every step"):
        grpo_advantages(copied)
    with pytest.raises(TypeError, match="StepTable"):
        grpo_advantages([1, 2, 3])  # type: ignore[arg-type]


def test_low_merge_rate_warns() -> None:
    tb = random_step_table(np.random.default_rng(1), unique_obs=True, shared_start=False, group_size=8)
    with pytest.warns(UserWarning, match="merge_rate"):
        res = g2po_advantages(tb, KEY)
    assert res.diagnostics["merge_rate"] == 0.0 and res.diagnostics["singleton_fraction"] == 1.0


def test_golden_std_over_edges_and_batch_scope() -> None:
    tb = golden_table()
    td = {"SA": 1 / 12, "SB": 0.0, "AW": 1 / 3, "BA": -1 / 6, "AC": -2 / 3}
    rows = ["SA", "AW", "SB", "BA", "AW", "SA", "AC"]
    edges = np.array(list(td.values()))
    mu, sd = edges.mean(), edges.std(ddof=1)
    res = g2po_advantages(tb, KEY, G2POConfig(gamma=0.5, std_over="edges"))
    np.testing.assert_allclose(res.step, [(td[e] - mu) / (sd + 1e-6) for e in rows], atol=1e-12)
    assert res.diagnostics["mu_delta"] == pytest.approx(-1 / 12)  # edges: the zero-mean property P2 is per step
    # two copies of the group in one batch: batch scope pools identical groups, so nothing changes
    twin = StepTable.from_episodes([
        dict(group_id="h", traj_id=f"c{k}", obs=list(tb.obs[s:e]) + [tb.next_obs[e - 1]],
             actions=list(tb.action[s:e]), rewards=list(tb.reward[s:e]), end=int(tb.end[e - 1]),
             success=bool(tb.success[s]))
        for k, (s, e) in enumerate(zip([0, 2, 5], [2, 5, 7]))])
    batch = g2po_advantages(StepTable.concat([tb, twin]), KEY, G2POConfig(gamma=0.5, scope="batch"))
    ref = g2po_advantages(tb, KEY, G2POConfig(gamma=0.5))
    # the same 7 deltas twice: sum of squares doubles, n - 1 goes 6 -> 13, so sigma shrinks by sqrt(12/13)
    np.testing.assert_allclose(batch.step[:7], ref.step * np.sqrt(13 / 12), atol=1e-5)
    np.testing.assert_allclose(batch.step[7:], batch.step[:7], atol=1e-12)
