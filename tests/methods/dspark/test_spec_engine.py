"""SpecEngine on a tiny random Llama: prompt-lookup speculation (greedy) gives exactly the plain decoder's tokens,
commits several tokens per round on repetitive text, respects max_tokens/stop strings inside a multi-token
commit, and frees every KV cache."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from agentmill.lm.engine import EngineConfig, SamplingParams
from agentmill.lm.engine.tiny import tiny_llama
from agentmill.methods.dspark.spec_engine import SpecEngine, safe_text_end
from agentmill.methods.dspark.proposers import NgramProposer


@pytest.fixture(scope="module")
def target():
    return tiny_llama(1, EngineConfig(threads=1, max_model_len=1024), scale=6.0)


def run(engine, prompts, params):
    ids = [engine.add_request(p, params) for p in prompts]
    outs = {i: [] for i in ids}
    texts = {i: "" for i in ids}
    while engine.has_work():
        for o in engine.step():
            assert o.error is None
            outs[o.rid] += o.token_ids
            texts[o.rid] += o.text
    return [outs[i] for i in ids], [texts[i] for i in ids]


def test_ngram_proposer_prompt_lookup():
    pr = NgramProposer(n_max=3, k=3)
    assert pr.propose_one([1, 2, 3, 9, 8, 1, 2]) == [3, 9, 8]          # longest match: [1, 2]
    assert pr.propose_one([5, 6, 7]) == []
    assert pr.propose_one([4, 4, 4, 4], limit=2) == [4]                # the continuation ends at the context
    assert pr.propose_one([7, 8, 9, 1, 7, 8], limit=2) == [9, 1]
    with pytest.raises(ValueError):
        NgramProposer(n_min=3, n_max=2)


def test_greedy_speculation_equals_plain_decoding(target):
    tok = target.tokenizer
    prompts = [tok.encode("abcabcabcabc abcabc"), tok.encode("the cat the cat the cat"), tok.encode("xyz")]
    params = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)
    plain, _ = run(SpecEngine(target), prompts, params)
    spec_engine = SpecEngine(target, NgramProposer(k=4), verify_len=4)
    spec, texts = run(spec_engine, prompts, params)
    assert spec == plain
    assert [len(s) for s in spec] == [40, 40, 40]
    st = spec_engine.stats
    assert st.drafted > 0 and st.rounds > 0 and st.committed == st.rounds + st.accepted
    assert texts == [tok.decode(s) for s in spec]
    assert len(target.kv) == 0


def test_max_tokens_and_stop_inside_a_multi_token_commit(target):
    tok = target.tokenizer
    p = tok.encode("abababababababab")
    eng = SpecEngine(target, NgramProposer(k=6), verify_len=6)
    (out,), _ = run(eng, [p], SamplingParams(temperature=0, max_tokens=7, ignore_eos=True))
    assert len(out) == 7
    _, (full_text,) = run(SpecEngine(target), [p], SamplingParams(temperature=0, max_tokens=30,
                                                                         ignore_eos=True))
    if len(full_text) > 6:
        stop = full_text[4:6]
        _, (text,) = run(eng, [p], SamplingParams(temperature=0, max_tokens=30, ignore_eos=True, stop=(stop,)))
        assert text == full_text[: full_text.find(stop)]


def test_abort_and_bad_requests(target):
    eng = SpecEngine(target, NgramProposer(), verify_len=4)
    rid = eng.add_request([5, 6, 7], SamplingParams(max_tokens=100))
    eng.step()
    eng.abort(rid)
    assert not eng.has_work() and len(target.kv) == 0
    with pytest.raises(ValueError, match="empty"):
        eng.add_request([], SamplingParams())
    with pytest.raises(ValueError, match="token ids"):
        eng.add_request([10_000], SamplingParams())
    with pytest.raises(ValueError, match="proposer"):
        SpecEngine(target, None, verify_len=3)


def test_safe_text_end_holds_back_partial_stops_and_bytes():
    assert safe_text_end("hello wor", ("world",)) == len("hello ")
    assert safe_text_end("abc\ufffd", ()) == 3
    assert safe_text_end("abc", ("x",)) == 3


def test_prefix_cache_gives_the_same_tokens_and_prefills_each_prompt_once(target):
    """Repeated prompts (three in one step, two more later) with the prefix cache on: every request's tokens equal
    the uncached engine's, greedy and seeded sampling alike; each distinct prompt is forwarded once."""
    tok = target.tokenizer
    a, b = tok.encode("the cat sat on the mat"), tok.encode("xyz xyz")
    prompts = [a, a, b, a]
    for params in (SamplingParams(temperature=0, max_tokens=12, ignore_eos=True),
                   SamplingParams(temperature=1.0, max_tokens=12, ignore_eos=True, seed=7)):
        plain, _ = run(SpecEngine(target, NgramProposer(k=3), verify_len=3), prompts + [a, b], params)
        eng = SpecEngine(target, NgramProposer(k=3), verify_len=3, prefix_cache=4)
        first, _ = run(eng, prompts, params)
        later, _ = run(eng, [a, b], params)
        assert first + later == plain
        assert eng.stats.cached_prompt_tokens == 3 * len(a) + len(b)
        assert eng.stats.prompt_tokens == 4 * len(a) + 2 * len(b)
        assert len(target.kv) == 0


def test_prefix_cache_forgets_the_least_recently_used_prompt(target):
    tok = target.tokenizer
    a, b = tok.encode("first prompt"), tok.encode("second prompt")
    params = SamplingParams(temperature=0, max_tokens=3, ignore_eos=True)
    eng = SpecEngine(target, prefix_cache=1)
    run(eng, [a], params)
    run(eng, [b], params)        # evicts a
    run(eng, [a], params)        # a again: prefilled, not cached
    assert eng.stats.cached_prompt_tokens == 0 and len(eng._prefix) == 1
    run(eng, [a, a], params)     # the second copy of a follows the cached entry
    assert eng.stats.cached_prompt_tokens == 2 * len(a)
    with pytest.raises(ValueError, match="prefix_cache"):
        SpecEngine(target, prefix_cache=-1)


def test_kv_snapshot_restore_round_trip(target):
    from agentmill.lm.engine import RaggedBatch

    kv = target.kv
    s = target.new_sequence()
    target.forward(RaggedBatch().add(s, [3, 4, 5, 6], "last"))
    snap = kv.snapshot(s, 4)
    t = target.new_sequence()
    kv.reserve(t, 8)
    kv.restore(t, snap)
    assert kv.seq_len(t) == 4
    for layer in range(kv.num_layers):
        for x, y in zip(kv.view(s, layer, 4), kv.view(t, layer, 4)):
            assert torch.equal(x, y)
    with pytest.raises(ValueError):
        kv.restore(t, snap)          # not empty any more
    with pytest.raises(ValueError):
        kv.snapshot(s, 5)            # longer than the sequence
    target.free(s)
    target.free(t)
