from __future__ import annotations

import pytest

from agentmill.lm import GenerateConfig, load_lm


@pytest.mark.hf
@pytest.mark.slow
def test_gemma3_270m_base_loads_offline_and_generates() -> None:
    lm = load_lm("hf:gemma3-270m")
    assert lm.num_layers == 18 and lm.hidden_size == 640
    out = lm.generate(["The capital of France is"], GenerateConfig(max_new_tokens=5, temperature=0))[0]
    assert len(out.token_ids) >= 1 and out.text.strip()
