"""ProgressAdvantageScorer over canned token scorers (hand-checked), a tiny torch pair, and the tokenizer checks
(progress_advantage README)."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

from agentmill.core.types import Step, Trajectory
from agentmill.lm.scripted import ScriptedScoringLM
from agentmill.methods.progress_advantage import Episode, PAConfig, ProgressAdvantageScorer

VOCAB = ["room", "hall", ">", "go", "north", "look", "open", "chest", "."]


def _pair(policy_table, ref_table, **kw):
    return (ScriptedScoringLM(VOCAB, policy_table, default=-3.0, **kw),
            ScriptedScoringLM(VOCAB, ref_table, default=-3.0, **kw))


def _episode(**kw) -> Episode:
    return Episode.from_steps(["room", "hall"], ["go north", "look"], action_prefix=" >", end_of_turn=" .", **kw)


def test_free_text_step_scores_by_hand():
    pol, ref = _pair({"go": -0.5, "north": -1.0, "look": -2.0, ".": -0.1},
                     {"go": -1.5, "north": -1.0, "look": -1.0, ".": -0.2})
    s = ProgressAdvantageScorer(pol, ref, PAConfig(beta=2.0)).step_scores(_episode())
    # action 1: (go, north, .) ratios 1.0 + 0 + 0.1; action 2: (look, .) ratios -1.0 + 0.1; times beta = 2
    assert s.A.tolist() == [pytest.approx(2.2), pytest.approx(-1.8)]
    assert s.policy_logprob.tolist() == [pytest.approx(-1.6), pytest.approx(-2.1)]
    assert s.flags == ("", "") and s.n_missing == 0
    assert pol.calls[-1] == [[0, 1, 3, 4, 5, 9, 2, 3, 6, 9]]  # one pass over BOS room > go north . hall > look .


def test_trajectory_score_and_step_agg():
    pol, ref = _pair({"go": -0.5, "look": -2.0}, {"go": -1.5, "look": -1.0})
    sc = ProgressAdvantageScorer(pol, ref, PAConfig(step_agg="min"))
    ep = Episode.from_steps(["room", "hall"], ["go", "look"], action_prefix=" >", end_of_turn="")
    assert sc.trajectory_score(ep) == -1.0 and sc.trajectory_score(ep, "sum") == 0.0


def _ctx_fake(favour_after: str, bonus: float):
    """log p(next) depends on the previous word: 'north' is cheap right after `favour_after`."""
    idx = {w: i + 1 for i, w in enumerate(VOCAB)}

    def nxt(ctx):
        v = np.full(len(VOCAB) + 1, -3.0)
        v[idx["north"]] = -3.0 + (bonus if ctx[-1] == idx[favour_after] else 0.0)
        return v

    return ScriptedScoringLM(VOCAB, nxt)


def test_ratio_mode_changes_min_but_not_sum():
    pol, ref = _ctx_fake("go", 2.0), _ctx_fake("go", 0.0)
    ep = Episode.from_steps(["room"], ["go north"], action_prefix=" >", end_of_turn=" .")
    # token ratios: go 0, north +2, . 0
    per_tok = ProgressAdvantageScorer(pol, ref, PAConfig(token_agg="min")).step_scores(ep).A[0]
    separate = ProgressAdvantageScorer(pol, ref, PAConfig(token_agg="min", ratio_mode="separate")).step_scores(ep).A[0]
    assert per_tok == 0.0 and separate == 0.0  # min over ratios [0, 2, 0]; min(p) - min(r) = -3 - (-3)
    pol2 = _ctx_fake("go", -1.0)  # policy makes "north" *less* likely: ratios [0, -1, 0]
    assert ProgressAdvantageScorer(pol2, ref, PAConfig(token_agg="min")).step_scores(ep).A[0] == -1.0
    assert ProgressAdvantageScorer(pol2, ref, PAConfig(token_agg="min", ratio_mode="separate")
                                   ).step_scores(ep).A[0] == -1.0
    assert ProgressAdvantageScorer(pol, ref, PAConfig(token_agg="max")).step_scores(ep).A[0] == 2.0
    assert ProgressAdvantageScorer(pol, ref, PAConfig(token_agg="max", ratio_mode="separate")
                                   ).step_scores(ep).A[0] == pytest.approx(2.0)  # max(p) = -1, max(r) = -3
    # a policy raising "go" and "." while lowering "north": per-token max 0.5 vs separate max(p) - max(r)
    idx = {w: i + 1 for i, w in enumerate(VOCAB)}

    def nxt(ctx):
        v = np.full(len(VOCAB) + 1, -3.0)
        v[idx["go"]], v[idx["."]], v[idx["north"]] = -2.5, -2.5, -4.0
        return v

    pol3 = ScriptedScoringLM(VOCAB, nxt)
    a = ProgressAdvantageScorer(pol3, ref, PAConfig(token_agg="max")).step_scores(ep).A[0]
    b = ProgressAdvantageScorer(pol3, ref, PAConfig(token_agg="max", ratio_mode="separate")).step_scores(ep).A[0]
    assert a == pytest.approx(0.5) and b == pytest.approx(-2.5 - (-3.0))
    c = ProgressAdvantageScorer(pol3, ref, PAConfig(token_agg="min")).step_scores(ep).A[0]
    d = ProgressAdvantageScorer(pol3, ref, PAConfig(token_agg="min", ratio_mode="separate")).step_scores(ep).A[0]
    assert c == pytest.approx(-1.0) and d == pytest.approx(-4.0 - (-3.0))
    e = ProgressAdvantageScorer(pol3, ref, PAConfig(token_agg="sum")).step_scores(ep).A[0]
    f = ProgressAdvantageScorer(pol3, ref, PAConfig(token_agg="sum", ratio_mode="separate")).step_scores(ep).A[0]
    assert e == pytest.approx(f) == pytest.approx(0.0)


def test_candidates_renormalise_over_the_admissible_set():
    pol, ref = _pair({"go": -0.5, "look": -2.0, ".": -0.1}, {"go": -1.0, "look": -1.0, ".": -0.1})
    ep = Episode.from_steps(["room"], ["go"], [("go", "look")], action_prefix=" >", end_of_turn=" .")
    s = ProgressAdvantageScorer(pol, ref, PAConfig(action_space="candidates")).step_scores(ep)
    lp = lambda a, b: a - math.log(math.exp(a) + math.exp(b))  # noqa: E731
    expect = lp(-0.6, -2.1) - lp(-1.1, -1.1)
    assert s.A[0] == pytest.approx(expect, abs=1e-12)
    assert s.policy_logprob[0] == pytest.approx(lp(-0.6, -2.1), abs=1e-12)
    free = ProgressAdvantageScorer(pol, ref).step_scores(ep).A[0]
    assert free == pytest.approx(0.5) and free != pytest.approx(expect)  # off by a per-state constant
    with pytest.raises(ValueError, match="admissible set"):
        ProgressAdvantageScorer(pol, ref, PAConfig(action_space="candidates")).step_scores(_episode())
    bad = Episode.from_steps(["room"], ["open chest"], [("go", "look")], action_prefix=" >")
    with pytest.raises(ValueError, match="not among"):
        ProgressAdvantageScorer(pol, ref, PAConfig(action_space="candidates")).step_scores(bad)


def test_truncated_spans_are_nan_and_flagged_not_zero():
    pol, ref = _pair({"go": -0.5}, {"go": -1.5}, max_positions=6)
    with pytest.raises(ValueError, match="truncate='left'"):
        ProgressAdvantageScorer(pol, ref).step_scores(_episode())
    s = ProgressAdvantageScorer(pol, ref, PAConfig(truncate="left")).step_scores(_episode())
    # 9 tokens + BOS into 6 positions: the first action (go north .) loses "go"; the second survives
    assert math.isnan(s.A[0]) and s.flags[0] == "truncated" and s.n_missing == 1
    assert s.A[1] == pytest.approx(0.0) and s.n_truncated_left == 4


def test_tokenizer_mismatch_and_cross_tokenizer_sum():
    pol = ScriptedScoringLM(VOCAB, {"go": -0.5})
    other = ScriptedScoringLM(VOCAB + ["west"], {"go": -1.5})
    with pytest.raises(ValueError, match="tokenizer mismatch"):
        ProgressAdvantageScorer(pol, other)
    sc = ProgressAdvantageScorer(pol, other, PAConfig(allow_cross_tokenizer=True))
    assert sc.step_scores(_episode()).A[0] == pytest.approx(1.0)  # each model tokenizes the text itself
    ids = Episode(((1,), (4,)), (False, True))
    with pytest.raises(ValueError, match="must be text"):
        sc.step_scores(ids)


def test_policy_equal_to_reference_warns():
    pol, ref = _pair({"go": -0.5}, {"go": -0.5})
    sc = ProgressAdvantageScorer(pol, ref)
    with pytest.warns(UserWarning, match="policy equals the reference"):
        out = sc.score_many([_episode(), _episode()])
    assert all(np.all(s.A == 0) for s in out)
    pol2, _ = _pair({"go": -0.1}, {})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ProgressAdvantageScorer(pol2, ref).score_many([_episode()])


def test_trajectory_input_and_batching():
    words = ScriptedScoringLM(VOCAB + ["<>"], {"go": -0.5, "look": -2.0})
    ref = ScriptedScoringLM(VOCAB + ["<>"], {"go": -1.0})
    traj = Trajectory(steps=(Step("room", "go north", info={"admissible_commands": ["go north", "look"]}),
                             Step("hall", "look", info={"admissible_commands": ["go north", "look"]})), reward=1.0)
    ep = Episode.from_trajectory(traj, action_prefix=" >", end_of_turn=" .")
    assert ep.candidates == (("go north", "look"), ("go north", "look"))
    sc = ProgressAdvantageScorer(words, ref, PAConfig(top_k=2))
    one = [sc.step_scores(e) for e in (ep, _episode())]
    many = sc.score_many([ep, _episode()], batch_size=2)
    for a, b in zip(one, many):
        assert np.array_equal(a.A, b.A) and a.self_certainty is not None
    assert one[0].A.tolist() == [pytest.approx(0.5), pytest.approx(-1.0)]
    assert sc.identity()["renderer"] == "plain/1" and sc.identity()["beta"] == 1.0


def test_tiny_pair_batched_equals_single():
    from agentmill.lm.tiny import load

    pol, ref = load("new?d=32&seed=1"), load("new?d=32&seed=2")
    sc = ProgressAdvantageScorer(pol, ref, PAConfig(token_agg="mean"))
    eps = [Episode.from_steps(["you are in the hall.", "a door."], ["go north", "open door"]),
           Episode.from_steps(["kitchen"], ["look"])]
    single = [sc.step_scores(e) for e in eps]
    batched = sc.score_many(eps, batch_size=2)
    for a, b in zip(single, batched):
        assert np.max(np.abs(a.A - b.A)) < 1e-5 and np.isfinite(a.A).all()
    assert np.all(ProgressAdvantageScorer(pol, pol).step_scores(eps[0]).A == 0.0)
    # one pass per model equals re-scoring every prefix separately (PERF-5's slow baseline)
    for e, a in zip(eps, single):
        assert np.max(np.abs(sc.step_scores_prefix_rescoring(e) - a.A)) < 1e-5


@pytest.mark.hf
@pytest.mark.slow
def test_scorer_over_an_hf_lora_pair():
    """SmolLM2 + a perturbed LoRA vs the same weights with the adapter off: the step score is the summed token
    log-ratio of the action (end-of-turn included), and a new (B = 0) adapter scores exactly 0."""
    import torch

    from agentmill.lm.pair import HFPair
    from agentmill.lm.scoring import score_segments

    pair = HFPair("smollm2", adapter="new")
    lm = pair.policy
    prompt = tuple(lm.render([{"role": "user", "content": "You are in the hall. Exits: north."}]))
    action = tuple(lm.encode("go north"))
    eot = (lm.tokenizer.convert_tokens_to_ids("<|im_end|>"),)
    ep = Episode((prompt, action), (False, True), end_of_turn=eot)
    sc = ProgressAdvantageScorer(pair.policy, pair.reference)
    assert sc.step_scores(ep).A[0] == 0.0
    with torch.no_grad():
        gen = torch.Generator().manual_seed(1)
        for n, p in pair.peft_model.named_parameters():
            if "lora_B" in n:
                p.add_(0.05 * torch.randn(p.shape, generator=gen))
    a = sc.step_scores(ep).A[0]
    lp = [score_segments(m, [prompt, action + eot]).token_logprobs[1].astype(np.float64)
          for m in (pair.policy, pair.reference)]
    assert abs(a) > 1e-3 and a == pytest.approx(float((lp[0] - lp[1]).sum()), abs=1e-5)


@pytest.mark.hf
@pytest.mark.slow
def test_chat_episode_reproduces_the_template_and_the_prompts():
    from agentmill.lm import load_lm
    from agentmill.methods.progress_advantage.scorer import chat_episode

    lm = load_lm("hf:smollm2")
    obs, acts = ["You are in the hall. Exits: north.", "You are in the kitchen."], ["go north", "open fridge"]
    ep = chat_episode(lm, obs, acts, candidates=[("go north", "look"), ("open fridge", "go south")])
    assert ep.is_action == (False, True, False, True) and ep.end_of_turn == "<|im_end|>"
    assert lm.encode(ep.segments[0]) == lm.render([{"role": "user", "content": obs[0]}])  # what the policy saw
    ids = [t for s, a in zip(ep.segments, ep.is_action) for t in lm.encode(s) + (lm.encode("<|im_end|>") if a else [])]
    msgs = [m for o, a in zip(obs, acts) for m in ({"role": "user", "content": o}, {"role": "assistant", "content": a})]
    full = lm.encode(lm.tokenizer.apply_chat_template(msgs, tokenize=False))
    assert full[: len(ids)] == ids
    with pytest.warns(UserWarning, match="policy equals the reference"):
        out = ProgressAdvantageScorer(lm, lm).score_many([ep])
    assert out[0].A.tolist() == [0.0, 0.0] and np.all(out[0].policy_logprob < 0)


def test_episodes_from_a_step_table_align_with_rows():
    from agentmill.core.types import StepTable
    from agentmill.methods.progress_advantage.scorer import episodes_from_table

    table = StepTable.from_episodes([
        {"group_id": "g", "traj_id": "a", "obs": ["room", "hall", "room"], "actions": ["go north", "look"],
         "rewards": [0, 1], "candidates": [("go north", "look"), ("look",)]},
        {"group_id": "g", "traj_id": "b", "obs": ["room", "hall"], "actions": ["look"], "rewards": [0],
         "end": "truncated"},
    ])
    eps = episodes_from_table(table, action_prefix=" >", end_of_turn=" .")
    assert [k for k, _ in eps] == [("g", "a"), ("g", "b")]
    assert eps[0][1].candidates == (("go north", "look"), ("look",)) and eps[1][1].candidates is None
    pol, ref = _pair({"go": -0.5, "look": -2.0}, {"go": -1.0, "look": -1.0})
    scores = ProgressAdvantageScorer(pol, ref).score_many([e for _, e in eps])
    flat = np.concatenate([s.A for s in scores])
    assert flat.tolist() == [pytest.approx(0.5), pytest.approx(-1.0), pytest.approx(-1.0)]  # one per table row
    assert flat.size == len(table)


def test_score_files_carry_the_pair_identity(tmp_path):
    from agentmill.methods.progress_advantage.scorer import read_scores, write_scores

    pol, ref = _pair({"go": -0.5}, {"go": -1.5}, max_positions=6)
    sc = ProgressAdvantageScorer(pol, ref, PAConfig(truncate="left"))
    s = sc.step_scores(_episode())
    path = write_scores(tmp_path / "scores.json", [(("g", "a"), s)], sc.identity())
    (key, back), = read_scores(path, sc.identity())
    assert key == ("g", "a") and back.flags == s.flags and math.isnan(back.A[0]) and back.A[1] == s.A[1]
    other = ProgressAdvantageScorer(pol, ref, PAConfig(truncate="left", beta=0.5))
    with pytest.raises(ValueError, match="beta"):
        read_scores(path, other.identity())


def test_empty_action_span_is_missing_not_zero():
    pol, ref = _pair({"go": -0.5}, {"go": -1.5})
    ep = Episode(("room >", "", "hall >", "go"), (False, True, False, True))  # no end-of-turn marker
    s = ProgressAdvantageScorer(pol, ref, PAConfig(step_agg="min")).step_scores(ep)
    assert math.isnan(s.A[0]) and s.flags == ("empty", "") and s.A[1] == 1.0
    assert ProgressAdvantageScorer(pol, ref, PAConfig(step_agg="min")).trajectory_score(ep) == 1.0  # NaN skipped
