"""The engine on the Qwen2 architecture (Qwen2.5-Coder's): a tiny random Qwen2 with non-zero q/k/v biases and a
large RoPE base gives transformers' logits for prefill, incremental decode and a ragged batch, and greedy decoding
token for token; what the engine does not implement (sliding-window layers) is refused."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from agentmill.lm.engine import EngineConfig, LlamaConfig, LlamaEngine, RaggedBatch, SamplingParams


def _qwen2(**kw):
    args = dict(vocab_size=97, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=256, rope_theta=1_000_000.0, tie_word_embeddings=True,
                rms_norm_eps=1e-6)
    args.update(kw)
    return transformers.Qwen2Config(**args)


@pytest.fixture(scope="module")
def hf_model():
    torch.manual_seed(1)
    m = transformers.Qwen2ForCausalLM(_qwen2()).eval()
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.endswith("bias"):
                p.normal_(0.0, 1.0)  # transformers initialises biases to zero: make them matter
            else:
                p.mul_(4.0)
    return m


@pytest.fixture()
def engine(hf_model):
    return LlamaEngine.from_hf_model(hf_model, EngineConfig(threads=1))


def _hf_logits(model, ids):
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0].float()


def test_config_reads_qwen2_with_its_biases(hf_model):
    c = LlamaConfig.from_hf(hf_model.config)
    assert c.model_type == "qwen2" and c.qkv_bias and c.rope_theta == 1_000_000.0 and c.tie_word_embeddings
    plain = LlamaConfig.from_hf(transformers.LlamaConfig(vocab_size=10, hidden_size=8, intermediate_size=16,
                                                         num_hidden_layers=1, num_attention_heads=2))
    assert plain.model_type == "llama" and not plain.qkv_bias


def test_biases_are_used(engine, hf_model):
    """Without its biases the engine would disagree with transformers (so the equality tests below can fail)."""
    ids = [5, 17, 3, 88, 42, 1, 9, 60]
    s = engine.new_sequence()
    with_bias = engine.forward(RaggedBatch().add(s, ids, "all")).logits
    assert torch.allclose(with_bias, _hf_logits(hf_model, ids), atol=1e-4)
    for layer in engine.model.layers:
        layer["qkv_bias"] = torch.zeros_like(layer["qkv_bias"])
    s2 = engine.new_sequence()
    assert not torch.allclose(engine.forward(RaggedBatch().add(s2, ids, "all")).logits, with_bias, atol=1e-2)


def test_incremental_and_ragged_decode_match_transformers(engine, hf_model):
    a, b = [3, 14, 15, 92, 65], [35, 89, 79]
    sa, sb = engine.new_sequence(), engine.new_sequence()
    engine.forward(RaggedBatch().add(sa, a[:3], "none"))
    out = engine.forward(RaggedBatch().add(sa, a[3:], "all").add(sb, b, "all"))
    ref_a, ref_b = _hf_logits(hf_model, a), _hf_logits(hf_model, b)
    assert torch.allclose(out.logits[:2], ref_a[3:], atol=1e-4)
    assert torch.allclose(out.logits[2:], ref_b, atol=1e-4)


def test_greedy_matches_transformers_token_for_token(engine, hf_model, hf_greedy):
    prompt = [7, 21, 33, 4, 58]
    got = engine.generate([prompt], SamplingParams(temperature=0, max_tokens=24, ignore_eos=True))[0]
    assert list(got)[:24] == hf_greedy(hf_model, prompt, 24)


def test_sliding_window_qwen2_is_refused():
    with pytest.raises(ValueError, match="sliding-window"):
        LlamaConfig.from_hf(_qwen2(use_sliding_window=True, sliding_window=16, max_window_layers=0))


def test_int8_weights_keep_the_biases_and_stay_close_to_float32(hf_model):
    """``weights="int8"`` on Qwen2: the q/k/v bias rides along the int8 QKV product (zeroing it moves the logits
    far more than quantisation does), and the int8 logits stay close to float32's."""
    ids = [5, 17, 3, 88, 42, 1, 9, 60, 11, 23, 70, 2]
    dense = LlamaEngine.from_hf_model(hf_model, EngineConfig(threads=1))
    int8 = LlamaEngine.from_hf_model(hf_model, EngineConfig(threads=1, weights="int8"))
    ref = dense.forward(RaggedBatch().add(dense.new_sequence(), ids, "all")).logits
    got = int8.forward(RaggedBatch().add(int8.new_sequence(), ids, "all")).logits
    kl = torch.nn.functional.kl_div(got.log_softmax(-1), ref.log_softmax(-1), log_target=True, reduction="batchmean")
    assert float(kl) < 0.05 and (got.argmax(-1) == ref.argmax(-1)).float().mean() >= 0.9
    for layer in int8.model.layers:
        layer["qkv_bias"] = torch.zeros_like(layer["qkv_bias"])
    nobias = int8.forward(RaggedBatch().add(int8.new_sequence(), ids, "all")).logits
    kl_nobias = torch.nn.functional.kl_div(nobias.log_softmax(-1), ref.log_softmax(-1), log_target=True,
                                           reduction="batchmean")
    assert float(kl_nobias) > 10 * float(kl)
