"""CandidatePolicy (lm.policy): π(a|s) = softmax of ℓ(a)/T over the admissible commands, with ℓ the
summed log-probs of the candidate's tokens plus end of turn; shared-prefix scoring equals re-encoding every
candidate; the policy drives collect_groups; LoRACandidatePolicy's autograd updates move the policy the right way."""

from __future__ import annotations

import math

import numpy as np
import pytest

from agentmill.lm.policy import (CandidatePolicy, CommandPrompt, LoRACandidatePolicy, benchmark_case,
                                 benchmark_shared_prefix, candidate_logliks, candidate_logliks_reencode,
                                 candidate_logliks_torch, end_of_turn_id)
from agentmill.lm.scripted import ScriptedLM, ScriptedWhiteBoxLM

INFO = {"admissible_commands": ["go north", "go north east", "take red key", "look"],
        "objective": "Open the chest in the attic."}
OBS = "-= Hall =-\nYou see a red key.\nExits: north, northeast."
EVEN = {"admissible_commands": ["go east", "go west", "go down"], "objective": "Open the chest."}
"""Candidates of equal length: an untrained byte-level model is then not dominated by length alone."""
SHORT = CommandPrompt(example=None)  # byte/char-level fakes: keep prompts short


@pytest.fixture(autouse=True)
def _one_thread():
    """Models this small train ~50x faster on one thread than on two busy cores (lm/tiny.py)."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _tiny(seed: int = 1):
    from agentmill.lm.tiny import load

    return load(f"new?d=32&max_len=1024&seed={seed}")


def _fakes():
    return [ScriptedWhiteBoxLM(seed=3, max_positions=2048), _tiny()]


@pytest.mark.parametrize("lm", _fakes(), ids=["scripted", "tiny"])
def test_probabilities_sum_to_one_and_equal_a_brute_force_re_encode(lm):
    pol = CandidatePolicy(lm)  # default one-shot chat prompt
    ell, cands, ids = pol.logliks(OBS, INFO)
    assert cands == tuple(INFO["admissible_commands"])
    ref = candidate_logliks_reencode(lm, ids, pol.candidate_ids(cands), pol.eot)
    assert np.max(np.abs(ell - ref)) < 1e-4
    lp = pol.log_probs(OBS, INFO)
    assert math.isclose(float(np.exp(lp).sum()), 1.0, abs_tol=1e-12)
    z = ref - ref.max()
    assert np.max(np.abs(np.exp(lp) - np.exp(z) / np.exp(z).sum())) < 1e-4


@pytest.mark.parametrize("lm", _fakes(), ids=["scripted", "tiny"])
def test_prompt_cache_reuse_across_decisions_equals_fresh_scoring(lm):
    pol = CandidatePolicy(lm)
    fresh = CandidatePolicy(lm, reuse_prefix=False)
    assert fresh.prompt_cache is None
    second = dict(INFO, admissible_commands=["go south", "look"])
    for obs, info in [(OBS, INFO), (OBS + "\nA draught.", second), (OBS, second)]:
        assert np.max(np.abs(pol.logliks(obs, info)[0] - fresh.logliks(obs, info)[0])) < 1e-4
    pc = pol.prompt_cache
    assert pc.reused_tokens > pc.fed_tokens / 2  # the system turn and the example were not fed again
    pol.invalidate()
    assert pc.cache is None and pc.ids == ()


def test_loglik_is_the_continuation_logprob_plus_end_of_turn():
    """An independent path: the backend's own ``logprobs(prompt, continuation)`` (one full forward) gives the
    candidate tokens; the end-of-turn term is the difference between ℓ with and without it."""
    lm = _tiny()
    text = "Goal: open the chest.\nObservation: a hall.\n> "
    ids = lm.render(text)
    cands = ["go north", "look"]
    c_ids = [lm.encode(c) for c in cands]
    no_eot = candidate_logliks(lm, ids, c_ids, None)
    for k, c in enumerate(cands):
        assert abs(no_eot[k] - lm.logprobs(text, c).sum()) < 1e-4
    with_eot = candidate_logliks(lm, ids, c_ids, end_of_turn_id(lm))
    for k, c in enumerate(cands):
        eot_lp = candidate_logliks_reencode(lm, ids + c_ids[k], [[]], end_of_turn_id(lm))[0]
        assert abs(with_eot[k] - no_eot[k] - eot_lp) < 1e-4
    assert end_of_turn_id(lm) == 257  # tiny's EOS


def test_temperature_scales_the_logits():
    lm = ScriptedWhiteBoxLM(seed=3, max_positions=2048)
    ell, _, _ = CandidatePolicy(lm, SHORT).logliks(OBS, INFO)
    lp2 = CandidatePolicy(lm, SHORT, temperature=2.0).log_probs(OBS, INFO)
    z = ell / 2.0
    assert np.allclose(lp2, z - np.log(np.exp(z - z.max()).sum()) - z.max(), atol=1e-12)


def test_sampling_follows_the_probabilities():
    """2000 draws against π with a chi-square test (p > 1e-3: fails by chance once in a thousand seeds)."""
    from scipy.stats import chisquare

    pol = CandidatePolicy(ScriptedWhiteBoxLM(seed=3, max_positions=2048), SHORT, temperature=20.0, record=False)
    p = np.exp(pol.log_probs(OBS, INFO))
    assert p.min() > 0.05  # a temperature that leaves every cell populated
    rng = np.random.default_rng(0)
    counts = np.zeros(len(p))
    for _ in range(2000):
        a, lp = pol.act(OBS, INFO, rng)
        i = INFO["admissible_commands"].index(a)
        assert abs(lp - math.log(p[i])) < 1e-12
        counts[i] += 1
    assert chisquare(counts, 2000 * p).pvalue > 1e-3


def test_drives_collect_groups_and_records_prompt_ids_and_candidates():
    from agentmill.envs.keydoor import KeyDoorConfig, KeyDoorEnv, layouts
    from agentmill.envs.rollout import Policy, collect_groups

    cfg = KeyDoorConfig(n_rooms=3, n_locks=1, n_distractors=1)
    lays = layouts(1, seed=0, calibrate=None, config=cfg)
    pol = CandidatePolicy(_tiny(), SHORT)
    assert isinstance(pol, Policy)
    table, labels, trajs = collect_groups(lambda lay: KeyDoorEnv(lay, cfg), pol, lays, group_size=2, max_steps=3)
    decisions = pol.pop_decisions()
    assert len(decisions) == len(table) == len(labels) and pol.decisions == []
    for r, d in enumerate(decisions):
        assert d.candidates == table.candidates[r]
        assert d.candidates[d.chosen] == table.action[r]
        assert list(d.prompt_ids) == pol.prompt_ids(table.obs[r], table.info[r], d.candidates)
        lp = pol.logprob(table.obs[r], table.info[r], table.action[r])
        assert abs(lp - (d.loglik[d.chosen] - np.log(np.exp(d.loglik - d.loglik.max()).sum()) - d.loglik.max())
                   ) < 1e-9
    assert pol.logprob(table.obs[0], table.info[0], "dance") == -math.inf


def test_bad_inputs_fail_clearly():
    lm = ScriptedWhiteBoxLM(seed=3, max_positions=2048)
    with pytest.raises(TypeError, match="WhiteBoxLM"):
        CandidatePolicy(ScriptedLM({}))
    with pytest.raises(ValueError, match="temperature"):
        CandidatePolicy(lm, temperature=0.0)
    pol = CandidatePolicy(lm, SHORT)
    with pytest.raises(ValueError, match="empty"):
        pol.log_probs(OBS, {"admissible_commands": []})
    with pytest.raises(ValueError, match="duplicate"):
        pol.log_probs(OBS, {"admissible_commands": ["look", "look"]})
    with pytest.raises(TypeError, match="torch backend"):
        candidate_logliks_torch(lm, [1, 5], [[6]], 2)


def test_kl_per_step_of_envs_works_on_two_candidate_policies():
    from agentmill.core.types import StepTable
    from agentmill.envs.policies import kl_per_step

    a, b = CandidatePolicy(_tiny(1), SHORT), CandidatePolicy(ScriptedWhiteBoxLM(seed=3, max_positions=2048), SHORT)
    table = StepTable.from_episodes([{"obs": [OBS, OBS + " ", OBS], "actions": ["go east", "go down"],
                                      "rewards": [0.0, 1.0], "infos": [EVEN] * 3}])
    kl = kl_per_step(a, b, table)
    lp, lq = a.log_probs(OBS, EVEN), b.log_probs(OBS, EVEN)
    assert kl.shape == (2,) and abs(kl[0] - float(np.exp(lp) @ (lp - lq))) < 1e-12 and kl[0] > 0.1


# ---------------------------------------------------------------------------------------------------- training
def _trainable(seed: int = 1, render=SHORT, **kw):
    lm = _tiny(seed)
    return LoRACandidatePolicy(lm, list(lm.model.parameters()), render, **kw)


def _table(actions, info=INFO):
    from agentmill.core.types import StepTable

    return StepTable.from_episodes([{"obs": [OBS] * (len(actions) + 1), "actions": list(actions),
                                     "rewards": [0.0] * len(actions), "infos": [info] * (len(actions) + 1)}])


def test_autograd_scores_equal_the_inference_path():
    pol = _trainable()
    ell, cands, ids = pol.logliks(OBS, INFO)
    t = candidate_logliks_torch(pol.lm, ids, pol.candidate_ids(cands), pol.eot)
    assert t.requires_grad and np.max(np.abs(t.detach().double().numpy() - ell)) < 1e-5


def test_pg_update_raises_the_advantaged_action_and_reset_restores():
    pol = _trainable(lr=3e-3)
    before = pol.log_probs(OBS, INFO)
    w0 = [p.detach().clone() for p in pol.parameters]
    i = INFO["admissible_commands"].index("take red key")
    diag = pol.pg_update(_table(["take red key"]), np.array([1.0]))
    after = pol.log_probs(OBS, INFO)  # the memo was invalidated by the update
    assert after[i] > before[i] + 1e-3
    assert diag["grad_norm"] > 0 and pol.updates == 1
    assert any(float((p.detach() - q).abs().max()) > 0 for p, q in zip(pol.parameters, w0))
    pol.pg_update(_table(["take red key"]), np.array([-1.0]))
    assert pol.log_probs(OBS, INFO)[i] < after[i]
    pol.reset()
    assert np.max(np.abs(pol.log_probs(OBS, INFO) - before)) == 0.0 and pol.updates == 0


def test_training_state_restores_weights_and_adam_so_the_next_update_is_the_same():
    a, b = _trainable(lr=3e-3), _trainable(lr=3e-3)
    table, adv = _table(["take red key"]), np.array([1.0])
    a.pg_update(table, adv)
    b.load_training_state(a.training_state())  # b never trained: it takes a's weights, moments and step count
    assert b.updates == 1 and np.array_equal(b.log_probs(OBS, INFO), a.log_probs(OBS, INFO))
    a.pg_update(table, adv)
    b.pg_update(table, adv)  # Adam's second step uses the restored moments: a fresh optimizer would differ
    assert all(torch_equal(p, q) for p, q in zip(a.parameters, b.parameters))
    other = LoRACandidatePolicy(_tiny(1), list(_tiny(1).model.parameters())[:2], SHORT)
    with pytest.raises(ValueError, match="do not match"):
        other.load_training_state(a.training_state())


def torch_equal(p, q) -> bool:
    return bool((p.detach() == q.detach()).all())


def test_pg_update_zero_advantages_without_kl_do_not_move_the_policy():
    pol = _trainable(lr=3e-3)
    before = pol.log_probs(OBS, INFO)
    pol.pg_update(_table(["look", "go north"]), np.zeros(2))
    assert np.max(np.abs(pol.log_probs(OBS, INFO) - before)) == 0.0


def test_kl_term_pulls_the_policy_towards_the_reference():
    pol = _trainable(1, lr=3e-3)
    ref = CandidatePolicy(ScriptedWhiteBoxLM(seed=3, max_positions=2048), SHORT)  # far from the untrained tiny

    def kl() -> float:
        lp, lq = pol.log_probs(OBS, EVEN), ref.log_probs(OBS, EVEN)
        return float(np.exp(lp) @ (lp - lq))

    k0 = kl()
    assert k0 > 0.1
    for _ in range(5):
        pol.pg_update(_table(["go east"], EVEN), np.zeros(1), kl_coef=1.0, ref=ref)
    assert kl() < 0.5 * k0
    with pytest.raises(ValueError, match="reference"):
        pol.pg_update(_table(["look"]), np.zeros(1), kl_coef=1.0)
    with pytest.raises(ValueError, match="not among"):
        pol.pg_update(_table(["dance"]), np.ones(1))
    with pytest.raises(ValueError, match="shape"):
        pol.pg_update(_table(["look"]), np.ones(2))


def test_distill_step_fits_a_target_distribution():
    pol = _trainable(lr=1e-2)
    target = np.array([0.1, 0.1, 0.7, 0.1])
    first = pol.distill_step([(OBS, INFO, None, target)])["kl_target"]
    for _ in range(10):
        last = pol.distill_step([(OBS, INFO, None, target)])["kl_target"]
    assert last < 0.2 * first
    with pytest.raises(ValueError, match="distribution"):
        pol.distill_step([(OBS, INFO, None, np.array([0.5, 0.5]))])


def test_lm_arm_loop_rollouts_advantages_update():
    """The LM arm of g2po.train_compare in miniature: collect_groups drives the trainable policy, per-row
    advantages come from the table (here the group-centred return, GRPO's mean form), pg_update consumes them."""
    from agentmill.envs.keydoor import KeyDoorConfig, KeyDoorEnv, layouts
    from agentmill.envs.rollout import collect_groups

    cfg = KeyDoorConfig(n_rooms=3, n_locks=1, n_distractors=1)
    lays = layouts(1, seed=0, calibrate=None, config=cfg)
    pol = _trainable(lr=1e-3)
    table, _, _ = collect_groups(lambda lay: KeyDoorEnv(lay, cfg), pol, lays, group_size=3, max_steps=4, seed=1)
    ret = np.array([table.reward[table.traj_index == k].sum() for k in range(table.n_trajectories)])
    adv = (ret - ret.mean())[table.traj_index] + np.linspace(-1, 1, len(table))  # any non-zero per-row signal
    w0 = [p.detach().clone() for p in pol.parameters]
    row = 0
    before = pol.logprob(table.obs[row], table.info[row], table.action[row])
    diag = pol.pg_update(table, adv, normalize="trajectories")
    assert diag["rows"] == len(table) and diag["grad_norm"] > 0
    assert any(float((p.detach() - q).abs().max()) > 0 for p, q in zip(pol.parameters, w0))
    assert pol.logprob(table.obs[row], table.info[row], table.action[row]) != before


def test_benchmark_reports_agreeing_paths_on_a_fake():
    pol = CandidatePolicy(_tiny(), SHORT)
    ids, cids, eot, desc = benchmark_case(pol, [(OBS, INFO)], max_prompt_tokens=1024, max_candidates=3)
    assert desc["candidates"] == INFO["admissible_commands"][:3] and len(cids) == 3
    b = benchmark_shared_prefix(pol.lm, ids, cids, eot, repeats=1)
    assert b.max_abs_diff < 1e-4 and b.n_candidates == 3 and b.speedup > 0
    with pytest.raises(ValueError, match="prompt tokens"):
        benchmark_case(pol, [(OBS, INFO)], max_prompt_tokens=10)


# ---------------------------------------------------------------------------------------------------- SmolLM2
@pytest.mark.hf
@pytest.mark.slow
def test_smollm2_probabilities_equal_a_brute_force_re_encode(smol):
    pol = CandidatePolicy(smol)  # the default chat prompt with its one-shot example
    ell, cands, ids = pol.logliks(OBS, INFO)
    assert ids[-3:] == smol.encode("<|im_start|>assistant\n")[-3:]
    assert pol.eot == smol.tokenizer.convert_tokens_to_ids("<|im_end|>")
    ref = candidate_logliks_reencode(smol, ids, pol.candidate_ids(cands), pol.eot)
    assert np.max(np.abs(ell - ref)) < 1e-4
    assert math.isclose(float(np.exp(pol.log_probs(OBS, INFO)).sum()), 1.0, abs_tol=1e-12)
    # the next decision re-feeds only the part of its prompt that differs (PromptCache), with the same numbers
    second = dict(INFO, admissible_commands=["go south", "look"])
    ell2, cands2, ids2 = pol.logliks(OBS + "\nA draught.", second)
    assert pol.prompt_cache.reused_tokens > 100
    ref2 = candidate_logliks_reencode(smol, ids2, pol.candidate_ids(cands2), pol.eot)
    assert np.max(np.abs(ell2 - ref2)) < 1e-4


@pytest.mark.hf
@pytest.mark.slow
def test_smollm2_lora_pg_update_moves_the_adapter_only():
    import gc

    from agentmill.lm.pair import HFPair

    pair = HFPair("smollm2", adapter="new")
    try:
        info = {"admissible_commands": ["go north", "take red key", "look"], "objective": INFO["objective"]}
        pol = LoRACandidatePolicy(pair.policy, pair.trainable_parameters(), SHORT, lr=1e-3)
        ref = CandidatePolicy(pair.reference, SHORT)
        before = pol.log_probs(OBS, info)
        ell, cands, ids = pol.logliks(OBS, info)
        t = candidate_logliks_torch(pair.policy, ids, pol.candidate_ids(cands), pol.eot)
        assert np.max(np.abs(t.detach().double().numpy() - ell)) < 1e-4
        from agentmill.core.types import StepTable

        table = StepTable.from_episodes([{"obs": [OBS, OBS], "actions": ["take red key"], "rewards": [1.0],
                                          "infos": [info, info]}])
        pol.pg_update(table, np.array([1.0]))
        after = pol.log_probs(OBS, info)
        assert after[1] > before[1] + 1e-3
        assert np.max(np.abs(ref.log_probs(OBS, info) - before)) < 1e-5  # the reference is still the base model
    finally:
        del pair
        gc.collect()
