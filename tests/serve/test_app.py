"""The OpenAI-compatible server, driven by the official ``openai`` client against uvicorn on 127.0.0.1, over a tiny
random Llama (byte tokenizer): outputs equal the engine's own decoding, streaming and concurrency lose nothing,
and malformed requests get OpenAI-style 4xx errors."""

from __future__ import annotations

import concurrent.futures as cf

import httpx
import pytest

from agentmill.lm.engine import EngineConfig, SamplingParams
from agentmill.lm.engine.tiny import tiny_llama
from agentmill.methods.dspark.engine import SpecEngine
from agentmill.serve import BatchingLoop, create_app
from tests.helpers.openai_app import serve

openai = pytest.importorskip("openai")


@pytest.fixture(scope="module")
def server():
    eng = tiny_llama(0, EngineConfig(threads=1, max_model_len=512))
    ref = tiny_llama(0, EngineConfig(threads=1, max_model_len=512))   # a second engine for reference decoding
    loop = BatchingLoop(SpecEngine(eng, max_num_seqs=8)).start()
    with serve(create_app(loop, served_model_name="tiny")) as url:
        yield url, ref, loop
    loop.stop()


def client(url):
    return openai.OpenAI(base_url=url, api_key="none", max_retries=0, timeout=60)


def reference(ref, prompt_ids, max_tokens):
    out = ref.generate([prompt_ids], SamplingParams(temperature=0, max_tokens=max_tokens))[0]
    return ref.tokenizer.decode(out)


def test_health_models_metrics(server):
    url, _, _ = server
    base = url.removesuffix("/v1")
    assert httpx.get(base + "/health").json()["status"] == "ok"
    assert [m.id for m in client(url).models.list().data] == ["tiny"]
    text = httpx.get(base + "/metrics").text
    assert "agentmill_requests_running" in text and 'policy="off"' in text


def test_completion_equals_engine_greedy(server):
    url, ref, _ = server
    r = client(url).completions.create(model="tiny", prompt="Hello there", max_tokens=20, temperature=0)
    assert r.choices[0].text == reference(ref, ref.tokenizer.encode("Hello there"), 20)
    assert r.usage.prompt_tokens == len("Hello there") and r.usage.completion_tokens <= 20
    assert r.choices[0].finish_reason in ("stop", "length")


def test_chat_stream_equals_non_stream(server):
    url, ref, _ = server
    msgs = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]
    c = client(url)
    full = c.chat.completions.create(model="tiny", messages=msgs, max_tokens=24, temperature=0)
    chunks = list(c.chat.completions.create(model="tiny", messages=msgs, max_tokens=24, temperature=0, stream=True,
                                            stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    streamed = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert streamed == full.choices[0].message.content
    assert chunks[-1].usage.completion_tokens == full.usage.completion_tokens
    prompt = ref.tokenizer.apply_chat_template(msgs, tokenize=True)
    assert streamed == reference(ref, prompt, 24)


def test_concurrent_streams_are_identical_to_single_requests(server):
    url, ref, _ = server
    prompts = [f"request number {i}: " for i in range(12)]

    def one(p):
        s = client(url).completions.create(model="tiny", prompt=p, max_tokens=16 + len(p) % 5, temperature=0,
                                           stream=True)
        return "".join(ch.choices[0].text for ch in s)

    with cf.ThreadPoolExecutor(12) as ex:
        got = list(ex.map(one, prompts))
    for p, g in zip(prompts, got):
        assert g == reference(ref, ref.tokenizer.encode(p), 16 + len(p) % 5)


def test_stop_strings_and_seeded_sampling(server):
    url, _, _ = server
    c = client(url)
    full = c.completions.create(model="tiny", prompt="abc", max_tokens=30, temperature=0).choices[0].text
    if len(full) >= 6:
        stop = full[3:5]
        r = c.completions.create(model="tiny", prompt="abc", max_tokens=30, temperature=0, stop=[stop])
        assert r.choices[0].text == full[: full.find(stop)] and r.choices[0].finish_reason == "stop"
    a = c.completions.create(model="tiny", prompt="abc", max_tokens=10, temperature=1.0, seed=5).choices[0].text
    b = c.completions.create(model="tiny", prompt="abc", max_tokens=10, temperature=1.0, seed=5).choices[0].text
    assert a == b


@pytest.mark.parametrize("body, status, param", [
    ({"model": "tiny", "messages": []}, 400, "messages"),
    ({"model": "tiny", "messages": [{"role": "robot", "content": "x"}]}, 400, "messages[0].role"),
    ({"model": "nope", "messages": [{"role": "user", "content": "x"}]}, 404, "model"),
    ({"model": "tiny", "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function"}]}, 400,
     "tools"),
    ({"model": "tiny", "messages": [{"role": "user", "content": "x"}], "n": 2}, 400, "n"),
    ({"model": "tiny", "messages": [{"role": "user", "content": "x"}], "temperature": 5}, 400, None),
    ({"model": "tiny", "messages": [{"role": "user", "content": "x"}], "max_tokens": "many"}, 400, "max_tokens"),
])
def test_malformed_chat_requests_get_openai_errors(server, body, status, param):
    url, _, _ = server
    r = httpx.post(url + "/chat/completions", json=body)
    assert r.status_code == status
    e = r.json()["error"]
    assert e["message"] and e["type"].endswith("_error") and e["param"] == param


def test_bad_json_and_bad_prompt(server):
    url, _, _ = server
    r = httpx.post(url + "/completions", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 400 and "JSON" in r.json()["error"]["message"]
    r = httpx.post(url + "/completions", json={"model": "tiny", "prompt": [1, 2, 99999]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "prompt"
    r = httpx.post(url + "/completions", json={"model": "tiny", "prompt": "x", "echo": True})
    assert r.status_code == 400 and r.json()["error"]["param"] == "echo"
    with pytest.raises(openai.BadRequestError):
        client(url).completions.create(model="tiny", prompt="", max_tokens=3)


def test_disconnect_mid_stream_frees_the_request(server):
    url, _, loop = server
    with httpx.stream("POST", url + "/completions", json={"model": "tiny", "prompt": "long one", "max_tokens": 400,
                                                           "temperature": 1.0, "stream": True}) as r:
        for _ in zip(range(3), r.iter_lines()):
            pass
    import time

    deadline = time.monotonic() + 10
    while loop.n_running and time.monotonic() < deadline:
        time.sleep(0.05)
    assert loop.n_running == 0 and len(loop.target.kv) == 0
