"""LM pair builders of progress_advantage.train (P-6a/P-6b) on the tiny backend:
the candidate policy as a table over an exact KeyDoor model, distillation to the soft optimum π* (after which
β·log(π_θ/π_ref) ranks (s, a) like A*), soft advantages by hand, and KL-regularised PG from rollouts."""

from __future__ import annotations

import numpy as np
import pytest

from agentmill.core.tabular_mdp import soft_value_iteration
from agentmill.core.types import StepTable
from agentmill.envs.keydoor import KeyDoorConfig, KeyDoorEnv, layouts
from agentmill.lm.policy import CandidatePolicy, CommandPrompt, LoRACandidatePolicy
from agentmill.methods.progress_advantage.train import (candidate_policy_table, distill_to_optimum, kl_pg_train,
                                                        soft_advantages)

SHORT = CommandPrompt(example=None)
T = 20.0
"""An untrained byte-level model puts nearly all mass on the shortest command (~5.5 nats per byte); T = 20 leaves
every command a visible share, so π* differs from π_ref where rewards are reachable."""
CFG = KeyDoorConfig(n_rooms=3, n_locks=1, n_distractors=0, droppable=False, include_feedback=False)


@pytest.fixture(autouse=True)
def _one_thread():
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _tiny(seed: int = 1):
    from agentmill.lm.tiny import load

    return load(f"new?d=32&max_len=1024&seed={seed}")


def _world():
    lay = layouts(1, seed=0, calibrate=None, config=CFG)[0]
    env = KeyDoorEnv(lay, CFG)
    mdp, _, obs, adm = env.to_tabular()
    states = [(o, {"admissible_commands": list(a), "objective": lay.objective}) for o, a in zip(obs, adm)]
    return lay, env, mdp, states


def test_candidate_policy_table_matches_the_policy_and_masks_invalid_actions():
    _, env, mdp, states = _world()
    pol = CandidatePolicy(_tiny(), SHORT, temperature=T)
    pi = candidate_policy_table(pol, states, env.tabular_actions, mdp)
    live = ~mdp.absorbing
    assert np.allclose(pi[live].sum(1), 1.0, atol=1e-12)
    assert np.all(pi[~mdp.valid] == 0) and np.all(pi[mdp.absorbing] == 0)
    obs, info = states[0]
    cols = [env.tabular_actions.index(c) for c in info["admissible_commands"]]
    assert np.allclose(pi[0, cols], np.exp(pol.log_probs(obs, info)), atol=1e-12)
    obs_rollout, _ = env.reset(seed=0)
    assert obs_rollout == obs  # include_feedback=False: rollouts show the policy the same text as the table
    with pytest.raises(ValueError, match="states given"):
        candidate_policy_table(pol, states[:-1], env.tabular_actions, mdp)


@pytest.mark.slow
def test_distill_to_optimum_recovers_the_advantage_ranking():
    from scipy.stats import spearmanr

    _, env, mdp, states = _world()
    ref = CandidatePolicy(_tiny(1), SHORT, temperature=T)
    lm = _tiny(1)  # the same weights: the policy starts at π_ref, as a fresh LoRA does
    pol = LoRACandidatePolicy(lm, list(lm.model.parameters()), SHORT, temperature=T, lr=3e-3)
    beta = 0.2
    pi_ref = candidate_policy_table(ref, states, env.tabular_actions, mdp)
    Q, V, pi_star = soft_value_iteration(mdp, pi_ref, beta)
    lv = mdp.live_valid
    A = (Q - V[:, None])[lv]
    trace = distill_to_optimum(pol, states, env.tabular_actions, mdp, pi_star, epochs=8, batch_size=8)
    assert trace.epochs[0] == 0 and trace.mean_kl[0] > 0.05
    assert trace.mean_kl[-1] < 0.25 * trace.mean_kl[0]
    pi = candidate_policy_table(pol, states, env.tabular_actions, mdp)
    ratio = beta * (np.log(pi[lv]) - np.log(pi_ref[lv]))
    assert spearmanr(ratio, A).statistic > 0.6
    assert np.corrcoef(ratio, A)[0, 1] > spearmanr(beta * np.log(pi_ref[lv]), A).statistic  # better than log π_ref


def test_soft_advantages_by_hand():
    # one group, two trajectories; β = 0.5, γ = 0.5; KL per row given
    table = StepTable.from_episodes([
        {"group_id": "g", "traj_id": "a", "obs": ["S", "A", "W"], "actions": ["x", "y"], "rewards": [0.0, 1.0]},
        {"group_id": "g", "traj_id": "b", "obs": ["S", "B"], "actions": ["z"], "rewards": [0.0],
         "end": "truncated"}])
    kl = np.array([0.2, 0.4, 0.0])
    adv, G = soft_advantages(table, kl, beta=0.5, gamma=0.5)
    # soft rewards: a: -0.1, 0.8; b: 0.0.  G: a: -0.1 + 0.5*0.8 = 0.3, 0.8; b: 0.0
    assert np.allclose(G, [0.3, 0.8, 0.0])
    # leave-one-out baselines at the same t: a0 vs b0 (0.0), a1 has no peer (0), b0 vs a0 (0.3)
    assert np.allclose(adv, [0.3, 0.8, -0.3])


@pytest.mark.slow
def test_kl_pg_train_tabular_and_lora_smoke():
    from agentmill.envs.policies import SoftmaxTablePolicy

    lays = layouts(2, seed=0, calibrate=None, config=CFG)
    factory = lambda lay: KeyDoorEnv(lay, CFG)  # noqa: E731
    tab, tab_ref = SoftmaxTablePolicy(), SoftmaxTablePolicy()
    log = kl_pg_train(tab, tab_ref, factory, lays, beta=0.1, iterations=3, group_size=8, tasks_per_iter=2,
                      max_steps=20, lr=1.0)
    assert len(log.success) == 3 and max(log.success) > 0  # some rollouts won, so the advantages are not all 0
    assert log.mean_kl[0] == 0.0 < log.mean_kl[-1] and tab.n_parameters > 0

    lm = _tiny(1)
    pol = LoRACandidatePolicy(lm, list(lm.model.parameters()), SHORT, temperature=T, lr=1e-3)
    ref = CandidatePolicy(_tiny(1), SHORT, temperature=T)
    w0 = [p.detach().clone() for p in pol.parameters]
    log = kl_pg_train(pol, ref, factory, lays, beta=0.1, iterations=2, group_size=2, tasks_per_iter=1, max_steps=3)
    assert pol.updates == 2 and log.mean_kl[0] < 1e-10 < log.mean_kl[1]  # starts at π_ref, then moves off it
    assert any(float((p.detach() - q).abs().max()) > 0 for p, q in zip(pol.parameters, w0))
    with pytest.raises(ValueError, match="beta"):
        kl_pg_train(pol, ref, factory, lays, beta=0.0, iterations=1)
    with pytest.raises(ValueError, match="lr"):
        kl_pg_train(SoftmaxTablePolicy(), tab_ref, factory, lays, beta=0.1, iterations=1)


def test_scorer_candidates_mode_equals_the_candidate_policies_log_ratio():
    """The E173 scorer (action_space="candidates") on an Episode built from a recorded Decision (prompt ids,
    candidate ids, end-of-turn id) gives β·(log π_θ − log π_ref)(a|s) of the two CandidatePolicies (T = 1)."""
    from agentmill.methods.progress_advantage.config import PAConfig
    from agentmill.methods.progress_advantage.scorer import Episode, ProgressAdvantageScorer

    _, _, _, states = _world()
    pol, ref = CandidatePolicy(_tiny(1), SHORT), CandidatePolicy(_tiny(2), SHORT)
    obs, info = states[0]
    pol.act(obs, info, np.random.default_rng(0))
    d = pol.pop_decisions()[0]
    cand_ids = tuple(tuple(c) for c in pol.candidate_ids(d.candidates))
    ep = Episode((d.prompt_ids, cand_ids[d.chosen]), (False, True), (cand_ids,), (pol.eot,))
    beta = 0.5
    A = ProgressAdvantageScorer(pol.lm, ref.lm, PAConfig(beta=beta, action_space="candidates")).step_scores(ep).A
    a = d.chosen
    expect = beta * (pol.log_probs(obs, info)[a] - ref.log_probs(obs, info)[a])
    assert abs(A[0] - expect) < 1e-4 and abs(expect) > 1e-3
