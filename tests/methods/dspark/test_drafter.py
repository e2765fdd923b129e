"""The DSpark drafter on the tiny random Llama: shapes, the training mask, persistence, and that training works
(one step moves every trainable tensor; a short run raises the probabilistic acceptance length)."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from agentmill.lm.engine import EngineConfig  # noqa: E402
from agentmill.lm.engine.tiny import tiny_llama  # noqa: E402
from agentmill.methods.dspark.data import builtin_prompts, build_corpus  # noqa: E402
from agentmill.methods.dspark.drafter import (  # noqa: E402
    DraftVocab, DSparkConfig, DSparkDrafter, train_attention_mask)
from agentmill.methods.dspark.features import build_feature_cache, token_counts  # noqa: E402
from agentmill.methods.dspark.train import TrainConfig, make_batch, train_drafter  # noqa: E402

LAYERS = (0, 1)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("dspark")
    eng = tiny_llama(0, EngineConfig(dtype="float32", tap_layers=LAYERS, return_final_hidden=True))
    corpus = build_corpus(eng, builtin_prompts("train", 24), root / "corpus.jsonl", max_new=24, batch=8,
                          temperature=0.7)
    cache = build_feature_cache(eng, corpus, root / "cache", layers=LAYERS)
    return eng, corpus, cache, root


def _drafter(eng, corpus, rank=8, vocab=None):
    counts = token_counts(corpus, eng.vocab_size)
    assert counts[0] == 0, "the mask token must never appear in the corpus"
    cfg = DSparkConfig(block_size=4, num_draft_layers=1, target_layer_ids=LAYERS, markov_rank=rank,
                       draft_vocab_size=vocab, mask_token_id=0)
    dv = DraftVocab.from_counts(counts, vocab) if vocab else None
    return DSparkDrafter.init_for(eng, cfg, dv, seed=0)


def test_training_mask_sees_only_earlier_context_and_own_block():
    m = train_attention_mask(torch.tensor([[2, 5]]), L=8, g=3)[0, 0]
    assert m.shape == (6, 8 + 6)
    # block of anchor 2: context positions 0, 1 only; its own 3 slots, not the other block
    assert m[0, :8].tolist() == [True, True] + [False] * 6
    assert m[0, 8:].tolist() == [True] * 3 + [False] * 3
    assert m[4, :8].tolist() == [True] * 5 + [False] * 3
    assert m[4, 8:].tolist() == [False] * 3 + [True] * 3


def test_cache_reused_when_key_matches_and_rebuilt_otherwise(setup):
    eng, corpus, cache, root = setup
    again = build_feature_cache(eng, corpus, root / "cache", layers=LAYERS)
    assert again.meta["key"] == cache.meta["key"]
    assert cache.taps.shape == (cache.meta["n_tokens"], 2 * 64)
    # recomputing p from the cached final hidden state gives a distribution (sums to 1 within fp16 error)
    s = cache.sequence(0)
    h = torch.from_numpy(np.asarray(cache.final_hidden[s], dtype=np.float32))
    p = (h @ eng.model.lm_head.T - torch.from_numpy(np.array(cache.lse[s]))[:, None]).exp()
    assert torch.allclose(p.sum(-1), torch.ones(p.shape[0]), atol=2e-2)


def test_one_step_moves_every_trainable_tensor(setup, tmp_path):
    eng, corpus, cache, _ = setup
    d = _drafter(eng, corpus)
    before = {k: v.detach().clone() for k, v in d.named_parameters()}
    train_drafter(d, cache, TrainConfig(steps=2, batch_sequences=4, num_anchors=4, lr=1e-3), tmp_path)
    # markov_w1 only moves once markov_w2 is non-zero (w2 starts at zero on purpose): hence two steps
    for k, v in d.named_parameters():
        assert not torch.equal(v, before[k]), f"{k} did not change"


def test_short_training_raises_probabilistic_tau(setup, tmp_path):
    eng, corpus, cache, _ = setup
    d = _drafter(eng, corpus, vocab=128)
    assert 0.9 < d.vocab.coverage <= 1.0
    rng = np.random.default_rng(1)
    fixed = make_batch(cache, np.arange(8), d, 8, rng)

    def tau():
        from agentmill.methods.dspark.drafter import forward_train
        with torch.no_grad():
            return forward_train(d, fixed).parts["tau_prob"]

    t0 = tau()
    train_drafter(d, cache, TrainConfig(steps=60, batch_sequences=8, num_anchors=8, lr=3e-3), tmp_path)
    assert tau() > t0 + 0.1


def test_save_load_round_trip(setup, tmp_path):
    eng, corpus, _, _ = setup
    d = _drafter(eng, corpus, vocab=128)
    with torch.no_grad():
        d.markov_w2.weight.normal_()
    d.save(tmp_path / "ck", calibration={"greedy": [1.0] * 4})
    e = DSparkDrafter.load(tmp_path / "ck", eng)
    assert torch.equal(e.d2t, d.d2t)
    for (k, v), (k2, v2) in zip(d.state_dict().items(), e.state_dict().items()):
        assert k == k2 and torch.equal(v, v2)
    assert DSparkDrafter.calibration_of(tmp_path / "ck")["greedy"].tolist() == [1.0] * 4
    other = tiny_llama(1, EngineConfig())
    from agentmill.methods.dspark.drafter import TargetShape
    import json
    meta = json.loads((tmp_path / "ck" / "config.json").read_text())
    meta["target"]["hidden_size"] = 32
    (tmp_path / "ck" / "config.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match="hidden_size"):
        DSparkDrafter.load(tmp_path / "ck", other)
    assert TargetShape.of(other).hidden_size == 64


def _run(engine, prompts, params):
    ids = [engine.add_request(p, params) for p in prompts]
    out = {i: [] for i in ids}
    while engine.has_work():
        for o in engine.step():
            assert o.error is None, o.error
            out[o.rid] += o.token_ids
    return [out[i] for i in ids]


def test_dspark_proposer_in_engine_is_greedy_lossless(setup):
    """A (briefly trained) drafter in the engine, with the tap rows appended round by round, gives token-identical
    greedy output to plain decoding — several requests batched, KV rolled back after rejections."""
    from agentmill.lm.engine import SamplingParams
    from agentmill.methods.dspark.spec_engine import SpecEngine
    from agentmill.methods.dspark.proposers import DSparkProposer

    eng, corpus, _, _ = setup
    d = _drafter(eng, corpus, vocab=128)
    tok = eng.tokenizer
    prompts = [tok.apply_chat_template([{"role": "user", "content": t}], tokenize=True)
               for t in ("hello there", "write a function", "12 + 30 = ?", "repeat: abc abc abc")]
    params = SamplingParams(temperature=0, max_tokens=40, ignore_eos=True)
    plain = _run(SpecEngine(eng), prompts, params)
    spec = SpecEngine(eng, DSparkProposer(d), verify_len=4, record_rounds=True)
    assert _run(spec, prompts, params) == plain
    assert spec.stats.rounds > 0 and spec.stats.drafted > 0 and len(spec.rounds) == spec.stats.rounds
    assert all(len(r.conf_logits) <= 4 for r in spec.rounds)
    # the prefix cache starts the drafter of a repeated prompt from the cached taps: still token-identical
    cached = SpecEngine(eng, DSparkProposer(d), verify_len=4, prefix_cache=8)
    assert _run(cached, prompts + prompts[:2], params) == plain + plain[:2]
    assert cached.stats.cached_prompt_tokens == len(prompts[0]) + len(prompts[1])


def test_dspark_proposer_requires_tapped_target(setup):
    from agentmill.methods.dspark.spec_engine import SpecEngine
    from agentmill.methods.dspark.proposers import DSparkProposer

    eng, corpus, _, _ = setup
    with pytest.raises(ValueError, match="tap layers"):
        SpecEngine(tiny_llama(0, EngineConfig()), DSparkProposer(_drafter(eng, corpus)), verify_len=2)


def test_export_round_trip_keeps_names_shapes_and_outputs(setup, tmp_path):
    from safetensors.torch import load_file

    from agentmill.methods.dspark.export import export_deepspec, load_deepspec
    from agentmill.methods.dspark.train import make_batch
    from agentmill.methods.dspark.drafter import forward_train

    eng, corpus, cache, _ = setup
    d = _drafter(eng, corpus, vocab=128)
    with torch.no_grad():
        d.markov_w2.weight.normal_(std=0.1)
    d.save(tmp_path / "ck", calibration={"t1.0": [1.5] * 4})
    out = export_deepspec(tmp_path / "ck", tmp_path / "export", eng)
    keys = set(load_file(str(out / "model.safetensors")))
    for k in ("fc.weight", "hidden_norm.weight", "norm.weight", "embed_tokens.weight", "lm_head.weight",
              "layers.0.self_attn.q_proj.weight", "layers.0.self_attn.k_norm.weight", "layers.0.mlp.gate_proj.weight",
              "layers.0.post_attention_layernorm.weight", "markov_head.markov_w1.weight",
              "markov_head.markov_w2.weight", "confidence_head.proj.weight", "confidence_head.proj.bias"):
        assert k in keys, k
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["block_size"] == 4 and cfg["markov_rank"] == 8 and cfg["tie_word_embeddings"] is False
    assert json.loads((out / "dspark_calibration.json").read_text()) == {"t1.0": [1.5] * 4}
    back = load_deepspec(out, eng)
    batch = make_batch(cache, np.arange(4), d, 4, np.random.default_rng(0))
    with torch.no_grad():
        assert torch.equal(forward_train(d, batch).loss, forward_train(back, batch).loss)


@pytest.mark.parametrize("policy", ["dspark", "dspark-async", "threshold:0.3", "fixed:1"])
def test_every_policy_is_greedy_lossless_in_the_engine(setup, policy):
    from agentmill.lm.engine import SamplingParams
    from agentmill.methods.dspark.costmodel import SPSTable
    from agentmill.methods.dspark.spec_engine import SpecEngine
    from agentmill.methods.dspark.proposers import DSparkProposer

    eng, corpus, _, _ = setup
    d = _drafter(eng, corpus, vocab=128)
    B = list(range(1, 65))
    sps = SPSTable(B, [1], [512], {"r=1,ctx=512": [1 + 0.05 * (b - 1) for b in B]})
    tok = eng.tokenizer
    prompts = [tok.apply_chat_template([{"role": "user", "content": t}], tokenize=True)
               for t in ("abc abc abc", "count: 1 2 3 4", "hello")]
    params = SamplingParams(temperature=0, max_tokens=30, ignore_eos=True)
    plain = _run(SpecEngine(eng), prompts, params)
    spec = SpecEngine(eng, DSparkProposer(d), policy=policy, sps=sps)
    assert _run(spec, prompts, params) == plain
    assert spec.policy.startswith(policy.split(":")[0])


class _Killed(Exception):
    pass


def test_a_killed_training_resumes_exactly_from_its_safetensors_checkpoint(setup, tmp_path):
    """The checkpoint (``lm.finetune.save_checkpoint``: safetensors + JSON header, never a pickle) holds the
    optimiser and the data RNG: killed after step 2 and resumed, the drafter ends bit-identical to a whole run."""
    eng, corpus, cache, _ = setup
    tcfg = TrainConfig(steps=4, batch_sequences=4, num_anchors=4, lr=1e-3, checkpoint_every=1)
    whole = _drafter(eng, corpus)
    train_drafter(whole, cache, tcfg, tmp_path / "whole")
    calls = []

    def die_in_step_3(_):
        calls.append(1)
        if len(calls) == 3:
            raise _Killed

    with pytest.raises(_Killed):
        train_drafter(_drafter(eng, corpus), cache, tcfg, tmp_path / "run", progress=die_in_step_3)
    assert (tmp_path / "run" / "ckpt.safetensors").exists() and not list((tmp_path / "run").glob("*.pt"))
    resumed = _drafter(eng, corpus)
    train_drafter(resumed, cache, tcfg, tmp_path / "run")
    a, b = whole.state_dict(), resumed.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_dspark_proposer_accepts_any_64_bit_request_seed(setup):
    """The drafter's generator seed is derived from the request's (``seed * 7919 + 104729``); a seed above ~1e15
    overflowed torch's 64-bit seed and failed the request. The derived seed is folded into 63 bits."""
    from agentmill.lm.engine import SamplingParams
    from agentmill.methods.dspark.spec_engine import SpecEngine
    from agentmill.methods.dspark.proposers import DSparkProposer

    eng, corpus, _, _ = setup
    tok = eng.tokenizer
    prompt = tok.apply_chat_template([{"role": "user", "content": "hello there"}], tokenize=True)
    spec = SpecEngine(eng, DSparkProposer(_drafter(eng, corpus, vocab=128)), verify_len=2)
    for seed in (2**63 - 1, 10**16, 0):
        out = _run(spec, [prompt], SamplingParams(temperature=1.0, max_tokens=6, ignore_eos=True, seed=seed))
        assert len(out[0]) == 6
