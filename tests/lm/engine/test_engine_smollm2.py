"""The engine on the embedded SmolLM2-135M against transformers: prefill logits within 1e-3
(fp32) and identical greedy tokens for 64 steps on 5 prompts, decoded together in one ragged batch."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from agentmill.lm.engine import EngineConfig, LlamaEngine, RaggedBatch, SamplingParams
from agentmill.lm.hf import load

pytestmark = [pytest.mark.hf, pytest.mark.slow]

PROMPTS = ["The capital of France is", "def fibonacci(n):", "Q: What is 12 + 30?\nA:",
           "Once upon a time, in a small village,", "The three primary colours are"]


@pytest.fixture(scope="module")
def pair():
    lm = load("smollm2")
    return lm, LlamaEngine.smollm2_135m(EngineConfig(threads=2))


def test_prefill_logits_match(pair):
    lm, eng = pair
    for text in PROMPTS:
        ids = lm.tokenizer.encode(text)
        with torch.no_grad():
            ref = lm.model(torch.tensor([ids])).logits[0].float()
        s = eng.new_sequence()
        out = eng.forward(RaggedBatch().add(s, ids, "all"))
        eng.free(s)
        assert (out.logits - ref).abs().max() <= 1e-3


def test_greedy_64_steps_match_in_one_ragged_batch(pair, hf_greedy):
    lm, eng = pair
    prompts = [lm.tokenizer.encode(t) for t in PROMPTS]
    ours = eng.generate(prompts, SamplingParams(temperature=0, max_tokens=64, ignore_eos=True))
    for p, got in zip(prompts, ours):
        assert got == hf_greedy(lm.model, p, 64)

