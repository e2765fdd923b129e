"""Interventions over lm.intervene on a random tiny model (positions, no-ops, errors) and the activation store
(collection, resume after a crash, tokenizer mismatch, fp16 guard)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from agentmill.lm.tiny import TinyConfig, TinyLM
from agentmill.methods.crosscoder import CrossCoder, CrossCoderConfig, Partition
from agentmill.methods.crosscoder.interventions import Joint, SelfOnly, route, steer
from agentmill.methods.crosscoder.store import ActivationStore, collect_paired
from agentmill.methods.crosscoder.toolpair import greedy_ids


@pytest.fixture(scope="module")
def lm() -> TinyLM:
    return TinyLM(TinyConfig(layers=2, d=16, heads=2, max_len=64, seed=0))


@pytest.fixture(scope="module")
def cc() -> CrossCoder:
    return CrossCoder(CrossCoderConfig(dict_size=24, sparsity="topk", k=4, partition=Partition(0.25, 0.25)), d=16)


def _logits(lm, ids, cm=None):
    import contextlib

    with cm or contextlib.nullcontext():
        return lm.forward([ids]).logits[0]


def test_clamp_at_last_prompt_edits_only_that_position_and_later(lm, cc) -> None:
    ids = [256] + list(b"hello there")
    P = len(ids)
    clean = _logits(lm, ids)
    edited = _logits(lm, ids, steer(lm, cc, layer=0, view=0, features=[0], clamp_value=50.0,
                                    positions="last_prompt", prompt_len=[P]))
    assert torch.equal(clean[:P - 1], edited[:P - 1])
    assert not torch.allclose(clean[P - 1], edited[P - 1])


def test_alpha_one_is_token_identical_and_a_excl_block_is_enforced(lm, cc) -> None:
    prompts = [[256] + list(b"ab"), [256] + list(b"a longer prompt")]
    clean = greedy_ids(lm, prompts, max_new=6)
    same = greedy_ids(lm, prompts, max_new=6, intervention=lambda P: steer(
        lm, cc, layer=1, view=0, features=[0, 1], alpha=1.0, positions="all", prompt_len=P))
    assert same == clean
    with pytest.raises(ValueError, match="outside the a_excl block"):
        with steer(lm, cc, layer=0, view=0, features=[20], alpha=2.0, block="a_excl", prompt_len=[3]):
            pass
    with pytest.raises(ValueError, match="out of range"):
        with steer(lm, cc, layer=0, view=0, features=[99], alpha=2.0, prompt_len=[3]):
            pass


def test_route_replaces_with_reconstruction_and_joint_needs_its_source(lm, cc) -> None:
    ids = [256] + list(b"abc")
    P = len(ids)
    means = np.zeros((2, 16), np.float32)
    clean = _logits(lm, ids)
    routed = _logits(lm, ids, route(lm, cc, layer=0, view=1, positions="last_prompt",
                                    encode_from=SelfOnly("mean", means), prompt_len=[P]))
    assert torch.equal(clean[:P - 1], routed[:P - 1]) and not torch.allclose(clean[P - 1], routed[P - 1])
    with pytest.raises(ValueError, match="no source activation"):
        _logits(lm, ids, route(lm, cc, layer=0, view=1, positions="last_prompt", encode_from=Joint({}),
                               prompt_len=[P]))
    # hooks are gone after the exception
    assert torch.equal(_logits(lm, ids), clean)


def test_store_collects_resumes_and_refuses_mismatches(tmp_path, lm) -> None:
    b = TinyLM(TinyConfig(layers=2, d=16, heads=2, max_len=64, seed=1))
    ids = [[256] + list(f"text number {i}".encode()) for i in range(12)]
    st = collect_paired([lm, b], ids, layer=1, store=tmp_path / "s", shard_rows=40, scale_rows=50)
    full = st.rows()
    assert full.shape == (sum(len(s) - 1 for s in ids), 2, 16) and len(st.shard_names()) > 1
    h = lm.forward([ids[0]], hidden_states=True).hidden_states[2][0, 1:].numpy() * st.meta["s_A"]
    assert np.allclose(full[:len(ids[0]) - 1, 0], h, atol=2e-2)  # fp16 storage
    # a crash after the first shard: drop the later shards from meta and collect again
    meta = json.loads((tmp_path / "s" / "meta.json").read_text())
    first = ActivationStore(tmp_path / "s")
    first_rows = len(first.rows("doc"))
    import safetensors.numpy as sn

    n0 = len(sn.load_file(str(tmp_path / "s" / meta["shards"][0]))["doc"])
    docs0 = int(sn.load_file(str(tmp_path / "s" / meta["shards"][0]))["doc"].max()) + 1
    meta.update(shards=meta["shards"][:1], rows=n0, docs_done=docs0)
    (tmp_path / "s" / "meta.json").write_text(json.dumps(meta))
    again = collect_paired([lm, b], ids, layer=1, store=tmp_path / "s", shard_rows=40, scale_rows=50)
    assert len(again.rows("doc")) == first_rows and np.array_equal(again.rows(), full)
    with pytest.raises(ValueError, match="another collection"):
        collect_paired([lm, b], ids, layer=0, store=tmp_path / "s")
    b.tokenizer_fingerprint = lambda: "different"  # type: ignore[method-assign]
    with pytest.raises(ValueError, match="tokenize differently"):
        collect_paired([lm, b], ids, layer=1, store=tmp_path / "t")
    with pytest.raises(ValueError, match="outside"):
        collect_paired([lm, lm], ids, layer=5, store=tmp_path / "u")


def test_store_keeps_float32_when_fp16_would_overflow(tmp_path) -> None:
    st = ActivationStore(tmp_path / "big")
    x = np.zeros((3, 2, 4), np.float32)
    x[1, 0, 0] = 1e5
    st.write_shard({"x": x, "doc": np.zeros(3), "pos": np.arange(3), "token": np.zeros(3), "label": np.zeros(3)})
    assert st.rows()[1, 0, 0] == 1e5
