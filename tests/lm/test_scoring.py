"""Segment scoring (lm.scoring): hand-checked bookkeeping on the canned scorer, agreement with each
backend's own ``logprobs``, batched == one by one, truncation surfaced as NaN, tokenizer fingerprints."""

from __future__ import annotations

import numpy as np
import pytest

from agentmill.lm.scoring import (CapabilityError, bos_id, score_segments, score_segments_batch,
                                  tokenizer_fingerprint)
from agentmill.lm.scripted import ScriptedLM, ScriptedScoringLM, ScriptedWhiteBoxLM

VOCAB = ["you", "are", "here", "go", "north", "look", "ok"]


def _canned() -> ScriptedScoringLM:
    # context-dependent: "north" is likely only right after "go"
    idx = {w: i + 1 for i, w in enumerate(VOCAB)}

    def nxt(ctx: tuple[int, ...]) -> np.ndarray:
        v = np.full(len(VOCAB) + 1, -2.0)
        v[idx["north"]] = -0.1 if ctx[-1] == idx["go"] else -5.0
        v[idx["go"]] = -0.5
        return v

    return ScriptedScoringLM(VOCAB, nxt)


def test_canned_scores_by_hand():
    lm = _canned()
    r = score_segments(lm, ["you are here", "go north", "look north"], top_k=2)
    assert [x.tolist() for x in r.token_logprobs] == [[-2.0, -2.0, -2.0], [-0.5, pytest.approx(-0.1)],
                                                       [-2.0, -5.0]]
    assert r.token_ids[1].tolist() == [4, 5]
    assert r.topk_mean is not None and r.topk_mean[1][1] == pytest.approx((-0.1 - 0.5) / 2)
    assert r.n_truncated_left == 0
    assert lm.calls[-1] == [[0, 1, 2, 3, 4, 5, 6, 5]]  # BOS prepended once, then the segments in order


def test_token_id_segments_and_existing_bos_are_used_as_given():
    lm = _canned()
    r = score_segments(lm, [[0, 1], [4, 5]])
    assert lm.calls[-1] == [[0, 1, 4, 5]]  # the sequence already starts with BOS: none added
    assert np.isnan(r.token_logprobs[0][0]) and r.token_logprobs[1][1] == pytest.approx(-0.1)
    with pytest.raises(TypeError, match="mix"):
        score_segments(lm, ["go", [5]])


def test_truncation_errors_or_marks_dropped_tokens_nan():
    lm = _canned()
    segs = ["you are here", "go north", "look"]
    with pytest.raises(ValueError, match="truncate='left'"):
        score_segments(lm, segs, max_len=5)
    r = score_segments(lm, segs, max_len=5, truncate="left")
    # 6 tokens + BOS into 5 positions: BOS + the last 4 tokens; "you are" are dropped and reported
    assert r.n_truncated_left == 2
    assert np.isnan(r.token_logprobs[0][:2]).all() and r.token_logprobs[0][2] == -2.0
    assert r.token_logprobs[1].tolist() == [-0.5, pytest.approx(-0.1)]
    assert lm.calls[-1] == [[0, 3, 4, 5, 6]]


def test_unknown_words_and_black_boxes_fail_clearly():
    with pytest.raises(ValueError, match="not in the vocabulary"):
        score_segments(_canned(), ["fly away"])
    with pytest.raises(CapabilityError):
        score_segments(ScriptedLM({"x": "y"}), [[1, 2, 3]])


def test_fingerprints_separate_tokenizers():
    assert tokenizer_fingerprint(_canned()) == tokenizer_fingerprint(_canned())
    assert tokenizer_fingerprint(_canned()) != tokenizer_fingerprint(ScriptedScoringLM(VOCAB[:-1], {}))
    assert tokenizer_fingerprint(ScriptedWhiteBoxLM(seed=0)) == tokenizer_fingerprint(ScriptedWhiteBoxLM(seed=1))


@pytest.mark.parametrize("make", [lambda: ScriptedWhiteBoxLM(seed=3),
                                  lambda: __import__("agentmill.lm.tiny", fromlist=["x"]).load("new?d=32&seed=1")])
def test_white_box_scores_match_logprobs_and_batching(make):
    lm = make()
    prompt, action = "you are in the hall.\n> ", "go north"
    r = score_segments(lm, [prompt, action])
    ref = lm.logprobs(prompt, action)  # float64 reference path of the backend itself
    assert np.max(np.abs(r.token_logprobs[1] - ref)) < 1e-5
    assert bos_id(lm) is not None and not np.isnan(r.token_logprobs[0]).any()
    batch = [[prompt, action], ["a", "b c", "look around you"], ["x" * 40, "open chest"]]
    one = [score_segments(lm, b, top_k=3) for b in batch]
    many = score_segments_batch(lm, batch, batch_size=3, top_k=3)
    for a, b in zip(one, many):
        for x, y in zip(a.token_logprobs + a.topk_mean, b.token_logprobs + b.topk_mean):
            assert x.dtype == np.float32 and x.shape == y.shape
            assert np.max(np.abs(x - y)) < 1e-5


def test_scoring_refuses_a_model_in_training_mode():
    from agentmill.lm.tiny import load

    lm = load("new?d=16&seed=0")
    lm.model.train()
    with pytest.raises(Exception, match="training mode"):
        score_segments(lm, ["a", "b"])


@pytest.mark.hf
@pytest.mark.slow
def test_smollm2_batched_equals_unbatched_and_logprobs(smol):
    prompt = smol.render([{"role": "user", "content": "You are in the kitchen. Exits: north."}])
    action = smol.encode("go north") + list(smol.eos_token_ids[:1])
    r = score_segments(smol, [prompt, action])
    assert np.isnan(r.token_logprobs[0][0])  # the chat template starts with BOS itself: nothing before it
    ref = smol.logprobs([{"role": "user", "content": "You are in the kitchen. Exits: north."}], "go north")
    assert np.max(np.abs(r.token_logprobs[1][:-1] - ref)) < 1e-4
    other = [smol.encode("Hello there, how are"), smol.encode(" you")]
    one = [score_segments(smol, s) for s in ([prompt, action], other)]
    many = score_segments_batch(smol, [[prompt, action], other], batch_size=2)
    for a, b in zip(one, many):
        for x, y in zip(a.token_logprobs, b.token_logprobs):
            assert np.allclose(x, y, atol=1e-5, equal_nan=True)
