"""Load test on the embedded SmolLM2 (issue 5's bar for the server): 8 concurrent streaming chat clients, zero
failed requests, each greedy output identical to decoding that request alone — with plain decoding and with the
shipped DSpark drafter under the dspark-async scheduler; and one tool call through the real chat template."""

from __future__ import annotations

import concurrent.futures as cf

import pytest

from agentmill.lm.engine import EngineConfig, LlamaEngine, SamplingParams
from agentmill.methods.dspark.spec_engine import SpecEngine
from agentmill.serve import BatchingLoop, create_app
from tests.helpers.openai_app import serve

openai = pytest.importorskip("openai")
pytestmark = [pytest.mark.hf, pytest.mark.slow]

QUESTIONS = ["What is the capital of France?", "Name three colours.", "What is 7 times 8?", "Say hello in Spanish.",
             "What do bees make?", "Give one synonym for happy.", "How many legs has a spider?", "What is H2O?"]


def _dspark(eng):
    from agentmill.methods.dspark.costmodel import SPSTable
    from agentmill.methods.dspark.drafter import DSparkDrafter
    from agentmill.methods.dspark.pipeline import shipped_drafter
    from agentmill.methods.dspark.proposers import DSparkProposer

    ck = shipped_drafter(eng)
    B = [1, 2, 4, 8, 16, 32, 64, 128]
    sps = SPSTable(B, [1, 4], [256], {f"r={r},ctx=256": [0.05 * (1 + 0.08 * (b - 1)) for b in B] for r in (1, 4)})
    return SpecEngine(eng, DSparkProposer(DSparkDrafter.load(ck, eng), DSparkDrafter.calibration_of(ck)),
                      policy="dspark-async", sps=sps, max_num_seqs=8)


@pytest.mark.parametrize("mode", ["plain", "dspark-async"])
def test_concurrent_streaming_clients_match_single_request_greedy(mode):
    eng = LlamaEngine.smollm2_135m(EngineConfig(threads=2, tap_layers=(1, 10, 19, 28) if mode != "plain" else ()))
    loop = BatchingLoop(SpecEngine(eng, max_num_seqs=8) if mode == "plain" else _dspark(eng)).start()
    try:
        with serve(create_app(loop, served_model_name="smollm2-135m")) as url:
            def ask(q):
                c = openai.OpenAI(base_url=url, api_key="x", max_retries=0, timeout=300)
                s = c.chat.completions.create(model="smollm2-135m", messages=[{"role": "user", "content": q}],
                                              max_tokens=24, temperature=0, stream=True)
                return "".join(ch.choices[0].delta.content or "" for ch in s if ch.choices)

            with cf.ThreadPoolExecutor(len(QUESTIONS)) as ex:
                got = list(ex.map(ask, QUESTIONS))
    finally:
        loop.stop()
    assert loop.n_running == 0 and len(eng.kv) == 0
    tok = eng.tokenizer
    for q, g in zip(QUESTIONS, got):
        ids = tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=True)
        ids = [int(t) for t in (ids["input_ids"] if hasattr(ids, "keys") else ids)]
        alone = eng.generate([ids], SamplingParams(temperature=0, max_tokens=24))[0]
        assert g == tok.decode(alone, skip_special_tokens=True)
        assert g.strip()


def test_named_tool_choice_on_smollm2_gives_tool_calls():
    """The real template renders role ``tool`` natively, and a named ``tool_choice`` (prefilled ``CALL <name>``,
    plus the tool prompt's one-shot example) makes greedy SmolLM2 write a JSON call that comes back as
    ``tool_calls`` (measured: ``CALL get_weather {"city": "Paris"}``)."""
    import json

    from agentmill.serve.app import template_renders_tool_role

    eng = LlamaEngine.smollm2_135m(EngineConfig(threads=1))
    assert template_renders_tool_role(eng.tokenizer)
    loop = BatchingLoop(SpecEngine(eng, max_num_seqs=1)).start()
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city.",
              "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
    try:
        with serve(create_app(loop, served_model_name="smollm2-135m")) as url:
            c = openai.OpenAI(base_url=url, api_key="x", max_retries=0, timeout=300)
            r = c.chat.completions.create(
                model="smollm2-135m", messages=[{"role": "user", "content": "What is the weather in Paris?"}],
                tools=tools, tool_choice={"type": "function", "function": {"name": "get_weather"}},
                max_tokens=16, temperature=0)
    finally:
        loop.stop()
    m = r.choices[0].message
    assert r.choices[0].finish_reason == "tool_calls" and m.content is None
    assert m.tool_calls[0].function.name == "get_weather"
    assert json.loads(m.tool_calls[0].function.arguments) == {"city": "Paris"}
