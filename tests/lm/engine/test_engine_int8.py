"""int8 weights in the engine: close to the float32 engine, and a row's logits do not depend on its batch (the
property speculative decoding's losslessness rests on)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from agentmill.lm.engine import EngineConfig, RaggedBatch, SamplingParams  # noqa: E402
from agentmill.lm.engine.quant import Int8Linear  # noqa: E402
from agentmill.lm.engine.tiny import tiny_llama  # noqa: E402


@pytest.fixture(scope="module")
def engines():
    return tiny_llama(3), tiny_llama(3, EngineConfig(weights="int8"))


def test_int8_linear_rows_are_batch_invariant_bitwise_and_close_to_float() -> None:
    g = torch.Generator().manual_seed(0)
    w = torch.randn(96, 64, generator=g) * 0.1
    x = torch.randn(12, 64, generator=g)
    x[:, 5] *= 30  # an outlier channel, as residual streams have
    lin = Int8Linear(w)
    full = lin(x)
    assert torch.equal(full, torch.cat([lin(x[k: k + 1]) for k in range(12)]))
    assert torch.equal(full[3:7], lin(x[3:7]))
    plain = torch.randn(12, 64, generator=g)  # 8-bit rows lose the small entries of an outlier row; not these
    ref = plain @ w.T
    assert float((lin(plain) - ref).norm() / ref.norm()) < 0.025  # 7-bit rows without VNNI: ~1.4 %
    assert 0 < lin.rel_error < 0.02  # 7 bits per weight without VNNI, 8 with
    # Smoothing moves the outlier channel's range into the weights: the product is the same, the error smaller.
    from agentmill.lm.engine.quant import smoothing_scales

    sm = Int8Linear(w, smooth=smoothing_scales(x.abs().amax(0), w, 0.5))
    ref_x = x @ w.T
    err = {k: float((f(x) - ref_x).norm() / ref_x.norm()) for k, f in (("plain", lin), ("smooth", sm))}
    # ... and the outlier channel in a product of its own removes its hold on the other channels' scale.
    ol = Int8Linear(w, outliers=torch.tensor([5]))
    err["outlier"] = float((ol(x) - ref_x).norm() / ref_x.norm())
    assert err["smooth"] < 0.5 * err["plain"] and err["outlier"] < 0.25 * err["plain"], err
    for f in (sm, ol):
        assert torch.equal(f(x), torch.cat([f(x[k: k + 1]) for k in range(12)]))
    assert ol.rel_error < 0.02
    b = torch.randn(96, generator=g)
    assert torch.equal(lin(x, b), full + b)


def test_int8_engine_tracks_the_float_engine(engines) -> None:
    fp, q8 = engines
    ids = [5, 17, 3, 88, 42, 1, 9, 60, 33, 120, 7]
    lf = fp.forward(RaggedBatch().add(fp.new_sequence(), ids, "all")).logits
    lq = q8.forward(RaggedBatch().add(q8.new_sequence(), ids, "all")).logits
    kl = (lf.log_softmax(-1).exp() * (lf.log_softmax(-1) - lq.log_softmax(-1))).sum(-1)
    assert float(kl.mean()) < 0.03 and float(kl.max()) < 0.1  # a random, peaked model: 7-bit rows on AVX2
    assert (lf.argmax(-1) == lq.argmax(-1)).float().mean() >= 0.7  # broken weights would agree ~1/259
    assert q8.fingerprint.endswith("float32:int8-s0.5-o0") and not fp.fingerprint.endswith("int8")


def test_verifying_a_block_equals_decoding_it_token_by_token_bitwise(engines) -> None:
    # Dense products are batch-invariant (above) and a verify block attends row by row (``row_exact``): any float
    # difference would be re-quantised at the next layer and could grow (it did on SmolLM2 before row_exact).
    _, q8 = engines
    prompt, block = [9, 8, 7, 6, 5, 4], [30, 31, 32, 33, 34]
    s1 = q8.new_sequence()
    q8.forward(RaggedBatch().add(s1, prompt, "last"))
    together = q8.forward(RaggedBatch().add(s1, block, "all")).logits
    s2 = q8.new_sequence()
    q8.forward(RaggedBatch().add(s2, prompt, "last"))
    alone = torch.cat([q8.forward(RaggedBatch().add(s2, [t], "last")).logits for t in block])
    assert torch.equal(together, alone)
    # ... and beside another request in one ragged forward
    s3, s4 = q8.new_sequence(), q8.new_sequence()
    q8.forward(RaggedBatch().add(s3, prompt, "last"))
    mixed = q8.forward(RaggedBatch().add(s4, [1, 2, 3, 4, 5, 6, 7], "all").add(s3, block, "all"))
    assert torch.equal(mixed.logits[7:], alone)
    out = q8.generate([prompt], SamplingParams(temperature=0, max_tokens=8))
    assert len(out[0]) >= 1


def test_int8_needs_float32_and_a_known_format() -> None:
    with pytest.raises(ValueError, match="float32"):
        EngineConfig(weights="int8", dtype="bfloat16")
    with pytest.raises(ValueError, match="dense or int8"):
        EngineConfig(weights="q3")


def test_the_outlier_option_quantises_every_product_and_keeps_no_float_copies() -> None:
    from agentmill.lm.engine.quant import Int8Linear as Q

    eng = tiny_llama(3, EngineConfig(weights="int8", int8_outliers=8))
    fp = tiny_llama(3)
    ids = [5, 17, 3, 88, 42, 1, 9]
    lf = fp.forward(RaggedBatch().add(fp.new_sequence(), ids, "all")).logits
    lq = eng.forward(RaggedBatch().add(eng.new_sequence(), ids, "all")).logits
    kl = (lf.log_softmax(-1).exp() * (lf.log_softmax(-1) - lq.log_softmax(-1))).sum(-1)
    assert float(kl.mean()) < 0.03 and eng.quantization["outliers"] == 8
    prods = [L[n] for L in eng.model.layers for n in ("qkv", "o", "gate_up", "down")] + [eng.model.lm_head]
    assert all(isinstance(p, Q) and len(p.outliers) == 8 for p in prods)
    assert not any(hasattr(part, "dequantized") for p in prods for part in (p.main, p.side))
