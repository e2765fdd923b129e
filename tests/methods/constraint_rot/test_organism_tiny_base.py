"""``tiny:organism``, the smoke profile's organism base: its tokenizer is lossless and renders ChatML, the weights
are built once into the named directory (deterministically, without moving the global torch RNG) and every load
reads the same bytes back as a fresh model."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from agentmill.methods.constraint_rot.organism.tiny_base import (PAD, SPECIAL, TINY_BASE, WEIGHTS,  # noqa: E402
                                                                 ChatMLBytes, tiny_base, tiny_llama)


def test_the_tokenizer_is_lossless_and_renders_chatml() -> None:
    tok = ChatMLBytes()
    text = "<|im_start|>user\nMail b@x.io — ünïcode<|im_end|>\n"
    ids = tok.encode(text)
    assert ids[0] == SPECIAL["<|im_start|>"] and SPECIAL["<|im_end|>"] in ids and max(ids) < PAD
    assert tok.decode(ids) == text.replace("<|im_start|>", "").replace("<|im_end|>", "")  # specials are skipped
    prompt = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
    assert prompt == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert tok.convert_tokens_to_ids("<|im_end|>") == tok.eos_token_id


def test_built_once_then_read_back_the_same(tmp_path: Path) -> None:
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a = tiny_base(tmp_path / "base")
    assert torch.equal(torch.rand(1), before)  # building did not draw from the global RNG
    mtime = (tmp_path / "base" / WEIGHTS).stat().st_mtime_ns
    b = tiny_base(tmp_path / "base")
    assert (tmp_path / "base" / WEIGHTS).stat().st_mtime_ns == mtime  # read, not rebuilt
    assert a.spec == TINY_BASE and a.sha256 == b.sha256 and a.model is not b.model
    for (name, p), (_, q) in zip(a.model.state_dict().items(), b.model.state_dict().items()):
        assert torch.equal(p, q), name
    fresh = tiny_llama().state_dict()
    assert all(torch.equal(fresh[k], v) for k, v in a.model.state_dict().items())  # the seeded build, as saved
    assert [p.name for p in tmp_path.iterdir()] == ["base"]  # no temporary sibling left behind
