"""Each stage on a smoke-size model moves parameters and lowers its loss; GRPO raises the probability of a
rewarded completion; the cached pipeline reuses its stages."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")

from agentmill.lm.base import GenerateConfig  # noqa: E402
from agentmill.lm.tiny import train_bpe  # noqa: E402
from agentmill.methods.world_model.data import WMExample  # noqa: E402
from agentmill.methods.world_model.rewards import RewardBreakdown  # noqa: E402
from agentmill.methods.world_model.train import (RLConfig, StageConfig, new_model, train_cpt, train_grpo,  # noqa: E402
                                                 train_sft)


def _params(lm):
    return np.concatenate([p.detach().numpy().ravel() for p in lm.model.parameters()])


def _ex(prompt: str, target: str) -> WMExample:
    return WMExample(prompt, target, "t", 0, True, False, "o", "n", None, "look")


@pytest.mark.slow  # ~5 s: the first AdamW in a process imports torch._dynamo
def test_cpt_and_sft_move_parameters_and_lower_loss() -> None:
    docs = ["the red key opens the red door. " * 8, "go north to the kitchen. " * 8]
    bpe = train_bpe(docs, vocab_size=300)
    lm = new_model(1, 32, 2, 128, 0, bpe)
    before = _params(lm)
    losses = train_cpt(lm, docs, StageConfig(steps=30, batch=4, seq_len=32, lr=3e-3))
    assert np.mean(losses[-5:]) < np.mean(losses[:5]) and not np.allclose(before, _params(lm))
    exs = [_ex("Q: colour? A:", " red"), _ex("Q: room? A:", " kitchen")]
    losses = train_sft(lm, exs, StageConfig(steps=30, batch=2, lr=3e-3))
    assert np.mean(losses[-5:]) < np.mean(losses[:5])


def test_grpo_raises_the_rewarded_token_probability() -> None:
    """A reward that prefers completions starting with 'a': the share of such samples rises (over 2 seeds)."""
    gains = []
    for seed in (0, 1):
        lm = new_model(1, 16, 2, 64, seed)
        ex = _ex("x", "a")

        def share() -> float:
            c = lm.generate(["x"], GenerateConfig(n=64, temperature=1.0, max_new_tokens=1, seed=99))
            return float(np.mean([t.text.startswith("a") for t in c]))

        def reward(e, text):
            v = 1.0 if text.startswith("a") else 0.0
            return RewardBreakdown(v, v, 0.0, 0, 0, 0, True, True)

        s0 = share()
        log = train_grpo(lm, [ex, ex], reward, RLConfig(iterations=40, prompts=2, k=16, max_new=1, lr=5e-2, beta=0.0,
                                                        seed=seed))
        gains.append(share() - s0)
        assert log.kl[0] == pytest.approx(0.0, abs=1e-6)
    assert min(gains) > 0.05 and np.mean(gains) > 0.2, gains
    with pytest.raises(ValueError):
        RLConfig(k=1)
