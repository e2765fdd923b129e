"""``hf:qwen-coder-0.5b``: Qwen2.5-Coder-0.5B-Instruct assembled from six chunk packages, used only when the
assembled file is the official release (size and sha256), loaded offline like the other embedded models."""

from __future__ import annotations

import hashlib
import json

import pytest

from agentmill.lm import hf
from agentmill.lm.base import LMError

# The model tests share one xdist worker (``make test`` runs ``--dist loadgroup``) and one session-wide load: split
# over two workers, each paid the load (80–100 s under CI's load; CI logs of 2026-11-29).
pytestmark = pytest.mark.xdist_group("qwen-coder")


def _chunks(tmp_path, parts):
    paths = []
    for i, data in enumerate(parts, 1):
        p = tmp_path / f"part{i:02d}.bin"
        p.write_bytes(data)
        paths.append(p)
    return paths


def test_assembly_keeps_only_the_official_bytes(tmp_path) -> None:
    parts = [b"GGUF" + bytes(range(200)), bytes(range(255, 0, -1)) * 3, b"tail"]
    whole = b"".join(parts)
    chunks, target = _chunks(tmp_path, parts), tmp_path / "out" / "model.gguf"
    sha = hashlib.sha256(whole).hexdigest()
    assert hf.assemble_verified(chunks, target, size=len(whole), sha256=sha, what="t").read_bytes() == whole
    assert hf.assemble_verified(chunks, target, size=len(whole), sha256=sha, what="t") == target  # reused
    other = tmp_path / "out" / "other.gguf"
    with pytest.raises(LMError, match="not the official"):
        hf.assemble_verified(chunks, other, size=len(whole), sha256="0" * 64, what="t")
    assert not other.exists() and [p.name for p in other.parent.iterdir()] == ["model.gguf"]  # no temp left
    with pytest.raises(LMError, match="the chunks hold"):
        hf.assemble_verified(chunks[:2], other, size=len(whole), sha256=sha, what="t")


def test_a_tampered_cached_file_is_rebuilt_from_the_chunks(tmp_path) -> None:
    parts = [b"abc" * 50, b"def" * 50]
    whole = b"".join(parts)
    chunks, target = _chunks(tmp_path, parts), tmp_path / "model.gguf"
    target.write_bytes(b"x" * len(whole))  # right size, wrong bytes: never trusted
    hf.assemble_verified(chunks, target, size=len(whole), sha256=hashlib.sha256(whole).hexdigest(), what="t")
    assert target.read_bytes() == whole


def test_missing_chunk_packages_name_the_install_command() -> None:
    with pytest.raises(LMError, match=r"no-such-chunks-1.*requirements/qwen-coder-0.5b.txt"):
        hf.qwen_coder_chunks(("no-such-chunks-1",))


def test_installed_chunks_assemble_to_the_official_release() -> None:
    """The project installs the chunk packages (make install): six chunks whose concatenation is the release."""
    chunks = hf.qwen_coder_chunks()
    assert len(chunks) == 6 and sum(c.stat().st_size for c in chunks) == hf.QWEN_CODER_BYTES
    path = hf._qwen_coder_gguf()
    assert path.stat().st_size == hf.QWEN_CODER_BYTES and hf.gguf_sha256(path) == hf.QWEN_CODER_SHA256


@pytest.fixture(scope="session")
def qwen():
    from agentmill.lm import load_lm

    return load_lm("hf:qwen-coder-0.5b")


@pytest.mark.hf
@pytest.mark.slow
def test_loads_offline_and_answers_through_its_chat_template(qwen) -> None:
    from agentmill.core.types import Message
    from agentmill.lm import GenerateConfig

    lm = qwen
    assert lm.info["gguf_sha256"] == hf.QWEN_CODER_SHA256 and lm.info["num_layers"] == 24
    prompt = [Message("user", "What is 37 + 48? Answer with the number only.")]
    assert "<|im_start|>assistant" in lm.tokenizer.decode(lm.render(prompt))
    out = lm.generate([prompt], GenerateConfig(max_new_tokens=8, temperature=0))[0]
    assert out.text.strip().startswith("85")  # SmolLM2-135M gets such sums wrong zero-shot (issue 22)


@pytest.mark.hf
@pytest.mark.slow
def test_the_engine_decodes_it_exactly_as_transformers(qwen) -> None:
    """Qwen2 on the serving engine (q/k/v biases, RoPE base 1e6, tied head): prefill logits equal and greedy decoding
    token for token equal to transformers' own cache."""
    import torch

    from agentmill.core.types import Message
    from agentmill.lm.engine import EngineConfig, LlamaEngine, RaggedBatch, SamplingParams

    eng = LlamaEngine.from_hf_model(qwen.model, EngineConfig(threads=1), tokenizer=qwen.tokenizer)
    assert eng.model_config.model_type == "qwen2" and eng.model_config.qkv_bias
    ids = list(qwen.render([Message("user", "Write a Python function that squares x.")]))
    out = eng.forward(RaggedBatch().add(eng.new_sequence(), ids, "all")).logits
    with torch.no_grad():
        ref = qwen.model(torch.tensor([ids])).logits[0].float()
    assert torch.allclose(out, ref, atol=1e-3)
    got = eng.generate([ids], SamplingParams(temperature=0, max_tokens=16, ignore_eos=True))[0]
    x, past, want = torch.tensor([ids]), None, []
    with torch.no_grad():
        for _ in range(16):
            fo = qwen.model(x, past_key_values=past, use_cache=True)
            past, tok = fo.past_key_values, int(fo.logits[0, -1].argmax())
            want.append(tok)
            x = torch.tensor([[tok]])
    assert list(got) == want


@pytest.mark.hf
@pytest.mark.slow
def test_served_on_the_engine_it_answers_and_calls_a_tool(qwen) -> None:
    """What `agentmill serve --model hf:qwen-coder-0.5b` runs: the engine over Qwen behind the OpenAI app. Given a
    tools list it returns a well-formed ``tool_calls`` entry (SmolLM2-135M emits none without a demo; issue 22)."""
    openai = pytest.importorskip("openai")
    from agentmill.lm.engine import EngineConfig, LlamaEngine
    from agentmill.methods.dspark.spec_engine import SpecEngine
    from agentmill.serve import BatchingLoop, create_app
    from tests.helpers.openai_app import serve

    eng = LlamaEngine.from_hf_model(qwen.model, EngineConfig(threads=1, max_model_len=1024), tokenizer=qwen.tokenizer)
    loop = BatchingLoop(SpecEngine(eng, max_num_seqs=2)).start()
    try:
        with serve(create_app(loop, served_model_name="qwen-coder-0.5b")) as url:
            client = openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=120)
            tool = {"type": "function", "function": {
                "name": "get_weather", "description": "Current weather for a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
            r = client.chat.completions.create(
                model="qwen-coder-0.5b", messages=[{"role": "user", "content": "What is the weather in Paris now?"}],
                tools=[tool], max_tokens=48, temperature=0)
            call = r.choices[0].message.tool_calls[0]
            assert r.choices[0].finish_reason == "tool_calls" and call.function.name == "get_weather"
            assert json.loads(call.function.arguments) == {"city": "Paris"}
    finally:
        loop.stop()
