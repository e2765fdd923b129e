"""The OpenAI-compatible server, driven by the official ``openai`` client against uvicorn on 127.0.0.1, over a tiny
random Llama (byte tokenizer): outputs equal the engine's own decoding, streaming and concurrency lose nothing,
and malformed requests get OpenAI-style 4xx errors. Tool calling runs over a scripted engine that answers each
prompt with a fixed text, so the client must receive exactly the parsed ``tool_calls``."""

from __future__ import annotations

import concurrent.futures as cf
import json
from types import SimpleNamespace

import httpx
import pytest

from agentmill.lm.engine import EngineConfig, SamplingParams
from agentmill.lm.engine.tiny import ByteTokenizer, tiny_llama
from agentmill.methods.dspark.spec_engine import RequestOutput, SpecEngine, SpecStats
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


def test_response_headers_name_the_weights_and_the_policy(server):
    """Every answer, streamed or not, says which weights and which speculation policy served it."""
    url, _, _ = server
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "temperature": 0}
    r = httpx.post(url + "/chat/completions", json=body, timeout=60)
    assert r.status_code == 200
    assert (r.headers["x-agentmill-weights"], r.headers["x-agentmill-policy"]) == ("dense", "off")
    with httpx.stream("POST", url + "/completions", json={"model": "tiny", "prompt": "hi", "max_tokens": 3,
                                                         "stream": True}, timeout=60) as s:
        assert (s.headers["x-agentmill-weights"], s.headers["x-agentmill-policy"]) == ("dense", "off")
        assert "[DONE]" in "".join(s.iter_text())


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
     "tools[0].function"),
    ({"model": "tiny", "messages": [{"role": "user", "content": "x"}], "functions": [{"name": "f"}]}, 400,
     "functions"),
    ({"model": "tiny", "messages": [{"role": "user", "content": "x"}], "n": 2}, 400, "n"),
    ({"model": "tiny", "messages": [{"role": "user", "content": "x"}], "temperature": 5}, 400, "temperature"),
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


# ---------------------------------------------------------------------------------------------- tool calling
class ScriptedEngine:
    """The ``SpecEngine`` surface ``BatchingLoop`` uses, answering each prompt with ``script(prompt_text)`` in
    3-character deltas; it records every prompt it was given. Its context (``max_model_len``, which the server
    checks prompt + ``max_tokens`` against) is 64k byte tokens, room for the whole transcripts the E164 LangChain
    test sends through it."""

    def __init__(self, script):
        self.script, self.tok, self.policy, self.stats = script, ByteTokenizer(), "scripted", SpecStats()
        self.target = SimpleNamespace(engine_config=EngineConfig(threads=1, max_model_len=1 << 16),
                                      vocab_size=ByteTokenizer.vocab_size, kv={})
        self.prompts: list[str] = []
        self._live: dict[int, list] = {}
        self._next = 0

    def add_request(self, prompt_ids, params):
        text = self.tok.decode(list(prompt_ids))
        self.prompts.append(text)
        self._next += 1
        reply = self.script(text)
        self._live[self._next] = [reply, 0, len(prompt_ids)]
        return self._next

    def abort(self, rid):
        self._live.pop(rid, None)

    def has_work(self):
        return bool(self._live)

    @property
    def n_running(self):
        return len(self._live)

    n_waiting = 0

    def step(self):
        outs = []
        for rid, st in list(self._live.items()):
            reply, pos, n_prompt = st
            piece, st[1] = reply[pos:pos + 3], pos + 3
            done = st[1] >= len(reply)
            outs.append(RequestOutput(rid, text=piece, finish_reason="stop" if done else None, prompt_tokens=n_prompt,
                                      completion_tokens=len(self.tok.encode(reply[:st[1]]))))
            if done:
                del self._live[rid]
        return outs


def _script(prompt: str) -> str:
    """Answers keyed on the last user/tool turn of the ChatML prompt."""
    last = prompt.rsplit("<|im_start|>", 2)[-2]
    if prompt.endswith("CALL get_weather"):                      # named tool_choice prefilled the call
        return ' {"city": "Oslo"}'
    if prompt.endswith("CALL"):                                  # tool_choice "required"
        return " get_weather {}"
    if last.startswith("tool\n"):
        return "REPLY It is " + last.split("\n", 1)[1].split("<|im_end|>")[0] + "."
    if "weather in Paris" in last:
        return 'CALL get_weather {"city": "Paris", "days": 2}'
    if "hermes" in last:
        return '<tool_call>{"name": "get_weather", "arguments": {"city": "Rome"}}</tool_call>'
    if "two cities" in last:
        return 'CALL get_weather {"city": "A"}\nCALL get_weather {"city": "B"}'
    if "forbidden" in last:
        return 'CALL delete_everything {"really": true}'
    if "broken" in last:
        return 'CALL get_weather {"city": '
    return "REPLY Hello!"


WEATHER = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather for a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
                   "required": ["city"]}}}]


@pytest.fixture(scope="module")
def tool_server():
    eng = ScriptedEngine(_script)
    loop = BatchingLoop(eng).start()
    with serve(create_app(loop, served_model_name="scripted")) as url:
        yield url, eng
    loop.stop()


def ask(url, text, **kw):
    return client(url).chat.completions.create(model="scripted", messages=[{"role": "user", "content": text}],
                                               tools=WEATHER, **kw)


def stream_accumulate(url, text, **kw):
    """The client-side accumulation of streamed tool-call deltas by ``index`` (as LangChain and the Agents SDK do)."""
    calls: dict[int, dict] = {}
    content, finish = "", None
    for ch in client(url).chat.completions.create(model="scripted", messages=[{"role": "user", "content": text}],
                                                  tools=WEATHER, stream=True, **kw):
        if not ch.choices:
            continue
        d = ch.choices[0].delta
        content += d.content or ""
        for tc in d.tool_calls or ():
            acc = calls.setdefault(tc.index, {"id": None, "name": "", "arguments": ""})
            acc["id"] = tc.id or acc["id"]
            acc["name"] += (tc.function.name or "") if tc.function else ""
            acc["arguments"] += (tc.function.arguments or "") if tc.function else ""
        finish = ch.choices[0].finish_reason or finish
    return [calls[i] for i in sorted(calls)], content, finish


def failures(url, reason):
    text = httpx.get(url.removesuffix("/v1") + "/metrics").text
    key = f'agentmill_tool_call_parse_failures_total{{reason="{reason}"}}'
    line = [ln for ln in text.splitlines() if ln.startswith(key)]
    return float(line[0].split()[-1]) if line else 0.0


def test_call_line_becomes_tool_calls(tool_server):
    url, eng = tool_server
    r = ask(url, "What is the weather in Paris?")
    m = r.choices[0].message
    assert r.choices[0].finish_reason == "tool_calls" and m.content is None
    assert len(m.tool_calls) == 1 and m.tool_calls[0].type == "function"
    assert m.tool_calls[0].id.startswith("call_") and len(m.tool_calls[0].id) > 10
    assert m.tool_calls[0].function.name == "get_weather"
    assert json.loads(m.tool_calls[0].function.arguments) == {"city": "Paris", "days": 2}
    # the model saw the tool list and the output format in its system turn
    assert eng.prompts[-1].startswith("<|im_start|>system\nTools:\n- get_weather(city: string, days?: integer): "
                                      "Current weather for a city.\nAnswer with exactly one line: CALL <tool> "
                                      "<json-args> to call a tool, or REPLY <text> to answer.\n"
                                      'Example: CALL get_weather {"city": "<string>"}<|im_end|>')


def test_streamed_tool_call_deltas_accumulate_to_the_same_call(tool_server):
    url, _ = tool_server
    calls, content, finish = stream_accumulate(url, "What is the weather in Paris?")
    assert finish == "tool_calls" and content == ""
    assert len(calls) == 1 and calls[0]["id"].startswith("call_") and calls[0]["name"] == "get_weather"
    assert json.loads(calls[0]["arguments"]) == {"city": "Paris", "days": 2}
    calls, _, _ = stream_accumulate(url, "weather for two cities")
    assert [json.loads(c["arguments"])["city"] for c in calls] == ["A", "B"]
    calls, content, finish = stream_accumulate(url, "hello")
    assert calls == [] and content == "Hello!" and finish == "stop"


def test_hermes_parallel_and_reply(tool_server):
    url, _ = tool_server
    r = ask(url, "hermes style please")
    assert json.loads(r.choices[0].message.tool_calls[0].function.arguments) == {"city": "Rome"}
    two = ask(url, "weather for two cities").choices[0].message.tool_calls
    assert [json.loads(t.function.arguments)["city"] for t in two] == ["A", "B"] and two[0].id != two[1].id
    one = ask(url, "weather for two cities", parallel_tool_calls=False).choices[0].message.tool_calls
    assert len(one) == 1
    r = ask(url, "hello")
    assert r.choices[0].message.content == "Hello!" and r.choices[0].message.tool_calls is None
    assert r.choices[0].finish_reason == "stop"


def test_undeclared_or_broken_calls_are_text_and_counted(tool_server):
    url, _ = tool_server
    before = failures(url, "undeclared_tool"), failures(url, "bad_arguments")
    r = ask(url, "do the forbidden thing")
    assert r.choices[0].message.content == 'CALL delete_everything {"really": true}'
    assert r.choices[0].message.tool_calls is None and r.choices[0].finish_reason == "stop"
    _, content, finish = stream_accumulate(url, "broken please")
    assert content == 'CALL get_weather {"city": ' and finish == "stop"
    assert (failures(url, "undeclared_tool"), failures(url, "bad_arguments")) == (before[0] + 1, before[1] + 1)


def test_tool_result_round_trip(tool_server):
    url, eng = tool_server
    c = client(url)
    msgs = [{"role": "user", "content": "What is the weather in Paris?"}]
    first = c.chat.completions.create(model="scripted", messages=msgs, tools=WEATHER).choices[0].message
    msgs += [first.model_dump(exclude_none=True),
             {"role": "tool", "tool_call_id": first.tool_calls[0].id, "content": "sunny, 21 C"}]
    second = c.chat.completions.create(model="scripted", messages=msgs, tools=WEATHER)
    assert second.choices[0].message.content == "It is sunny, 21 C."
    p = eng.prompts[-1]
    assert ('<|im_start|>assistant\nCALL get_weather {"city": "Paris", "days": 2}<|im_end|>\n'
            "<|im_start|>tool\nsunny, 21 C<|im_end|>\n<|im_start|>assistant\n") in p


def test_tool_choice_named_required_and_none(tool_server):
    url, eng = tool_server
    named = ask(url, "hello", tool_choice={"type": "function", "function": {"name": "get_weather"}})
    assert json.loads(named.choices[0].message.tool_calls[0].function.arguments) == {"city": "Oslo"}
    assert eng.prompts[-1].endswith("<|im_start|>assistant\nCALL get_weather")
    req = ask(url, "hello", tool_choice="required").choices[0].message.tool_calls[0]
    assert req.function.name == "get_weather" and json.loads(req.function.arguments) == {}
    none = ask(url, "What is the weather in Paris?", tool_choice="none")
    assert none.choices[0].message.content == 'CALL get_weather {"city": "Paris", "days": 2}'
    assert "Tools:" not in eng.prompts[-1]


@pytest.mark.parametrize("extra, param", [
    ({"tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
    ({"tool_choice": "sometimes"}, "tool_choice"),
    ({"tools": [{"type": "function", "function": {"name": "bad name"}}]}, "tools[0].function.name"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}]},
     "tools[0].function.parameters"),
    ({"parallel_tool_calls": 1}, "parallel_tool_calls"),
])
def test_tool_validation_errors(tool_server, extra, param):
    url, _ = tool_server
    body = {"model": "scripted", "messages": [{"role": "user", "content": "x"}], "tools": WEATHER, **extra}
    r = httpx.post(url + "/chat/completions", json=body)
    assert r.status_code == 400 and r.json()["error"]["param"] == param
    assert r.json()["error"]["type"] == "invalid_request_error"
    with pytest.raises(openai.BadRequestError):
        client(url).chat.completions.create(**body)
