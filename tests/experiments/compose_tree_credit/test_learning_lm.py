"""C-tree-credit (c), LM-policy arm: the smoke run (tiny model), the row merge's gradient identity, the registered
claim and the unjudged stand-in path. No SmolLM2 load here: every model is a ``tiny:`` one."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import numpy as np
import pytest

from agentmill.experiments.compose_tree_credit import MODULES
from agentmill.experiments.compose_tree_credit import learning_lm as L
from agentmill.experiments.protocol import RunContext

TINY = "tiny:new?d=16&layers=1&heads=2&max_len=1024&seed=1"


@pytest.fixture(scope="module")
def pair():
    pytest.importorskip("torch")
    from agentmill.lm.candidate_pair import build_pair

    return build_pair(TINY, temperature=100.0, one_shot=False, lr=1e-3)


def test_registered_with_the_claim_c_rule() -> None:
    assert "learning_lm" in MODULES
    assert L.EXPERIMENT.id == "compose_tree_credit.learning_lm"
    (c,) = L.EXPERIMENT.claims
    assert (c.id, c.metric, c.direction, c.threshold, c.ci_bound, c.rule) == (
        "TC-KD-c-LM", "wilcoxon_p", "<=", 0.05, None, "exact")
    full = L.SETUPS["full"]
    assert full.model == "hf:smollm2" and len(full.seeds) >= 5  # 0.5**5 < 0.05: the claim can be reached
    assert 0.5 ** len(full.seeds) < 0.05
    assert full.budget > 2 * full.max_steps  # room to branch after the 2 seed rollouts
    assert all(not L.SETUPS[p].model.startswith("hf:") for p in ("smoke", "quick"))


def test_smoke_measure_and_plots_and_the_stand_in_is_never_judged(tmp_path) -> None:
    pytest.importorskip("torch")
    ctx = RunContext(profile="smoke", model="none", executor=None, work_dir=tmp_path)
    m = L.EXPERIMENT.measure(L.SETUPS["smoke"], ctx)
    assert "wilcoxon_p" not in m and "wilcoxon_p_observed" in m  # tiny stand-in: recorded, not judged
    for prof in ("smoke", "quick", "full"):
        assert set(L.EXPERIMENT.judge(prof, m, ctx.data).values()) == {"not_judged"}
    assert m["gen_tokens_per_iter_tree_g2po_progress"].value == m["gen_tokens_per_iter_indep_grpo"].value == 16
    runs = ctx.data["runs"]
    assert set(runs) == set(L.ARMS)
    # both arms start from the same weights and evaluation seeds: their iteration-0 held-out success is one number
    assert runs["indep_grpo"][0]["curve"][0] == runs["tree_g2po_progress"][0]["curve"][0]
    paths = L.EXPERIMENT.plots(ctx.data, tmp_path)
    assert paths and all(p.exists() and p.stat().st_size > 0 for p in paths)


def test_shared_initial_eval_equals_a_fresh_one(pair) -> None:
    from agentmill.envs.keydoor import TINY_WORLD, layouts

    s = replace(L.SETUPS["smoke"], heldout_rollouts=3, max_steps=20)
    assert s.model == TINY
    train = layouts(1, seed=0, calibrate=None, config=TINY_WORLD)
    test = layouts(2, seed=1000, calibrate=None, config=TINY_WORLD)
    a = L.train_arm("indep_grpo", s, pair, train, test, 1000)
    b = L.train_arm("tree_g2po_progress", s, pair, train, test, 1000)
    c = L.train_arm("tree_g2po_progress", s, pair, train, test, 1000, initial_eval=a["curve"][0])
    assert a["curve"][0] == b["curve"][0] == c["curve"][0]
    assert c["curve"] == b["curve"]


class _FakePolicy:
    @staticmethod
    def candidates_of(info, candidates):
        return tuple(candidates)

    @staticmethod
    def prompt_ids(obs, info, candidates):
        return list(obs.encode())  # deterministic: str hash() is salted per process and can collide mod a small n


class _Table:
    def __init__(self, obs, actions):
        self.obs, self.action = obs, actions
        self.info = [{} for _ in obs]
        self.candidates = [("a", "b")] * len(obs)

    def __len__(self) -> int:
        return len(self.obs)


def test_merge_sums_repeated_rows_onto_the_first() -> None:
    t = _Table(["s0", "s1", "s0", "s0", "s1"], ["a", "a", "a", "b", "a"])
    out = L.merge_repeated_rows(_FakePolicy(), t, np.array([1.0, 2.0, 3.0, 4.0, 5.0]))
    np.testing.assert_allclose(out, [4.0, 7.0, 0.0, 4.0, 0.0])


def test_merge_gives_the_same_update_as_the_repeated_rows(pair) -> None:
    import torch

    from agentmill.envs.keydoor import TINY_WORLD, KeyDoorEnv, layouts
    from agentmill.experiments.compose_tree_credit.adapter import RolloutSpec, sample_groups

    pol = pair.policy.reset()
    task = layouts(1, seed=0, calibrate=None, config=TINY_WORLD)
    g = sample_groups(partial(KeyDoorEnv, config=TINY_WORLD), pol, task, RolloutSpec(budget=16, max_steps=6), 3)
    adv = np.random.default_rng(0).normal(size=len(g.table))
    merged = L.merge_repeated_rows(pol, g.table, adv)
    assert np.count_nonzero(merged) < len(g.table)  # the tree repeats its prefix rows
    assert merged.sum() == pytest.approx(adv.sum())
    after = []
    for a in (adv, merged):
        pol.reset()
        pol.optimizer = torch.optim.SGD(pol.parameters, lr=1.0)  # the step is the (clipped) gradient itself
        pol.pg_update(g.table, a, normalize="trajectories")
        after.append([(p - p0).detach().clone() for p, p0 in zip(pol.parameters, pol._initial)])
    pol.reset()
    assert any(float(x.abs().max()) > 1e-4 for x in after[0])
    for x, y in zip(*after):
        assert torch.allclose(x, y, rtol=1e-4, atol=1e-7)
