"""The per-step decode hook of ``lm.decoding.decode_rows``: absent or silent, nothing changes; forced ids land."""

from __future__ import annotations

import numpy as np

from agentmill.lm.base import GenerateConfig
from agentmill.lm.decoding import StepState, decode_rows
from agentmill.lm.tiny import TinyConfig, TinyLM

CFG = GenerateConfig(max_new_tokens=12, temperature=1.0, seed=5)
ROWS = [(0, 0), (0, 1), (1, 0), (1, 1)]


def _lm() -> tuple[TinyLM, list[list[int]]]:
    lm = TinyLM(TinyConfig(layers=1, d=16, heads=2, seed=2))
    return lm, [lm.render("ab"), lm.render("a longer prompt")]


def test_silent_hook_changes_nothing_and_sees_every_sampled_step() -> None:
    lm, rendered = _lm()
    plain = decode_rows(lm, rendered, ROWS, CFG, 5)
    seen: list[StepState] = []
    hooked = decode_rows(lm, rendered, ROWS, CFG, 5, step_hook=lambda s: seen.append(s))
    assert [c.token_ids for c in plain] == [c.token_ids for c in hooked]
    assert [c.logprobs for c in plain] == [c.logprobs for c in hooked]
    assert [c.text for c in plain] == [c.text for c in lm.generate(["ab", "a longer prompt"], CFG.__class__(
        max_new_tokens=12, temperature=1.0, seed=5, n=2))]
    # called once per sampled token that does not end its row, with the ids so far
    for r, c in enumerate(plain):
        steps = [s for s in seen if s.row == r]
        n_calls = len(c.token_ids) - (1 if c.finish_reason == "length" else 0)
        assert [s.step for s in steps] == list(range(n_calls))
        assert all(s.ids == c.token_ids[: s.step + 1] and (s.prompt, s.sample) == ROWS[r] for s in steps)


def test_first_step_entropy_is_the_prefill_distribution_entropy() -> None:
    import torch

    lm, rendered = _lm()
    seen: list[StepState] = []
    decode_rows(lm, rendered, [(1, 0)], CFG, 5, step_hook=lambda s: seen.append(s))
    logits = lm.forward([rendered[1]]).logits[0, -1].double()
    p = torch.softmax(logits, -1)
    assert abs(seen[0].entropy - float(-(p * p.log()).sum())) < 1e-6


def test_forced_ids_land_after_the_hooked_step_and_other_rows_are_unchanged() -> None:
    lm, rendered = _lm()
    plain = decode_rows(lm, rendered, ROWS, CFG, 5)
    forced = [65, 66, 67]

    def hook(s: StepState) -> list[int] | None:
        return forced if s.row == 2 and s.step == 1 else None

    out = decode_rows(lm, rendered, ROWS, CFG, 5, step_hook=hook)
    t = out[2].token_ids
    assert t[:2] == plain[2].token_ids[:2] and list(t[2:5]) == forced
    assert len(t) == CFG.max_new_tokens  # forced ids count toward the budget
    # forced ids carry their log-probability under the model (teacher-forced check)
    import torch

    logits = lm.forward([rendered[1] + list(t[:5])]).logits[0].double()
    P = len(rendered[1])
    want = [float(torch.log_softmax(logits[P + i - 1], -1)[t[i]]) for i in range(2, 5)]
    assert np.allclose(out[2].logprobs[2:5], want, atol=1e-4)
    for r in (0, 1, 3):
        assert out[r].token_ids == plain[r].token_ids
