"""HFPair (docs/methods/progress_advantage.md): one SmolLM2 copy with a LoRA adapter serves as policy (adapter on) and
reference (adapter off); the reference equals the plain base model, and a saved adapter reloads exactly."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from agentmill.lm.scoring import score_segments

pytestmark = [pytest.mark.hf, pytest.mark.slow]


def _lora_b(pair):
    return [p for n, p in pair.peft_model.named_parameters() if "lora_B" in n]


def test_adapter_pair_reference_is_the_base_model_and_adapters_round_trip(smol, tmp_path):
    import torch

    from agentmill.lm.pair import HFPair

    prompt = smol.render([{"role": "user", "content": "You are in the kitchen. Exits: north, east."}])
    action = smol.encode("go north") + [smol.tokenizer.convert_tokens_to_ids("<|im_end|>")]
    base = score_segments(smol, [prompt, action]).token_logprobs[1]

    pair = HFPair("smollm2", adapter="new")
    assert len(pair.trainable_parameters()) == 2 * 2 * smol.num_layers  # A and B for q_proj, v_proj per layer
    pol = score_segments(pair.policy, [prompt, action]).token_logprobs[1]
    assert np.max(np.abs(pol - base)) < 1e-6  # a new LoRA has B = 0: the policy is the base model
    with torch.no_grad():
        gen = torch.Generator().manual_seed(0)
        for p in _lora_b(pair):
            p.add_(0.05 * torch.randn(p.shape, generator=gen))
    pol = score_segments(pair.policy, [prompt, action]).token_logprobs[1]
    ref = score_segments(pair.reference, [prompt, action]).token_logprobs[1]
    assert np.max(np.abs(ref - base)) < 1e-6  # adapter disabled == the base model (PERF-6 equality)
    assert np.max(np.abs(pol - base)) > 1e-3  # and the adapter does change the policy
    saved = pair.save_adapter(tmp_path / "adapter")
    assert (saved / "adapter_config.json").exists()
    del pair
    gc.collect()

    again = HFPair("smollm2", adapter=saved)
    assert np.max(np.abs(score_segments(again.policy, [prompt, action]).token_logprobs[1] - pol)) < 1e-6
