from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def hf_greedy():
    """Plain greedy decoding with transformers' own cache, EOS not suppressed (``generate``'s min_new_tokens would
    mask it, so an engine that keeps going past EOS could never match it)."""
    import torch

    def run(model, ids, steps):
        out, past, x = [], None, torch.tensor([ids])
        with torch.no_grad():
            for _ in range(steps):
                fo = model(x, past_key_values=past, use_cache=True)
                past = fo.past_key_values
                tok = int(fo.logits[0, -1].argmax())
                out.append(tok)
                x = torch.tensor([[tok]])
        return out

    return run
