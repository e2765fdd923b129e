"""The ragged engine against transformers' Llama on a tiny random model: same logits for prefill, decode and
mixed ragged batches; O(1) truncation really rolls back; budgets and limits raise clearly."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from agentmill.lm.engine import (
    EngineConfig,
    KVBudgetError,
    LlamaConfig,
    LlamaEngine,
    RaggedBatch,
    SamplingParams,
    warp,
)


@pytest.fixture(scope="module")
def hf_model():
    cfg = transformers.LlamaConfig(vocab_size=97, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                                   rope_theta=10000.0, tie_word_embeddings=True)
    torch.manual_seed(0)
    m = transformers.LlamaForCausalLM(cfg).eval()
    # random init has tiny weights; scale so that attention patterns matter
    with torch.no_grad():
        for p in m.parameters():
            p.mul_(4.0)
    return m


@pytest.fixture()
def engine(hf_model):
    return LlamaEngine.from_hf_model(hf_model, EngineConfig(threads=1))


def hf_logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float()


def test_config_reads_the_architecture(hf_model):
    c = LlamaConfig.from_hf(hf_model.config)
    assert (c.num_layers, c.num_heads, c.num_kv_heads, c.head_dim) == (2, 4, 2, 16)
    assert c.kv_bytes_per_token == 2 * 2 * 2 * 16 * 4


def test_prefill_all_rows_match_transformers(engine, hf_model):
    ids = [5, 17, 3, 88, 42, 1, 9, 60]
    s = engine.new_sequence()
    out = engine.forward(RaggedBatch().add(s, ids, "all"))
    assert out.logits.shape == (8, 97)
    assert torch.allclose(out.logits, hf_logits(hf_model, ids), atol=1e-4)
    assert engine.seq_len(s) == 8


def test_incremental_decode_matches_full_forward(engine, hf_model):
    ids = [5, 17, 3, 88, 42, 1, 9, 60, 33, 2]
    s = engine.new_sequence()
    engine.forward(RaggedBatch().add(s, ids[:4]))
    engine.forward(RaggedBatch().add(s, ids[4:7]))          # a multi-token chunk on a cache (verify shape)
    out = engine.forward(RaggedBatch().add(s, ids[7:], "all"))
    assert torch.allclose(out.logits, hf_logits(hf_model, ids)[7:], atol=1e-4)


def test_ragged_batch_mixes_prefill_and_decode(engine, hf_model):
    a, b, c = [1, 2, 3, 4, 5, 6], [70, 71], [9, 8, 7]
    sa, sb, sc = engine.new_sequence(), engine.new_sequence(), engine.new_sequence()
    engine.forward(RaggedBatch().add(sa, a[:5]))
    engine.forward(RaggedBatch().add(sc, c[:1]))
    out = engine.forward(RaggedBatch().add(sa, a[5:], "last").add(sb, b, "all").add(sc, c[1:], "all"))
    assert out.rows == [(0, 0), (1, 0), (1, 1), (2, 0), (2, 1)]
    assert torch.allclose(out.logits[0], hf_logits(hf_model, a)[-1], atol=1e-4)
    assert torch.allclose(out.logits[1:3], hf_logits(hf_model, b), atol=1e-4)
    assert torch.allclose(out.logits[3:5], hf_logits(hf_model, c)[1:], atol=1e-4)


def test_truncate_rolls_back_rejected_tokens(engine, hf_model):
    prefix, draft, real = [4, 8, 15, 16], [23, 42, 7], [50, 51]
    s = engine.new_sequence()
    engine.forward(RaggedBatch().add(s, prefix))
    engine.forward(RaggedBatch().add(s, draft, "all"))        # a rejected draft
    engine.truncate(s, len(prefix) + 1)                       # keep its first token only
    out = engine.forward(RaggedBatch().add(s, real, "all"))
    ref = hf_logits(hf_model, prefix + draft[:1] + real)
    assert torch.allclose(out.logits, ref[-2:], atol=1e-4)
    with pytest.raises(ValueError, match="length"):
        engine.truncate(s, 99)


def test_greedy_generate_matches_transformers(engine, hf_model, hf_greedy):
    prompt = [3, 14, 15, 92, 65]
    ours = engine.generate([prompt, prompt[:2]], SamplingParams(temperature=0, max_tokens=12, ignore_eos=True))
    for p, got in zip([prompt, prompt[:2]], ours):
        assert got == hf_greedy(hf_model, p, 12)
    assert len(engine.kv) == 0                                # sequences freed


def test_seeded_sampling_is_reproducible(engine):
    p = SamplingParams(temperature=1.0, seed=7, max_tokens=8, ignore_eos=True)
    assert engine.generate([[1, 2, 3]], p) == engine.generate([[1, 2, 3]], p)


def test_budget_and_length_limits(hf_model):
    eng = LlamaEngine.from_hf_model(hf_model, EngineConfig(kv_budget_bytes=10_000, max_model_len=64))
    s = eng.new_sequence()
    with pytest.raises(KVBudgetError):
        eng.forward(RaggedBatch().add(s, list(range(40))))
    eng2 = LlamaEngine.from_hf_model(hf_model, EngineConfig(max_model_len=16))
    s2 = eng2.new_sequence()
    with pytest.raises(ValueError, match="max_model_len"):
        eng2.forward(RaggedBatch().add(s2, list(range(17))))
    with pytest.raises(ValueError, match="out of range"):
        eng2.forward(RaggedBatch().add(s2, [500]))
    with pytest.raises(KeyError, match="unknown"):
        eng2.seq_len(12345)


def test_free_returns_budget(engine):
    s = engine.new_sequence()
    engine.forward(RaggedBatch().add(s, [1, 2, 3]))
    assert engine.kv.used_bytes > 0
    engine.free(s)
    assert engine.kv.used_bytes == 0


def test_warp_top_k_top_p():
    logits = torch.tensor([[3.0, 2.0, 1.0, 0.0]])
    assert warp(logits, 0).tolist() == [[1.0, 0.0, 0.0, 0.0]]
    p = warp(logits, 1.0, top_k=2)
    assert p[0, 2:].sum() == 0 and torch.isclose(p.sum(), torch.tensor(1.0))
    full = logits.softmax(-1)[0]
    q = warp(logits, 1.0, top_p=float(full[0]) + 1e-3)       # needs the top two tokens
    assert (q[0] > 0).tolist() == [True, True, False, False]
    assert torch.allclose(warp(logits, 0.5), (logits / 0.5).softmax(-1))


def test_rejects_unsupported_architectures():
    cfg = transformers.LlamaConfig(vocab_size=10, hidden_size=8, intermediate_size=16, num_hidden_layers=1,
                                   num_attention_heads=2, rope_scaling={"rope_type": "linear", "factor": 2.0})
    with pytest.raises(ValueError, match="rope scaling"):
        LlamaConfig.from_hf(cfg)
    with pytest.raises(ValueError, match="temperature"):
        SamplingParams(temperature=3)
