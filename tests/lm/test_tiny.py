from __future__ import annotations

import numpy as np
import pytest

from agentmill.lm import GenerateConfig, LMError, load_lm
from agentmill.lm.tiny import TinyConfig, TinyLM, train_tiny


def test_untrained_model_api_shapes() -> None:
    lm = load_lm("tiny:new?layers=2&d=32&heads=2")
    fo = lm.forward([lm.render("abc")], hidden_states=True)
    assert tuple(fo.logits.shape) == (1, 4, 259) and len(fo.hidden_states) == 3
    with pytest.raises(ValueError, match="options are"):
        load_lm("tiny:new?depth=3")


def test_cache_fork_crop_match_full_forward() -> None:
    import torch

    lm = TinyLM(TinyConfig(d=32, heads=2))
    ids = lm.render("hello world")
    parent = lm.forward([ids[:5]]).cache
    before = [k.clone() for k in parent.keys]
    child = lm.fork_cache(parent, 2)
    step = lm.forward([ids[5:], ids[5:]], child).logits
    full = lm.forward([ids]).logits[0, 5:]
    assert all(torch.equal(a, b) for a, b in zip(before, parent.keys))
    assert float((step[1] - full).abs().max()) < 1e-5
    lm.crop_cache(child, 5)
    assert lm.cache_length(child) == 5


def test_padded_batch_equals_single() -> None:
    lm = TinyLM(TinyConfig(d=32, heads=2, seed=1))
    cfg = GenerateConfig(max_new_tokens=8, temperature=1.0, seed=3)
    batch = lm.generate(["a", "a much longer prompt"], cfg)
    alone = lm.generate(["a", "a much longer prompt"][:1], cfg)
    assert batch[0].token_ids == alone[0].token_ids
    assert np.allclose(batch[0].logprobs, alone[0].logprobs, atol=1e-4)


def test_training_learns_a_pattern_and_roundtrips(tmp_path) -> None:
    cfg = TinyConfig(d=32, heads=2)
    init = {k: v.clone() for k, v in TinyLM(cfg).model.state_dict().items()}
    lm, losses = train_tiny(["abcabcabcabcabcabcabcabc"] * 20, steps=150, seq=16, cfg=cfg)
    moved = {k: float((v - init[k]).abs().max()) for k, v in lm.model.state_dict().items()}
    assert min(moved.values()) > 0, [k for k, m in moved.items() if m == 0]  # every tensor trained
    assert np.mean(losses[-10:]) < 0.5 * np.mean(losses[:10])
    out = lm.generate(["abcabc"], GenerateConfig(max_new_tokens=6, temperature=0))[0]
    assert out.text == "abcabc"
    path = lm.save(tmp_path / "m")
    again = load_lm(f"tiny:{path}")
    assert again.generate(["abcabc"], GenerateConfig(max_new_tokens=6, temperature=0))[0].text == out.text
    assert np.allclose(TinyLM.load(path).logprobs("abc", "abc"), lm.logprobs("abc", "abc"))
    (path / "model.safetensors").write_bytes(b"junk")
    with pytest.raises(LMError, match="corrupt"):
        load_lm(f"tiny:{path}")
    with pytest.raises(LMError, match="no saved tiny model"):
        load_lm(f"tiny:{tmp_path}/nothing")


def test_gumbel_sampler_matches_the_softmax_distribution() -> None:
    """Chi-square goodness of fit of 20 000 draws against softmax(logits / T), T = 0.7."""
    from scipy.stats import chisquare

    from agentmill.lm.decoding import sample_token

    logits = np.array([2.0, 1.0, 0.5, -1.0, 0.0])
    p = np.exp(logits / 0.7) / np.exp(logits / 0.7).sum()
    rng = np.random.default_rng(0)
    draws = [sample_token(logits, 0.7, 1.0, rng)[0] for _ in range(20_000)]
    counts = np.bincount(draws, minlength=5)
    assert chisquare(counts, 20_000 * p).pvalue > 1e-3
    tok, lp = sample_token(logits, 0.7, 1.0, np.random.default_rng(1))
    assert abs(lp - np.log(p[tok])) < 1e-9
    # top-p 0.5 keeps only the most likely token here (p[0] > 0.5)
    assert {sample_token(logits, 0.7, 0.5, rng)[0] for _ in range(200)} == {0}


def test_hooks_steer_and_detach() -> None:
    import torch

    lm = load_lm("tiny:new")
    assert lm.spec == "tiny:new" and lm.num_layers == 2 and lm.hidden_size == 64
    ids = [lm.render("hey")]
    base = lm.forward(ids).logits
    handle = lm.add_hook(1, lambda layer, h: torch.zeros_like(h))
    fo = lm.forward(ids, hidden_states=True)
    assert float(fo.hidden_states[2].abs().max()) == 0.0
    assert torch.allclose(fo.logits[0, 0], fo.logits[0, -1])  # nothing position-specific survives
    handle.remove()
    assert torch.equal(lm.forward(ids).logits, base)
    with pytest.raises(ValueError, match="divisible"):
        TinyLM(TinyConfig(d=30, heads=4))


def test_bpe_tokenizer_round_trips_saves_and_keeps_byte_defaults(tmp_path) -> None:
    pytest.importorskip("tokenizers")
    from agentmill.lm import scoring
    from agentmill.lm.tiny import TinyConfig, TinyLM, train_bpe

    texts = ["<|im_start|>user\nYou see a red key.<|im_end|>\n"] * 4 + ["é {\"name\": 1}"]
    tok = train_bpe(texts, vocab_size=300)
    assert train_bpe(texts, vocab_size=300).to_str() == tok.to_str()  # deterministic given the corpus
    lm = TinyLM(TinyConfig(vocab_size=tok.get_vocab_size(), tokenizer="bpe"), bpe=tok)
    for s in texts + ["", "  two  spaces\n"]:
        assert lm.decode(lm.encode(s)) == s
    assert lm.render("hi")[0] == lm.bos_id == 0 and lm.eos_token_ids == (1,)
    lm.save(tmp_path / "m")
    again = TinyLM.load(tmp_path / "m")
    assert again.encode("red key") == lm.encode("red key") and again.cfg == lm.cfg
    with pytest.raises(ValueError):
        TinyLM(TinyConfig(vocab_size=300, tokenizer="bpe"))  # no tokenizer given
    byte = TinyLM()
    assert byte.cfg.vocab_size == 259 and not hasattr(byte, "bos_id")
    assert scoring.tokenizer_fingerprint(byte) == "b197744ca108c74e"  # unchanged by the BPE option
