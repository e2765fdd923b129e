from __future__ import annotations

import numpy as np
import pytest

from agentmill.core.types import Message
from agentmill.lm import GenerateConfig, LMError, load_lm, parse_spec
from agentmill.lm.scripted import ScriptedLM, ScriptedWhiteBoxLM, arith_responder, choice_responder


def test_presets_by_spec() -> None:
    assert load_lm("scripted:echo").generate([[Message("user", "hello there")]])[0].text == "hello there"
    assert load_lm("scripted:constant").generate(["x"])[0].text == "ok"
    with pytest.raises(ValueError, match="presets: arith, constant, echo, fail, whitebox"):
        load_lm("scripted:nope")
    with pytest.raises(LMError, match="always fails"):
        load_lm("scripted:fail").generate(["x"])


def test_stop_strings_regex_and_length() -> None:
    lm = ScriptedLM(["one two three four five"])
    out = lm.generate(["p"], GenerateConfig(max_new_tokens=3))[0]
    assert out.text == "one two three" and out.finish_reason == "length"
    out = lm.generate(["p"], GenerateConfig(stop=(" three",)))[0]
    assert out.text == "one two" and out.finish_reason == "stop"
    out = lm.generate(["p"], GenerateConfig(stop_regex=r"t\w+"))[0]
    assert out.text == "one two" and out.finish_reason == "stop"


def test_arith_is_right_when_greedy_and_half_right_when_sampling() -> None:
    assert arith_responder("What is 12 + 7 * 2?", None) == "12 + 7 * 2 = 26. Answer: 26"
    assert arith_responder("Question: 5 - 8 =\nAnswer: -3\nQuestion: 12 + 7 =", None).endswith("Answer: 19")
    assert arith_responder("no numbers here", None) == "I don't know"
    lm = load_lm("scripted:arith")
    outs = lm.generate(["Question: What is 40 + 2?\nSolution:"], GenerateConfig(n=400, temperature=1.0, seed=1))
    right = sum(o.text.endswith("Answer: 42") for o in outs)
    assert 160 < right < 240  # Binomial(400, 0.5): ±4 SD
    again = lm.generate(["Question: What is 40 + 2?\nSolution:"], GenerateConfig(n=400, temperature=1.0, seed=1))
    assert [o.text for o in outs] == [o.text for o in again]


def test_parse_spec_errors() -> None:
    assert parse_spec("openai:m@http://x") == ("openai", "m@http://x")
    with pytest.raises(ValueError, match="names no model"):
        parse_spec("hf:")
    with pytest.raises(ValueError, match="Did you mean 'tiny:x'"):
        parse_spec("tinny:x")


def test_response_forms_n_and_logprobs() -> None:
    by_key = ScriptedLM({"weather": "sunny", "time": "noon"}, default="?")
    assert [c.text for c in by_key.generate(["the time please", "hello"])] == ["noon", "?"]
    one_arg = ScriptedLM(lambda text: text.upper())
    assert one_arg.generate(["abc"], GenerateConfig(n=2))[1].text == "ABC"
    in_turn = ScriptedLM(["first", "second"])
    assert [c.text for c in in_turn.generate(["a", "b", "c"])] == ["first", "second", "first"]
    assert in_turn.calls == ["a", "b", "c"]
    assert list(in_turn.logprobs("p", "two tokens")) == [-1.0, -1.0]
    out = ScriptedLM(["a b c"]).generate(["p"])[0]
    assert out.logprobs == (-1.0, -1.0, -1.0) and out.finish_reason == "eos"


def test_chat_rendering_is_plain_transcript() -> None:
    lm = ScriptedLM(lambda text: text)
    out = lm.generate([[Message("system", "be brief"), Message("user", "hi")]])[0]
    assert out.text == "system: be brief\nuser: hi\nassistant:"


def test_choice_responder_samples_reproducibly() -> None:
    lm = ScriptedLM(choice_responder(["a", "b", "c"], probs=[0.5, 0.25, 0.25]))
    assert {c.text for c in lm.generate(["p"], GenerateConfig(n=5, temperature=0))} == {"a"}
    cfg = GenerateConfig(n=400, temperature=1.0, seed=7)
    draws = [c.text for c in lm.generate(["p"], cfg)]
    assert draws == [c.text for c in lm.generate(["p"], cfg)]
    assert 160 < draws.count("a") < 240  # Binomial(400, 0.5): ±4 SD
    # sample j of prompt i draws from its own stream: the same whatever n and the other prompts
    two = lm.generate(["p", "q"], GenerateConfig(n=3, temperature=1.0, seed=7))
    assert [c.text for c in two[:3]] == draws[:3]


# ----------------------------------------------------------------------------------------- white box
def test_whitebox_shapes_and_hand_checkable_first_step() -> None:
    import torch

    from agentmill.lm import WhiteBoxLM

    lm = load_lm("scripted:whitebox")
    assert isinstance(lm, WhiteBoxLM) and lm.vocab_size == 49
    assert lm.decode(lm.encode("What is 2+2?")) == "what is 2+2?"
    assert lm.encode("É") == [3]  # UNK
    fo = lm.forward([lm.render("ab")], hidden_states=True)
    assert tuple(fo.logits.shape) == (1, 3, 49) and len(fo.hidden_states) == 3
    assert all(tuple(h.shape) == (1, 3, 8) for h in fo.hidden_states)
    # first position: the context mean is the token's own embedding, so h1 = 2 E[x]
    x = lm.render("ab")[0]
    h2 = 2 * lm.E[x] + torch.tanh(2 * lm.E[x] @ lm.W)
    assert torch.allclose(fo.logits[0, 0], lm.B[x] + h2 @ lm.U, atol=1e-6)


def test_whitebox_cache_fork_crop_and_padding() -> None:
    import torch

    lm = ScriptedWhiteBoxLM(seed=1)
    ids = lm.render("hello world")
    full = lm.forward([ids]).logits[0]
    parent = lm.forward([ids[:5]]).cache
    before = parent.emb.clone()
    child = lm.fork_cache(parent, 2)
    step = lm.forward([ids[5:]] * 2, child).logits
    assert torch.equal(parent.emb, before) and lm.cache_length(child) == len(ids)
    assert torch.allclose(step[1], full[5:], atol=1e-6)
    # roll back three tokens and feed them again: same logits as the full forward
    lm.crop_cache(child, len(ids) - 3)
    again = lm.forward([ids[-3:]] * 2, child).logits
    assert torch.allclose(again[0], full[-3:], atol=1e-6)
    # an unforked cache is the wrong size for a batch of two
    with pytest.raises(ValueError, match="fork_cache"):
        lm.forward([ids[5:]] * 2, parent)
    with pytest.raises(ValueError, match="crop_cache"):
        lm.crop_cache(parent, 99)
    # left padding that the mask hides changes nothing
    padded = lm.forward([[0, 0] + ids], attention_mask=[[0, 0] + [1] * len(ids)]).logits[0, 2:]
    assert torch.allclose(padded, full, atol=1e-6)


def test_whitebox_hooks_logprobs_and_generation() -> None:
    import torch

    lm = ScriptedWhiteBoxLM()
    ids = [lm.render("abc")]
    base = lm.forward(ids).logits
    handle = lm.add_hook(1, lambda layer, h: torch.zeros_like(h))
    steered = lm.forward(ids).logits
    assert torch.allclose(steered, lm.B[torch.tensor(ids)])  # zeroed last layer leaves the bigram table
    handle.remove()
    assert torch.equal(lm.forward(ids).logits, base)
    with pytest.raises(ValueError, match="layer"):
        lm.add_hook(2, lambda layer, h: None)

    lp = lm.logprobs("ab", "cd")
    ref = torch.log_softmax(lm.forward([lm.render("abcd")]).logits[0].double(), -1)
    assert lp.dtype == np.float64 and np.allclose(lp, [ref[2, lm.encode("c")[0]], ref[3, lm.encode("d")[0]]])

    cfg = GenerateConfig(max_new_tokens=12, temperature=1.0, seed=5, n=2)
    batch = lm.generate(["hi", "a longer prompt"], cfg)
    alone = lm.generate(["hi"], cfg)
    assert [c.text for c in batch[:2]] == [c.text for c in alone]  # seeded and batch-invariant
    assert len(batch) == 4 and all(len(c.token_ids) == len(c.logprobs) <= 12 for c in batch)
    greedy = GenerateConfig(max_new_tokens=8, temperature=0)
    assert lm.generate(["hi"], greedy)[0].text == lm.generate(["hi"], greedy)[0].text


def test_repeated_ngram_bans_by_hand() -> None:
    from agentmill.lm.decoding import repeated_ngram_bans

    assert repeated_ngram_bans([1, 2, 3, 1, 2], 3) == [3]  # "1 2 3" exists, the tail is "1 2"
    assert repeated_ngram_bans([1, 2, 3, 1, 2], 4) == []  # no earlier "3 1 2 ?"
    assert repeated_ngram_bans([5, 5, 5], 2) == [5]
    assert repeated_ngram_bans([7, 8], 1) == [7, 8]
    assert repeated_ngram_bans([1, 2], 0) == [] and repeated_ngram_bans([1], 3) == []
    with pytest.raises(ValueError, match="no_repeat_ngram_size"):
        GenerateConfig(no_repeat_ngram_size=-1)


def test_no_repeat_ngram_generation_never_repeats_an_ngram_it_generated() -> None:
    lm = ScriptedWhiteBoxLM()
    free = lm.generate(["hi"], GenerateConfig(max_new_tokens=40, temperature=0))[0].token_ids
    grams = [tuple(free[i:i + 3]) for i in range(len(free) - 2)]
    assert len(set(grams)) < len(grams)  # greedy on the bigram table loops: the ban has work to do
    ids = lm.generate(["hi"], GenerateConfig(max_new_tokens=40, temperature=0, no_repeat_ngram_size=3))[0].token_ids
    grams = [tuple(ids[i:i + 3]) for i in range(len(ids) - 2)]
    assert len(set(grams)) == len(grams) == 38  # 40 tokens, not one 3-gram twice
