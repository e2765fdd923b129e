"""lm.candidate_pair: a fresh pair is its own reference (β·log π_θ/π_ref = 0 before training), and a spec the pair
cannot be built from is refused."""

from __future__ import annotations

import numpy as np
import pytest

from agentmill.envs.keydoor import TINY_WORLD, KeyDoorEnv, layouts
from agentmill.lm.candidate_pair import build_pair


def test_a_fresh_tiny_pair_is_its_own_reference_and_bad_specs_raise() -> None:
    import torch

    layout = layouts(1, seed=0, calibrate=None, config=TINY_WORLD)[0]
    _, _, obs, adm = KeyDoorEnv(layout, TINY_WORLD).to_tabular()
    info = {"admissible_commands": list(adm[0]), "objective": layout.objective}
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        pair = build_pair("tiny:new?d=16&layers=1&heads=2&max_len=1024&seed=3", temperature=20.0, one_shot=False,
                          lr=1e-3)
        assert np.allclose(pair.policy.log_probs(obs[0], info), pair.reference.log_probs(obs[0], info), atol=1e-5)
    finally:
        torch.set_num_threads(n)
    assert len(info["admissible_commands"]) <= 8  # the tiny world keeps ≤ 8 candidates per state
    with pytest.raises(ValueError, match="hf:NAME"):
        build_pair("scripted:x", temperature=1.0, one_shot=False, lr=1e-3)
