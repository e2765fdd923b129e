"""lm.intervene: record and edit block outputs at named positions, under padding, KV caching and exceptions;
lm.fork.WhiteBoxForker.add_leaf registers an external completion."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from agentmill.lm.intervene import Indices, PositionsUnknown, intervene, record, select, ForwardContext  # noqa: E402
from agentmill.lm.tiny import TinyConfig, TinyLM  # noqa: E402


@pytest.fixture(scope="module")
def lm() -> TinyLM:
    return TinyLM(TinyConfig(layers=3, d=32, heads=4, max_len=64, seed=1))


def _batch(seqs: list[list[int]]) -> tuple:
    width = max(map(len, seqs))
    ids = torch.full((len(seqs), width), 258, dtype=torch.long)
    mask = torch.zeros((len(seqs), width), dtype=torch.long)
    for b, s in enumerate(seqs):
        ids[b, width - len(s):] = torch.tensor(s)
        mask[b, width - len(s):] = 1
    return ids, mask, (mask.cumsum(1) - 1).clamp(min=0)


def test_select_named_positions_by_hand() -> None:
    ctx = ForwardContext(np.array([[0, 0, 1, 2], [0, 1, 2, 3]]), np.array([[0, 1, 1, 1], [1, 1, 1, 1]], bool))
    assert select("all", ctx, None).tolist() == [[False, True, True, True], [True] * 4]
    assert select("last_prompt", ctx, [2, 3]).tolist() == [[False, False, True, False], [False, False, True, False]]
    assert select("generated", ctx, 2).tolist() == [[False, False, False, True], [False, False, True, True]]
    assert select(Indices.of([[0], [3]]), ctx, None).tolist() == [[False, True, False, False],
                                                                  [False, False, False, True]]
    with pytest.raises(PositionsUnknown):
        select("prompt", ctx, None)


def test_record_equals_hidden_states_entry_plus_one(lm: TinyLM) -> None:
    ids = torch.tensor([[256, 72, 105, 33, 10]])
    ref = lm.forward(ids, hidden_states=True).hidden_states
    with record(lm, [0, 2], "all") as rec:
        lm.forward(ids)
    for block in (0, 2):
        for pos in range(5):
            assert np.allclose(rec.get(block, 0, pos), ref[block + 1][0, pos].numpy(), atol=1e-6)


def test_padded_batch_edits_the_right_pairs(lm: TinyLM) -> None:
    seqs = [[256, 1, 2, 3, 4, 5], [256, 7, 8], [256, 9, 10, 11]]
    u = torch.linspace(-1.0, 1.0, 32)

    def edit(h, where):
        return h + 3.0 * u

    ids, mask, pos = _batch(seqs)
    with intervene(lm, 1, edit, Indices.of([[2], [1], [3]])):
        batched = lm.forward(ids, attention_mask=mask, position_ids=pos).logits
    for b, s in enumerate(seqs):
        with intervene(lm, 1, edit, Indices.of([[[2], [1], [3]][b]])):
            single = lm.forward(torch.tensor([s])).logits[0]
        assert torch.allclose(batched[b, ids.shape[1] - len(s):], single, atol=1e-5)
        plain = lm.forward(torch.tensor([s])).logits[0]
        assert not torch.allclose(plain, single, atol=1e-3)


def test_cached_edit_equals_uncached_reencode(lm: TinyLM) -> None:
    seq = [256, 5, 6, 7, 8, 9, 10]

    def edit(h, where):
        return h * 0.0 + 1.0

    with intervene(lm, 0, edit, Indices.of([[4]])):
        full = lm.forward(torch.tensor([seq])).logits[0]
        out = lm.forward(torch.tensor([seq[:3]]))
        cache = out.cache
        steps = [out.logits[0]]
        for t in seq[3:]:
            o = lm.forward(torch.tensor([[t]]), cache)
            cache = o.cache
            steps.append(o.logits[0])
    inc = torch.cat(steps, 0)
    assert torch.allclose(full, inc, atol=1e-5)


def test_hooks_and_wrapper_removed_on_exception(lm: TinyLM) -> None:
    ids = torch.tensor([[256, 1, 2]])
    before = lm.forward(ids).logits.clone()
    with pytest.raises(RuntimeError):
        with intervene(lm, 0, lambda h, w: h + 100.0, "all"):
            raise RuntimeError("boom")
    assert "forward" not in vars(lm)
    assert torch.equal(lm.forward(ids).logits, before)


def test_hook_without_context_raises(lm: TinyLM) -> None:
    with intervene(lm, 0, lambda h, w: h, "all"):
        with pytest.raises(PositionsUnknown):
            lm.model(torch.tensor([[256, 1]]))


def test_nested_managers_apply_in_entry_order(lm: TinyLM) -> None:
    ids = torch.tensor([[256, 3, 4]])
    with intervene(lm, 0, lambda h, w: h * 0 + 1.0, Indices.of([[1]])):
        with intervene(lm, 0, lambda h, w: h * 2.0, Indices.of([[1]])):
            with record(lm, [0], "all") as rec:  # hooks run in registration order: record sees both edits
                lm.forward(ids)
    assert np.allclose(rec.get(0, 0, 1), 2.0)


def test_add_leaf_then_fork_matches_a_fresh_fork(lm: TinyLM) -> None:
    from agentmill.lm.fork import BranchRequest, WhiteBoxForker

    prompt = [256, 10, 11, 12]
    leaf_ids = np.array([20, 21, 22, 23, 24], dtype=np.int32)
    fk = WhiteBoxForker(lm)
    tree = fk.start_tree(prompt, (0, 1))
    leaf = fk.add_leaf(tree, leaf_ids)
    a = fk.expand(tree, [BranchRequest(leaf, 3, leaf_ids[:3], 7, 6)], 1.0)[0]
    c = fk.end_tree(tree)
    assert c.prefill_tokens == len(prompt) + len(leaf_ids) - 1 and c.refeed_tokens == 1
    assert c.forward_tokens == c.prefill_tokens + c.fed_tokens + c.refeed_tokens
    rk = WhiteBoxForker(lm, mode="recompute")
    t2 = rk.start_tree(prompt, (0, 1))
    leaf2 = rk.add_leaf(t2, leaf_ids)
    b = rk.expand(t2, [BranchRequest(leaf2, 3, leaf_ids[:3], 7, 6)], 1.0)[0]
    assert np.array_equal(a.token_ids, b.token_ids)
