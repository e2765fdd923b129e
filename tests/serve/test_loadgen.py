"""The closed-loop load generator against a real loopback server (tiny engine): every request succeeds and is
counted, and non-loopback targets are refused."""

from __future__ import annotations

import pytest

from agentmill.lm.engine import EngineConfig
from agentmill.lm.engine.tiny import tiny_llama
from agentmill.methods.dspark.spec_engine import SpecEngine
from agentmill.serve import BatchingLoop, create_app
from agentmill.serve.loadgen import check_loopback, run_closed_loop
from tests.helpers.openai_app import serve


def test_closed_loop_counts_requests_and_tokens():
    loop = BatchingLoop(SpecEngine(tiny_llama(0, EngineConfig(threads=1)), max_num_seqs=4)).start()
    try:
        with serve(create_app(loop, served_model_name="tiny")) as url:
            pt = run_closed_loop(url, "tiny", concurrency=3, duration_s=2.0, warmup_s=0.3,
                                 prompts=["a", "bb", "ccc"], max_tokens=12, temperature=1.0)
    finally:
        loop.stop()
    assert pt.failed == 0 and pt.requests >= 3
    # Tokens streamed inside the window: from requests finished in it, plus at most one in-flight request per user
    # at each edge of the window.
    assert 0 < pt.output_tokens <= 12 * (pt.requests + 2 * 3)
    assert abs(pt.throughput - pt.output_tokens / 2.0) <= 1.0 / 2.0
    assert pt.throughput > 0 and pt.per_user_tps > 0 and pt.ttft_p50 <= pt.ttft_p95


@pytest.mark.parametrize("url", ["http://10.0.0.1:8000/v1", "https://api.openai.com/v1", "http://example.com/v1"])
def test_refuses_non_loopback(url):
    with pytest.raises(ValueError, match="loopback"):
        check_loopback(url)


def test_accepts_loopback():
    for url in ("http://127.0.0.1:1/v1", "http://127.5.5.5:1/v1", "http://localhost:1/v1", "http://[::1]:1/v1"):
        check_loopback(url)
