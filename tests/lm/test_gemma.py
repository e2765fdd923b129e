"""The second embedded model, Gemma-3-270M base (slow: the first run assembles and dequantises its GGUF)."""

from __future__ import annotations

import pytest

from agentmill.core.types import Message
from agentmill.lm import GenerateConfig, load_lm


@pytest.mark.hf
@pytest.mark.slow
def test_gemma3_270m_base_loads_offline_and_generates() -> None:
    lm = load_lm("hf:gemma3-270m")
    assert lm.num_layers == 18 and lm.hidden_size == 640 and len(lm.info["gguf_sha256"]) == 64
    bos = lm.tokenizer.bos_token_id
    # Gemma needs its <bos> (without it the base model degenerates into repetition); no chat template, so a
    # conversation becomes the plain "role: content" transcript.
    assert lm.render("The capital of France is")[0] == bos
    assert lm.tokenizer.decode(lm.render([Message("user", "hi")])[1:]) == "user: hi\nassistant:"
    out = lm.generate(["The capital of France is"], GenerateConfig(max_new_tokens=5, temperature=0))[0]
    assert len(out.token_ids) == 5 and out.finish_reason == "length" and out.text.strip()
    assert len(set(out.token_ids)) > 2  # not a stuck repetition
