"""train_compare: equal samples per arm, common random numbers, parameters move, bad input."""

from __future__ import annotations

import numpy as np
import pytest

from agentmill.envs.keydoor import KeyDoorConfig, generate_layout, make_keydoor
from agentmill.envs.policies import SoftmaxTablePolicy
from agentmill.methods.g2po.keys import FieldsKey
from agentmill.methods.g2po.train import train_compare

CFG = KeyDoorConfig(n_rooms=3, n_locks=1, max_steps=20)
TASKS = [generate_layout(s, CFG) for s in (4, 6, 7)]


def _env(layout):
    return make_keydoor(layout=layout, config=CFG)


def _run(lr, policies=None, seeds=(0, 1)):
    def factory():
        p = SoftmaxTablePolicy()
        if policies is not None:
            policies.append(p)
        return p
    return train_compare(_env, TASKS, factory, key_fn=FieldsKey(), group_size=4, tasks_per_iter=2, iterations=3,
                         lr=lr, seeds=seeds, eval_every=2, eval_episodes=6)


def test_arms_get_equal_samples_and_common_random_numbers_and_parameters_move() -> None:
    policies: list = []
    log = _run({"grpo": 1.0, "gigpo": 1.0, "g2po": 1.0}, policies)
    assert len(log.arms) == 6 and len(policies) == 6
    for seed in (0, 1):
        arms = [log.arm(e, seed) for e in ("grpo", "gigpo", "g2po")]
        assert all(a.eval_iteration == [0, 2, 3] and a.eval_episodes == [0, 16, 24] for a in arms)
        # before any update every arm has the same policy, so the same eval and first training rollouts
        assert len({a.success[0] for a in arms}) == 1 and len({a.train_success[0] for a in arms}) == 1
        assert all(a.seconds["rollout"] > 0 and a.seconds["advantages"] > 0 for a in arms)
        assert arms[2].seconds["graph"] > 0 and arms[0].seconds["graph"] == 0 and len(arms[2].merge_rate) == 3
    assert all(p.n_parameters > 0 for p in policies)  # every arm's parameters moved
    assert log.auc("g2po").shape == (2,) and log.to_dict()["setup"]["iterations"] == 3


def test_zero_learning_rate_makes_every_arm_identical() -> None:
    log = _run(0.0, seeds=(5,))
    curves = {tuple(log.arm(e, 5).success) for e in ("grpo", "gigpo", "g2po")}
    steps = {tuple(log.arm(e, 5).eval_env_steps) for e in ("grpo", "gigpo", "g2po")}
    assert len(curves) == 1 and len(steps) == 1


def test_bad_arguments_raise() -> None:
    with pytest.raises(ValueError, match="unknown estimators"):
        train_compare(_env, TASKS, SoftmaxTablePolicy, ("ppo",), FieldsKey(), iterations=1, lr=1.0, seeds=[0])
    with pytest.raises(ValueError, match="key_fn"):
        train_compare(_env, TASKS, SoftmaxTablePolicy, ("g2po",), iterations=1, lr=1.0, seeds=[0])
    with pytest.raises(ValueError, match=">= 1"):
        train_compare(_env, TASKS, SoftmaxTablePolicy, ("grpo",), iterations=0, lr=1.0, seeds=[0])
    assert np.isnan(_nan_auc())


def _nan_auc() -> float:
    from agentmill.methods.g2po.train import ArmLog
    return ArmLog("grpo", 0, 1.0).auc


class _RecordingPolicy(SoftmaxTablePolicy):
    """A numpy policy with its own ``pg_update`` (the LM-arm interface): records what train_compare hands it."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list = []

    def pg_update(self, table, advantages, lr=None, *, normalize="rows"):
        self.calls.append((table, np.array(advantages), lr, normalize))
        return {}


def test_a_policy_with_pg_update_is_updated_by_it_with_the_arms_advantages() -> None:
    from agentmill.methods.g2po import g2po_advantages, grpo_advantages

    made: list = []

    def factory():
        made.append(_RecordingPolicy())
        return made[-1]

    train_compare(_env, TASKS, factory, ("grpo", "g2po"), FieldsKey(), group_size=4, tasks_per_iter=2, iterations=2,
                  lr={"grpo": 1e-4, "g2po": 2e-4}, seeds=[0], eval_every=2, eval_episodes=4)
    grpo, g2po = made
    assert len(grpo.calls) == len(g2po.calls) == 2
    assert grpo.n_parameters == 0 and g2po.n_parameters == 0  # pg_step never ran: the policy's own update did
    for pol, fn, lr in ((grpo, lambda t: grpo_advantages(t), 1e-4), (g2po, lambda t: g2po_advantages(t, FieldsKey()),
                                                                     2e-4)):
        for table, adv, lr_, norm in pol.calls:
            assert np.array_equal(adv, fn(table).advantages) and lr_ == lr and norm == "trajectories"


def test_lm_arm_with_a_tiny_lora_candidate_policy_and_reset_as_factory() -> None:
    import torch

    from agentmill.lm.policy import CommandPrompt, LoRACandidatePolicy
    from agentmill.lm.tiny import load

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        lm = load("new?d=16&layers=1&heads=2&max_len=1024&seed=1")
        pol = LoRACandidatePolicy(lm, list(lm.model.parameters()), CommandPrompt(example=None), temperature=20.0,
                                  lr=1e-2, record=False)
        w0 = [p.detach().clone() for p in pol.parameters]
        cfg = KeyDoorConfig(n_rooms=3, n_locks=1, max_steps=3, step_penalty=0.01)
        log = train_compare(lambda lay: make_keydoor(layout=lay, config=cfg), TASKS[:1], pol.reset, ("grpo", "g2po"),
                            FieldsKey(), group_size=3, tasks_per_iter=1, iterations=2, lr=1e-2, seeds=[0],
                            eval_every=2, eval_episodes=3)
    finally:
        torch.set_num_threads(n)
    a, b = log.arm("grpo", 0), log.arm("g2po", 0)
    # reset() between arms: the same initial weights, so identical first evaluation and first training rollouts
    assert a.success[0] == b.success[0] and a.train_success[0] == b.train_success[0]
    assert pol.updates == 2 and a.seconds["update"] > 0 and b.seconds["graph"] > 0
    assert pol.decisions == []  # record=False keeps nothing
    # the step penalty makes GRPO's returns differ within a group only by length, G2PO's edges by node values;
    # either way the last arm's advantages are not all zero, so its weights moved
    assert any(float((p.detach() - q).abs().max()) > 0 for p, q in zip(pol.parameters, w0))


def _strip_seconds(log) -> list:
    return [{k: v for k, v in a.items() if k != "seconds"} for a in log.to_dict()["arms"]]


def test_reusing_iteration_0_across_arms_changes_no_number(monkeypatch: pytest.MonkeyPatch) -> None:
    """Arms of one seed share the iteration-0 evaluation and rollouts (identical fresh policies); the logs equal
    those of a run that replays them, and the reused phases are still charged their time."""
    from agentmill.methods.g2po import train as train_mod

    calls: list[int] = []
    real = train_mod.collect_groups

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(train_mod, "collect_groups", counting)
    reused = _run({"grpo": 1.0, "gigpo": 0.3, "g2po": 1.0})
    n_reused = len(calls)
    monkeypatch.setattr(train_mod, "_fingerprint", lambda policy: None)
    replayed = _run({"grpo": 1.0, "gigpo": 0.3, "g2po": 1.0})
    assert _strip_seconds(reused) == _strip_seconds(replayed)
    assert len(calls) - n_reused == n_reused + 2 * 2 * 2  # 2 seeds x 2 later arms x (eval + rollouts) at it 0
    assert all(a.seconds["eval"] > 0 and a.seconds["rollout"] > 0 for a in reused.arms)


class _CountingPolicy(SoftmaxTablePolicy):
    """Acting changes its state, so skipping its iteration-0 act calls would change it: never reused."""

    def __init__(self) -> None:
        super().__init__()
        self.acts = 0

    def act(self, obs, info, rng):
        self.acts += 1
        return super().act(obs, info, rng)


def test_a_policy_that_acting_changes_is_not_reused() -> None:
    policies: list = []

    def factory():
        policies.append(_CountingPolicy())
        return policies[-1]

    train_compare(_env, TASKS, factory, key_fn=FieldsKey(), group_size=4, tasks_per_iter=2, iterations=1, lr=1.0,
                  seeds=(0,), eval_every=2, eval_episodes=6)
    assert len({p.acts for p in policies}) == 1 and policies[0].acts > 0


def test_eval_env_factory_evaluates_in_another_env() -> None:
    """Evaluation episodes come from eval_env_factory when given (train in a simulator, evaluate in the real env),
    and from the training env otherwise."""
    made: list[str] = []

    def train_env(layout):
        made.append("train")
        return _env(layout)

    def eval_env(layout):
        made.append("eval")
        return _env(layout)

    log = train_compare(train_env, TASKS[:1], SoftmaxTablePolicy, ("grpo",), group_size=2, tasks_per_iter=1,
                        iterations=2, lr=1.0, seeds=(0,), eval_every=1, eval_episodes=2, eval_env_factory=eval_env)
    assert made.count("eval") == 3 and made.count("train") == 2 and len(log.arm("grpo", 0).success) == 3
    made.clear()
    train_compare(train_env, TASKS[:1], SoftmaxTablePolicy, ("grpo",), group_size=2, tasks_per_iter=1, iterations=2,
                  lr=1.0, seeds=(0,), eval_every=1, eval_episodes=2)
    assert made == ["train"] * 5
