"""``agentmill serve`` as a real subprocess on 127.0.0.1, reached with the official openai client."""

from __future__ import annotations

import httpx
import pytest

from agentmill.cli.main import main

openai = pytest.importorskip("openai")


def test_serve_subprocess_answers_the_openai_client():
    from agentmill.methods.dspark.bench import serve_subprocess

    with serve_subprocess(["--model", "tiny"], timeout_s=60) as (url, _):
        c = openai.OpenAI(base_url=url, api_key="x", max_retries=0, timeout=30)
        r = c.chat.completions.create(model="tiny", messages=[{"role": "user", "content": "hi"}], max_tokens=8,
                                      temperature=0)
        assert r.choices[0].finish_reason in ("stop", "length") and r.usage.completion_tokens <= 8


def test_bad_model_and_port_exit_2(capsys):
    assert main(["serve", "--model", "gpt-9", "--port", "8123"]) == 2
    assert "unknown model" in capsys.readouterr().err
    assert main(["serve", "--model", "tiny", "--port", "70000"]) == 2


@pytest.mark.slow
@pytest.mark.hf
def test_default_serve_is_smollm2_with_dspark_and_greedy_equals_plain_decoding(tmp_path):
    """``agentmill serve`` with no model named: SmolLM2 + the shipped DSpark drafter + dspark-async. Its greedy
    answer must equal plain decoding of the same request (an SPS table is passed so start-up skips profiling)."""
    from agentmill.lm.engine import EngineConfig, LlamaEngine, SamplingParams
    from agentmill.methods.dspark.costmodel import SPSTable

    B = [1, 2, 4, 8, 16, 32, 64, 128]
    table = SPSTable(B, [1], [256], {"r=1,ctx=256": [0.05 * (1 + 0.1 * (b - 1)) for b in B]})
    path = table.save(tmp_path / "sps.json")
    from agentmill.methods.dspark.bench import serve_subprocess

    with serve_subprocess(["--sps-table", str(path)], timeout_s=180) as (url, port):
        assert httpx.get(f"http://127.0.0.1:{port}/health").json()["policy"] == "dspark-async"
        c = openai.OpenAI(base_url=url, api_key="x", max_retries=0, timeout=120)
        msg = "Write a Python function that reverses a string."
        r = c.chat.completions.create(model="smollm2-135m", messages=[{"role": "user", "content": msg}],
                                      max_tokens=40, temperature=0)
        text = r.choices[0].message.content
    eng = LlamaEngine.smollm2_135m(EngineConfig(threads=1))
    ids = eng.tokenizer.apply_chat_template([{"role": "user", "content": msg}], add_generation_prompt=True,
                                            tokenize=True)
    ids = ids["input_ids"] if hasattr(ids, "keys") else ids
    plain = eng.generate([list(ids)], SamplingParams(temperature=0, max_tokens=40))[0]
    assert text == eng.tokenizer.decode(plain, skip_special_tokens=True)
