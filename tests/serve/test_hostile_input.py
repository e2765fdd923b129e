"""Regression tests for the server findings of issue 20's hostile probe, one or more per finding, over the scripted
engine of ``conftest.py`` (no model: every delay measured here is the server's own). Each test failed on the
server before the fix and names the finding it guards.
"""

from __future__ import annotations

import http.client
import json
import select
import socket
import threading
import time
from urllib.parse import urlsplit

import httpx
import pytest

openai = pytest.importorskip("openai")


def shape(r: httpx.Response, status: int, param: str | None = "any") -> dict:
    """The OpenAI error body of ``r`` after checking its status and shape (and ``param`` unless ``"any"``)."""
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"] and err["type"].endswith("_error")
    if param != "any":
        assert err["param"] == param, err
    return err


def chat(text: str = "hi", **kw) -> dict:
    return {"model": "scripted", "messages": [{"role": "user", "content": text}], **kw}


# ---------------------------------------------------------------------------------------------- 1. bodies
def test_chunked_body_over_the_cap_is_refused_while_it_streams(scripted):
    """Finding 1: a chunked body (no Content-Length) was read whole before the 1 MiB check (1 GiB grew the process
    by 2 GB). Now the server answers 413 and stops reading long before the 64 MiB this client would send."""
    with scripted.server() as (url, _, _):
        u = urlsplit(url)
        s = socket.create_connection((u.hostname, u.port))
        s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Transfer-Encoding: chunked\r\n\r\n")
        piece = b"[" * (64 << 10)
        frame = b"%x\r\n" % len(piece) + piece + b"\r\n"
        sent, answer = 0, b""
        try:
            while sent < 64 << 20:
                s.sendall(frame)
                sent += len(piece)
                if select.select([s], [], [], 0)[0]:
                    break
            else:
                s.sendall(b"0\r\n\r\n")          # only the old server gets here: let it answer at last
            s.settimeout(10)
            answer = s.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            pass                                   # closed on us mid-upload: it stopped reading, as it should
        finally:
            s.close()
    assert sent < 16 << 20, f"the server read {sent >> 20} MiB before refusing"
    assert answer == b"" or answer.startswith(b"HTTP/1.1 413"), answer[:200]


def test_small_bodies_over_a_small_cap_get_413_in_openai_shape(scripted):
    with scripted.server(max_body_bytes=2000) as (url, _, _):
        big = json.dumps(chat("x" * 5000)).encode()
        shape(httpx.post(url + "/chat/completions", content=big), 413)
        shape(httpx.post(url + "/chat/completions", content=iter([big[:1500], big[1500:]])), 413)   # chunked
        assert httpx.post(url + "/chat/completions", json=chat("short")).status_code == 200


# ---------------------------------------------------------------------------------------------- 2. API key
def test_api_key_guards_every_v1_route_and_leaves_health_open(scripted):
    """Finding 2: with a key, every ``/v1`` route (``/v1/models`` was open) needs ``Authorization: Bearer KEY``;
    the refusal is a 401 the openai client raises as ``AuthenticationError``."""
    with scripted.server(api_key="sekrit") as (url, _, _):
        for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": "sekrit"}):
            err = shape(httpx.post(url + "/chat/completions", json=chat(), headers=headers), 401, None)
            assert err["type"] == "authentication_error" and err["code"] == "invalid_api_key"
            shape(httpx.get(url + "/models", headers=headers), 401)
        ok = {"authorization": "Bearer sekrit"}
        assert httpx.get(url + "/models", headers=ok).json()["data"][0]["id"] == "scripted"
        assert httpx.get(url.removesuffix("/v1") + "/health").status_code == 200
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=url, api_key="wrong", max_retries=0).models.list()
        r = openai.OpenAI(base_url=url, api_key="sekrit", max_retries=0).chat.completions.create(**chat())
        assert r.choices[0].message.content == "REPLY ok"


# ---------------------------------------------------------------------------------------------- 3. disconnect
def test_non_streaming_client_that_leaves_aborts_its_generation(scripted):
    """Finding 3: a non-streaming request kept generating after its client left (40 s in the probe). The scripted
    reply would take 100 s; the request must be aborted within seconds of the client's timeout."""
    eng = scripted.Engine("x" * 10_000, piece=1, step_delay=0.01)
    with scripted.server(eng) as (url, _, loop):
        with pytest.raises(httpx.ReadTimeout):
            httpx.post(url + "/completions", json={"model": "scripted", "prompt": "go", "max_tokens": 400},
                       timeout=0.5)
        deadline = time.monotonic() + 5
        while loop.n_running and time.monotonic() < deadline:
            time.sleep(0.05)
        assert loop.n_running == 0 and eng.aborted == [1]
        metrics = httpx.get(url.removesuffix("/v1") + "/metrics").text
        assert "agentmill_requests_aborted_total 1.0" in metrics


# ---------------------------------------------------------------------------------------------- 4. max_tokens
def test_max_tokens_beyond_the_context_is_refused_naming_the_limit(scripted):
    """Finding 4: ``max_tokens`` 10^9 was silently cut to what the context held. Now prompt + ``max_tokens`` over
    the context (512 here) is a 400 naming it; an omitted ``max_tokens`` still fits itself to the room left."""
    eng = scripted.Engine("REPLY ok", max_model_len=512)
    with scripted.server(eng) as (url, _, _):
        for field in ("max_tokens", "max_completion_tokens"):
            err = shape(httpx.post(url + "/chat/completions", json=chat(**{field: 10 ** 9})), 400, field)
            assert "512" in err["message"]
        body = {"model": "scripted", "prompt": "x" * 100}
        err = shape(httpx.post(url + "/completions", json={**body, "max_tokens": 413}), 400, "max_tokens")
        assert "512" in err["message"] and "at most 412" in err["message"]
        assert httpx.post(url + "/completions", json={**body, "max_tokens": 412}).status_code == 200
        assert eng.params[-1].max_tokens == 412
        assert httpx.post(url + "/completions", json={"model": "scripted", "prompt": "x" * 500}).status_code == 200
        assert eng.params[-1].max_tokens == 12
        shape(httpx.post(url + "/completions", json={"model": "scripted", "prompt": "x" * 512}), 400, "prompt")
        shape(httpx.post(url + "/completions", json={**body, "max_tokens": 0}), 400, "max_tokens")


def test_context_length_is_the_kv_pools():
    from agentmill.lm.engine import EngineConfig
    from agentmill.lm.engine.tiny import tiny_llama
    from agentmill.methods.dspark.spec_engine import SpecEngine
    from agentmill.serve import BatchingLoop

    assert BatchingLoop(SpecEngine(tiny_llama(0, EngineConfig(max_model_len=300)))).context_len == 300


# ---------------------------------------------------------------------------------------------- 5. tokenising
def _stream_gaps(url: str, during) -> tuple[float, float]:
    """(median, max) gap between the chunks of one stream while ``during()`` runs, once the stream flows."""
    times: list[float] = []

    def stream():
        with httpx.stream("POST", url + "/completions", json={"model": "scripted", "prompt": "s", "stream": True,
                                                               "max_tokens": 400}, timeout=30) as r:
            times.extend(time.perf_counter() for ln in r.iter_lines() if ln.startswith("data:"))

    t = threading.Thread(target=stream)
    t.start()
    time.sleep(0.5)
    t0 = time.perf_counter()
    during()
    t1 = time.perf_counter()
    t.join()
    gaps = [b - a for a, b in zip(times, times[1:]) if b > t0 and a < t1]
    return sorted(gaps)[len(gaps) // 2], max(gaps)


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_tokenising_a_long_prompt_does_not_stall_other_streams(scripted, endpoint):
    """Finding 5: tokenising ran on the event loop, so a 1 MB prompt froze every stream (chunk gap 0.075 → 2.0 s
    in the probe). The tokenizer here takes 1 s for a long text (sleeping, i.e. releasing the GIL as SmolLM2's Rust
    tokenizer does); the other stream's chunks must keep coming."""
    tok = scripted.SlowTokenizer(threshold=10_000, seconds=1.0)
    eng = scripted.Engine("y" * 150, piece=1, step_delay=0.02, tokenizer=tok, max_model_len=20_000)
    with scripted.server(eng) as (url, _, _):
        def big():
            body = ({"model": "scripted", "prompt": "z" * 12_000, "max_tokens": 1} if endpoint == "completions"
                    else chat("z" * 12_000, max_tokens=1))
            r = httpx.post(f"{url}/{'completions' if endpoint == 'completions' else 'chat/completions'}", json=body,
                           timeout=30)
            assert r.status_code == 200, r.text

        median, worst = _stream_gaps(url, big)
    assert max(tok.calls) >= 12_000                # the slow path did run, concurrently with the stream
    assert worst < 0.5, (median, worst)


def test_prompt_over_the_size_cap_is_refused_before_tokenising(scripted):
    """Finding 5, second half: a prompt far beyond what the context holds is refused by its length in characters
    (32 per token of context: 16,384 here) without being tokenised at all."""
    tok = scripted.SlowTokenizer(threshold=10_000, seconds=1.0)
    with scripted.server(scripted.Engine(tokenizer=tok, max_model_len=512)) as (url, _, _):
        t0 = time.perf_counter()
        err = shape(httpx.post(url + "/completions", json={"model": "scripted", "prompt": "p" * 900_000}), 400,
                    "prompt")
        assert "16384" in err["message"]
        err = shape(httpx.post(url + "/chat/completions", json=chat("p" * 900_000)), 400, "messages")
        many = {"model": "scripted", "messages": [{"role": "user", "content": ""}] * 20_000}
        shape(httpx.post(url + "/chat/completions", json=many), 400, "messages")
        assert time.perf_counter() - t0 < 5
    assert all(n < 100_000 for n in tok.calls)


# ---------------------------------------------------------------------------------------------- 6. malformed
@pytest.mark.parametrize("raw, param", [
    (b'{"model": "scripted", "messages": [{"role": "user", "content": "x"}], "stream_options": "yes"}',
     "stream_options"),
    (b'{"model": "scripted", "messages": [{"role": "user", "content": "x"}], "stream": true, '
     b'"stream_options": {"include_usage": "yes"}}', "stream_options.include_usage"),
    (b'{"model": "scripted", "messages": [{"role": "user", "content": "x"}], "stream": "false"}', "stream"),
    (b'{"model": "scripted", "messages": [{"role": "user", "content": "x"}], "temperature": NaN}', None),
    (b'{"model": "scripted", "messages": [{"role": "user", "content": "x"}], "top_p": Infinity}', None),
    (b'{"model": "scripted", "messages": [{"role": "user", "content": "x"}], "temperature": 1e999}', "temperature"),
    (b'{"model": "scripted", "messages": [{"role": "user", "content": "x"}], "temperature": "0.5"}', "temperature"),
    (b'{"model": "scripted", "messages": [{"role": "user", "content": "x"}], "top_k": 1.5}', "top_k"),
    (b'{"model": "scripted", "messages": [{"role": "user", "content": "x"}], "seed": 18446744073709551616}', "seed"),
    (b'{"model": "scripted", "messages": [{"role": "user", "content": "x"}], "seed": true}', "seed"),
    (b'{"model": "scripted", "messages": [{"role": "user", "content": "x"}], "n": "1"}', "n"),
    (b'{"model": ["scripted"], "messages": [{"role": "user", "content": "x"}]}', "model"),
    (b'{"model": "scripted", "messages": [{"role": "user", "content": "\\ud800"}]}', None),
    (b'{"model": "scripted", "messages": [{"role": "user", "content": "\xed\xa0\x80"}]}', None),
    (b'{"model": "scripted", "messages": [{"role": "user", "content": "x"}], "tools": [{"type": "function", '
     b'"function": {"name": "f", "parameters": {"properties": {"a": {}}, "required": 5}}}]}',
     "tools[0].function.parameters.required"),
    (b'{"model": "scripted", "prompt": "\\udfff"}', None),
    (b'{"model": "scripted", "prompt": "x", "max_tokens": 9' + b"9" * 5000 + b"}", None),
])
def test_malformed_fields_get_4xx_in_openai_shape(scripted, raw, param):
    """Finding 6: each of these gave a 500 (string ``stream_options``, huge seeds inside the engine thread, lone
    surrogates at the tokenizer, a malformed tool schema in the renderer) or was silently accepted."""
    with scripted.server() as (url, _, _):
        path = "/completions" if b'"prompt"' in raw else "/chat/completions"
        shape(httpx.post(url + path, content=raw, headers={"content-type": "application/json"}), 400, param)


def test_wide_seeds_are_accepted_and_stay_deterministic(scripted):
    """Any 64-bit seed is valid (OpenAI's range); the engine sees it folded to 32 bits, where both torch and the
    DSpark drafter's ``seed * 7919 + 104729`` fit."""
    eng = scripted.Engine()
    with scripted.server(eng) as (url, _, _):
        for seed in (-1, 2 ** 63 - 1, -(2 ** 63), 7):
            assert httpx.post(url + "/chat/completions", json=chat(seed=seed)).status_code == 200
    assert [p.seed for p in eng.params] == [2 ** 32 - 1, 2 ** 32 - 1, 0, 7]


def test_deep_json_is_a_400_and_keeps_the_connection(scripted):
    """Finding 6: a 200k-deep body raised ``RecursionError`` → 500, and uvicorn then closed the connection, which
    reset the client's pooled connection. The same socket must carry the next request."""
    with scripted.server() as (url, _, _):
        u = urlsplit(url)
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
        for deep in (b"[" * 200_000 + b"]" * 200_000, b'{"messages": ' + b"[" * 100 + b"]" * 100 + b"}"):
            conn.request("POST", "/v1/chat/completions", body=deep, headers={"content-type": "application/json"})
            r = conn.getresponse()
            body = json.loads(r.read())
            assert r.status == 400 and "nests deeper" in body["error"]["message"], body
            assert not r.will_close
            sock = conn.sock
        conn.request("POST", "/v1/chat/completions", body=json.dumps(chat()),
                     headers={"content-type": "application/json"})
        r = conn.getresponse()
        assert r.status == 200 and json.loads(r.read())["choices"][0]["message"]["content"] == "REPLY ok"
        assert conn.sock is sock
        conn.close()


def test_unknown_routes_answer_in_openai_shape(scripted):
    with scripted.server() as (url, _, _):
        shape(httpx.get(url + "/nope"), 404)
        shape(httpx.get(url + "/chat/completions"), 405)


# ---------------------------------------------------------------------------------------------- the engine thread
def test_a_failing_engine_step_fails_its_requests_but_not_the_server(scripted):
    """Defence in depth behind the schema: an exception in ``engine.step()`` used to end the engine thread, after
    which every request hung for 30 s and got a 500. Now the requests in flight get a 503 and serving goes on."""
    with scripted.server(scripted.Engine(fail_steps=1)) as (url, _, loop):
        err = shape(httpx.post(url + "/chat/completions", json=chat(), timeout=10), 503)
        assert err["type"] == "server_error" and "scripted engine failure" in err["message"]
        assert httpx.post(url + "/chat/completions", json=chat(), timeout=10).status_code == 200
        assert loop.alive and httpx.get(url.removesuffix("/v1") + "/health").status_code == 200
