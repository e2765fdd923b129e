"""The SmolLM2 arm of the tool-pair experiments: full setups read SmolLM2 at block 15, the fallback restores the
tiny pair's sizes, paired collection at several blocks equals one block at a time, outliers are dropped and
counted."""

from __future__ import annotations

import numpy as np
import pytest

from agentmill.experiments import get
from agentmill.experiments.e175_crosscoder.pairbench import PairSetup, _one_harness
from agentmill.experiments.e175_crosscoder.smolbench import SMOL, tiny_setup

TOOL_PAIR = ("routing", "steering", "spillover_leak", "ablation", "template_detector", "single_vs_many",
             "excl_penalty", "layers")


@pytest.mark.parametrize("name", TOOL_PAIR)
def test_full_reads_smollm2_at_block_15_and_the_fallback_restores_tiny_sizes(name) -> None:
    exp = get(f"e175.crosscoder_{name}")
    full, smoke = exp.setups["full"], exp.setups["smoke"]
    assert full.substrate == "smollm2" and full.layer == 15 and full.dict_size == 1024 and full.k == 32
    assert smoke.substrate == "tiny"
    tiny = tiny_setup(full)
    default = type(full)()
    assert tiny.substrate == "tiny"
    for k in set(SMOL) - {"substrate"}:
        assert getattr(tiny, k) == getattr(default, k) == getattr(PairSetup(), k)
    if name == "layers":
        assert full.layers == (11, 15, 22) and tiny.layers == (1, 2, 3)
    assert all("SmolLM2" in c.source for c in exp.claims if c.id != "CX-13")


def test_the_tiny_pair_has_one_rendering() -> None:
    _one_harness("chat")
    with pytest.raises(ValueError, match="one rendering"):
        _one_harness("raw")


def test_collection_at_several_blocks_equals_one_block_at_a_time() -> None:
    from agentmill.lm.tiny import TinyConfig, TinyLM
    from agentmill.methods.crosscoder.organism import make_prompts
    from agentmill.methods.crosscoder.toolpair import collect_pair_rows, encode_prompt

    a = TinyLM(TinyConfig(layers=3, d=32, heads=2, max_len=256, seed=1))
    b = TinyLM(TinyConfig(layers=3, d=32, heads=2, max_len=256, seed=2))
    prompts = make_prompts("tool", 3, seed=0) + make_prompts("generic", 2, seed=0)
    both = collect_pair_rows(a, b, prompts, (0, 2), batch=2)
    for L in (0, 2):
        one = collect_pair_rows(a, b, prompts, L, batch=4)
        np.testing.assert_allclose(both["x"][L], one["x"], atol=1e-5)
        np.testing.assert_array_equal(both["pos"], one["pos"])
    assert both["x"][0].shape[1:] == (2, 32)
    # the early-exit hooks give what a full forward's hidden_states[L + 1] holds
    import torch

    ids = torch.tensor([encode_prompt(a, prompts[0])])
    full = a.forward(ids, hidden_states=True).hidden_states
    n0 = len(ids[0]) - 1
    for L in (0, 2):
        np.testing.assert_allclose(both["x"][L][:n0, 0], full[L + 1][0, 1:].float().numpy(), atol=1e-5)
    assert both["pos"].min() == 1  # position 0 is never a row
    n_tokens = sum(len(encode_prompt(a, p)) - 1 for p in prompts)
    assert len(both["doc"]) == n_tokens
    # a custom encoder is what both models read: truncating prompts to their first 6 ids leaves 5 rows each
    short = collect_pair_rows(a, b, prompts, 1, encode=lambda lm, p: encode_prompt(lm, p)[:6])
    assert len(short["doc"]) == 5 * len(prompts)
    assert short["last"].sum() == len(prompts)


def test_outlier_rows_are_dropped_and_counted() -> None:
    from agentmill.methods.crosscoder.toolpair import drop_outliers

    rng = np.random.default_rng(0)
    x = rng.normal(size=(50, 2, 8)).astype(np.float32)
    x[7, 1] *= 100.0  # a massive activation in model B only
    rows = {"x": x, "doc": np.arange(50), "pos": np.arange(50), "last": np.zeros(50, bool),
            "label": np.zeros(50, int)}
    kept, dropped = drop_outliers(rows)
    assert dropped == 1 and len(kept["x"]) == 49 and 7 not in kept["doc"]
    _, none = drop_outliers({k: np.delete(v, 7, 0) for k, v in rows.items()})
    assert none == 0


def test_a_dead_exclusive_block_withholds_the_top_latent_claims() -> None:
    from agentmill.experiments.e175_crosscoder.pairbench import dead_block_note

    assert dead_block_note({}) is None
    assert dead_block_note({"a_excl_alive_on_ranking": {"alive": 3, "of": 51, "prompts_per_side": 400}}) is None
    note = dead_block_note({"a_excl_alive_on_ranking": {"alive": 0, "of": 51, "prompts_per_side": 400}})
    assert note is not None and note.startswith("precondition not met") and "0 of 51" in note
    for name in ("ablation", "template_detector"):
        exp = get(f"e175.crosscoder_{name}")
        assert set(exp.judge("full", {}, {"precondition": note}).values()) == {"inconclusive"}
