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


# ---------------------------------------------------------------------------------------------- exposure (issue 20)
def test_default_host_is_loopback_and_the_key_comes_from_flag_or_environment(monkeypatch):
    from agentmill.cli.main import build_parser
    from agentmill.cli.serve import api_key_from

    args = build_parser().parse_args(["serve"])
    assert args.host == "127.0.0.1"
    monkeypatch.delenv("AGENTMILL_API_KEY", raising=False)
    assert api_key_from(args) is None
    monkeypatch.setenv("AGENTMILL_API_KEY", "")
    assert api_key_from(args) is None                          # an empty variable is unset, not a key of ""
    monkeypatch.setenv("AGENTMILL_API_KEY", "from-env")
    assert api_key_from(args) == "from-env"
    assert api_key_from(build_parser().parse_args(["serve", "--api-key", "flag"])) == "flag"


def test_empty_api_key_flag_exits_2(capsys):
    """A script whose secret expanded to nothing must fail, not serve without a key."""
    assert main(["serve", "--model", "tiny", "--api-key", ""]) == 2
    assert "--api-key must not be empty" in capsys.readouterr().err


@pytest.mark.parametrize("host, key, warns", [
    ("127.0.0.1", None, False), ("localhost", None, False), ("::1", None, False), ("127.0.0.2", None, False),
    ("0.0.0.0", None, True), ("::", None, True), ("192.168.1.5", None, True), ("myhost.example", None, True),
    ("0.0.0.0", "k", False),
])
def test_exposure_warning_for_non_loopback_hosts_without_a_key(host, key, warns):
    from agentmill.cli.serve import exposure_warning

    w = exposure_warning(host, key)
    assert (w is not None) == warns
    if warns:
        assert host in w and "AGENTMILL_API_KEY" in w


def test_serve_subprocess_takes_its_key_from_the_environment(monkeypatch):
    """``AGENTMILL_API_KEY`` keeps the key out of ``ps``: the served ``/v1`` refuses requests without it."""
    from agentmill.methods.dspark.bench import serve_subprocess

    monkeypatch.setenv("AGENTMILL_API_KEY", "env-sekrit")
    with serve_subprocess(["--model", "tiny"], timeout_s=60) as (url, _):
        r = httpx.get(url + "/models")
        assert r.status_code == 401 and r.json()["error"]["type"] == "authentication_error"
        assert httpx.get(url + "/models", headers={"authorization": "Bearer env-sekrit"}).status_code == 200
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=url, api_key="x", max_retries=0, timeout=30).models.list()
