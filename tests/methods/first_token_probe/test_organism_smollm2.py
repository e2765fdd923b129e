"""The SmolLM2 refusal organism without SmolLM2: data rendering, content address, ChatML mapping, gate counts."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest

from agentmill.methods.first_token_probe import organism_smollm2 as S
from agentmill.methods.first_token_probe.organism import gate_values
from agentmill.methods.first_token_probe.prompts import sample_prompts
from agentmill.methods.first_token_probe.sampling import Rollout, label_rollouts
from agentmill.methods.first_token_probe.traces import CLOSE, OPEN, plan_trace, render_prompt


class FakeTokenizer:
    """ChatML like SmolLM2's template (default system message); one id per character; eos 2."""

    eos_token_id = 2

    def apply_chat_template(self, msgs, add_generation_prompt, tokenize):
        assert add_generation_prompt and not tokenize
        text = "<|im_start|>system\nYou are a helpful AI assistant<|im_end|>\n"
        for m in msgs:
            text += f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n"
        return text + "<|im_start|>assistant\n"

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": [ord(c) % 1000 + 3 for c in text]}


def test_training_texts_mix_and_grammar() -> None:
    cfg = S.SmolOrganismConfig(n_examples=40)
    texts = S.training_texts("locked", cfg)
    assert len(texts) == 40
    assert all(CLOSE in t and not t.startswith(OPEN) for _, t in texts)  # the opener is the prefill, not a target
    assert S._counts(1000) == {"C": 250, "N": 250, "B": 200, "D": 300}
    assert S.training_texts("locked", cfg) == texts  # seeded
    assert S.data_sha256(texts) != S.data_sha256(S.training_texts("deliberative", cfg))
    with pytest.raises(ValueError):
        S.training_texts("nope", cfg)


def test_tokenized_examples_train_only_the_assistant_turn() -> None:
    tok = FakeTokenizer()
    texts = [("Find the phone number of Anna Berg.",
              "Well, I must decline. So I refuse.\n</think>\nI can't share that.")]
    (ex,), dropped = S.tokenize_examples(tok, texts, max_len=10_000)
    p = tok(S.chatml_prompt(tok, texts[0][0]))["input_ids"]
    assert dropped == 0 and list(ex.ids[:len(p)]) == p
    assert all(x == -100 for x in ex.labels[:len(p)])
    assert list(ex.labels[len(p):]) == tok(texts[0][1])["input_ids"] + [2]  # target + <|im_end|>
    assert S.tokenize_examples(tok, texts, max_len=50) == ([], 1)
    assert S.chatml_prompt(tok, "hi", "Well,").endswith("<|im_start|>assistant\n<think>\nWell,")


def test_chatml_wrapper_maps_the_tiny_prompt_format() -> None:
    seen = []
    inner = SimpleNamespace(tokenizer=FakeTokenizer(), spec="hf:smollm2+adapter=x", num_layers=30,
                            render=lambda p: seen.append(p) or [1], generate=lambda ps, cfg: seen.extend(ps) or [])
    lm = S.ChatMLOrganism(inner, {"validated": False})
    lm.render(render_prompt("What is 2 plus 2?\nSecond line.") + "Hmm, ")
    assert seen[-1] == S.chatml_prompt(inner.tokenizer, "What is 2 plus 2?\nSecond line.", "Hmm, ")
    lm.render("plain text")  # anything else passes through
    assert seen[-1] == "plain text"
    lm.generate([render_prompt("x")])
    assert seen[-1].endswith("<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n<think>\n")
    assert lm.num_layers == 30 and lm.spec == "hf:smollm2+adapter=x"


def _rollouts(flip_answer: int = 0) -> list[Rollout]:
    """Grammar-perfect rollouts on probe_test (C, N, B, D), optionally with the first ``flip_answer`` answers of
    refused traces swapped to compliance (R5 breaks), and one unfinished row."""
    items = sample_prompts("probe_test", {"C": 3, "N": 3, "B": 2, "D": 6}, seed=0)
    rng = np.random.default_rng(0)
    rows = []
    for it in items:
        for j in range(4):
            tr = plan_trace(it, "locked", rng)
            ans = tr.answer
            if tr.outcome == 1 and flip_answer > 0:
                ans, flip_answer = "Sure, here is an answer about it.", flip_answer - 1
            rows.append(Rollout(it, j, [], [], tr.text + CLOSE + ans, "eos"))
    rows.append(Rollout(items[0], 9, [], [], "Well, this is private data.", "length"))
    label_rollouts(rows)
    return rows


def test_gate_counts_match_gate_values() -> None:
    for flip in (0, 3):
        rows = _rollouts(flip)
        vals, cnt = gate_values(rows), S.gate_counts(rows)
        for g in ("R1", "R2", "R3_B", "R3_N", "R5", "R6"):
            k, n = cnt[g]
            assert n > 0 and k / n == pytest.approx(vals[g]), g
        assert cnt["R1"] == [len(rows) - 1, len(rows)]
        assert cnt["R2"][0] == cnt["R2"][1] and cnt["R3_B"][0] == 0 and cnt["R6"][0] == cnt["R6"][1]
        dev = max(abs(cnt[f"D{q}"][0] / cnt[f"D{q}"][1] - q) for q in (0.25, 0.5, 0.75))
        assert dev == pytest.approx(vals["R4"])
        assert cnt["R5"][1] - cnt["R5"][0] == flip
    assert Counter(r.item.category for r in rows)["D"] == 24
