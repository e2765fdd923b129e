"""Positions on sampled ids, capture equals a plain forward, the plant appears at its layer only, and prefix-freeze
accounting on a random tiny model."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from agentmill.lm.tiny import TinyConfig, TinyLM  # noqa: E402
from agentmill.methods.first_token_probe.capture import Plant, capture, locate_positions  # noqa: E402
from agentmill.methods.first_token_probe.config import FreezeConfig  # noqa: E402
from agentmill.methods.first_token_probe.freeze import (FreezeCurve, FreezePoint, freeze_points,  # noqa: E402
                                                        lock_index_at, prefix_freeze)
from agentmill.methods.first_token_probe.prompts import sample_prompts  # noqa: E402
from agentmill.methods.first_token_probe.sampling import Rollout  # noqa: E402
from agentmill.methods.first_token_probe.traces import render_prompt  # noqa: E402

TEXT = "Hmm, this is private data. A quick ask. So I decline.\n</think>\nI can't share that."


@pytest.fixture(scope="module")
def lm() -> TinyLM:
    return TinyLM(TinyConfig(layers=2, d=32, heads=4, max_len=256, seed=3))


def _rollout(lm: TinyLM, text: str = TEXT, outcome: int | None = 1, which: int = 0) -> Rollout:
    item = sample_prompts("probe_test", {"C": 3})[which]
    p = lm.render(render_prompt(item.user))
    r = Rollout(item, 0, p, lm.encode(text), text, "eos")
    r.outcome = outcome
    return r


def test_positions_by_hand(lm: TinyLM) -> None:
    r = _rollout(lm)
    P = len(r.prompt_ids)
    T = TEXT.index("\n</think>")  # bytes: one token per character
    idx = locate_positions(lm, r.prompt_ids, r.sampled_ids, r.text,
                           ["think_open", "first_generated", "frac:0.0", "frac:1.0", "think_close", "answer_first"])
    assert idx["think_open"] == P - 1 and idx["first_generated"] == P == idx["frac:0.0"]
    assert idx["frac:1.0"] == idx["think_close"] == P + T - 1
    assert (r.prompt_ids + r.sampled_ids)[idx["answer_first"] + 1] == ord("I")
    short = _rollout(lm, "Hmm, no closer yet")
    assert locate_positions(lm, short.prompt_ids, short.sampled_ids, short.text, ["frac:0.5"])["frac:0.5"] is None


def test_capture_matches_forward_and_plant_shows_from_its_layer(lm: TinyLM) -> None:
    rolls = [_rollout(lm), _rollout(lm, "So,", which=2)]  # different prompts: σ_u > 0
    acts = capture(lm, rolls, ["think_open", "frac:0.5"], "all")
    assert np.isnan(acts.H[1, 1]).all() and not acts.mask[1, 1]
    ids = torch.tensor([rolls[0].prompt_ids + rolls[0].sampled_ids])
    hs = lm.forward(ids, hidden_states=True).hidden_states
    a = acts.index[0]["think_open"]
    for li in range(3):
        assert np.allclose(acts.H[0, 0, li], hs[li][0, a].numpy(), atol=1e-5)
    u = np.linspace(-1, 1, 32)
    u /= np.linalg.norm(u)
    planted = capture(lm, rolls, ["think_open"], "all", plant=Plant(1, "think_open", u, 4.0, np.array([1.0, -1.0])))
    diff = np.abs(planted.H[:, 0] - acts.H[:, 0]).max(axis=(0, 2))
    assert diff[0] == 0 and diff[1] > 0.1


@pytest.mark.slow  # ~3-8 s: one freeze sweep on a random tiny model
def test_freeze_points_and_counters(lm: TinyLM) -> None:
    r = _rollout(lm)
    pts, T, sents = freeze_points(lm, r.sampled_ids, r.text)
    assert [s for _, s in pts] == [0, 1, 2, 3] and len(sents) == 3
    assert pts[1][0] == len("Hmm, this is private data. ") and T == TEXT.index("\n</think>")
    c = prefix_freeze(lm, r, cfg=FreezeConfig(resamples=2, max_new_tokens=8))
    n = c.counters
    assert n["forward_tokens"] == n["prefill_tokens"] + n["fed_tokens"] + n["refeed_tokens"]
    assert n["refeed_tokens"] == 2 * 3  # one per fork, R = 2 at each of the 3 boundaries with k ≥ 1
    assert n["prefill_tokens"] == len(r.prompt_ids) + len(r.sampled_ids) - 1
    with pytest.raises(ValueError):
        prefix_freeze(lm, _rollout(lm, outcome=None))


def test_lock_point_rule() -> None:
    pts = [FreezePoint(k, k / 4, k, a, 0.0, 4, 0) for k, a in enumerate([0.5, 1.0, 0.75, 1.0, 1.0])]
    c = FreezeCurve("x", 1, 4, pts, lock_index_at(FreezeCurve("x", 1, 4, pts, None, ()), 0.9), ())
    assert c.lock_index == 3 and c.lock_sentence == 3
    assert lock_index_at(c, 0.75) == 1 and lock_index_at(c, 0.5) == 0
    assert c.locked_before(3) and not c.locked_before(2)
