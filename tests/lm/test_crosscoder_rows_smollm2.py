"""E175's paired collection on a real ``hf:`` model: the early-exit hooks give what a full forward's
``hidden_states[L + 1]`` holds under left padding, and the chat and raw harnesses render differently."""

from __future__ import annotations

import numpy as np
import torch

from agentmill.methods.crosscoder import sibling as S
from agentmill.methods.crosscoder.organism import make_prompts
from agentmill.methods.crosscoder.toolpair import collect_pair_rows


def test_paired_rows_of_smollm2_match_the_full_forward(smol) -> None:
    prompts = make_prompts("tool", 2, seed=0) + make_prompts("generic", 1, seed=0)
    chat = lambda lm, p: S.prompt_ids(lm.tokenizer, p)  # noqa: E731
    rows = collect_pair_rows(smol, smol, prompts, (3, 15), batch=3, encode=chat)
    for L in (3, 15):
        np.testing.assert_array_equal(rows["x"][L][:, 0], rows["x"][L][:, 1])  # the same model on both sides
    ids = S.prompt_ids(smol.tokenizer, prompts[1])
    with torch.no_grad():
        full = smol.forward(torch.tensor([ids]), hidden_states=True).hidden_states[16][0, 1:].float().numpy()
    got = rows["x"][15][rows["doc"] == 1, 0]
    np.testing.assert_allclose(got, full, atol=2e-3, rtol=1e-3)  # left padding in the batch: same activations
    raw = S.raw_prompt_ids(smol.tokenizer, prompts[0])
    assert raw != S.prompt_ids(smol.tokenizer, prompts[0])[-len(raw):] and "<|im_start|>" not in smol.decode(raw)
