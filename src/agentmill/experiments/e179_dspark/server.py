"""E179-server: the HTTP path is cheap — per-user decode speed through ``agentmill serve`` (a real subprocess on
127.0.0.1, SSE streaming) over the same engine and policy driven in-process, one request at a time.

Both arms see the same prompts, greedy, the same max_tokens; per-user TPS is (n − 1)/(t_last − t_first) per request
(first token excluded, so prefill and HTTP connection set-up do not count). The two arms decode each prompt back to
back, in alternating order (the server idles while the in-process engine runs), so each per-request ratio is a
paired repeat; the claim is the mean of those ratios with its t-interval (``core.stats.repeats_estimate``; issue
24: a timing is judged over repeats, and blocks of one arm after the other would fold any drift in machine load into
the ratio). Supported when the whole interval is ≥ 0.90.
The OpenAI-compatibility half of the claim is the server test suite (``tests/serve``), run by CI.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate, repeats_estimate
from agentmill.experiments.protocol import Claim, Experiment, RunContext

PAPER = "Cheng et al., DSpark, arXiv:2607.05147 (serving); OpenAI chat-completions API"


@dataclass(frozen=True)
class Setup:
    requests: int = 20
    max_tokens: int = 96
    policy: str = "dspark-async"
    model: str = "hf:smollm2"
    threads: int = 1


SETUPS = {
    "smoke": Setup(requests=2, max_tokens=8, policy="off", model="tiny"),
    "quick": Setup(requests=6, max_tokens=48),
    "full": Setup(),
}

CLAIMS = (
    Claim("E179-SRV", "Serving over HTTP costs little: per-user TPS through the OpenAI-compatible server (SSE, C = 1) "
          "/ the same engine driven in-process (mean of per-request ratios).", "[R] engineering claim", "—",
          "srv_http_over_direct", ">=", 0.90),
)


def _reads(s: Setup, model: str | None) -> list[Path]:
    """The target's GGUF and, unless ``policy=off``, the committed drafter the server loads (``shipped_drafter``)."""
    from agentmill.experiments.e179_dspark.drafters import drafter_reads

    return drafter_reads("random" if s.policy == "off" else "shipped", "tiny" if s.model == "tiny" else "smollm2")


def _http_tps(client: Any, model: str, prompt: str, max_tokens: int) -> float:
    """Per-user TPS of one streamed request through the server (``client``: an ``httpx.Client`` on its base URL)."""
    body = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    stamps, n = [], 0
    with client.stream("POST", "/chat/completions", json=body) as r:
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code}: {r.read()[:300]!r}")
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            if ev.get("usage"):
                n = int(ev["usage"]["completion_tokens"])
            if any(ch.get("delta", {}).get("content") for ch in ev.get("choices", [])):
                stamps.append(time.perf_counter())
    return (n - 1) / (stamps[-1] - stamps[0]) if n > 1 and len(stamps) > 1 else float("nan")


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    import httpx

    from agentmill.methods.dspark.bench import serve_subprocess
    from agentmill.methods.dspark.data import builtin_prompts

    texts = [it.text for it in builtin_prompts("test", s.requests, seed=13)]
    spec, table = _build(s, ctx)
    ctx.progress("starting agentmill serve", 0, None)
    http, direct = [], []
    with serve_subprocess(["--model", s.model, "--threads", str(s.threads), "--max-num-seqs", "4", "--policy",
                           s.policy, "--served-model-name", "m", *(["--sps-table", str(table)] if table else [])],
                          timeout_s=900) as (url, _):
        with httpx.Client(base_url=url, timeout=300) as client:
            _http_tps(client, "m", texts[0], 4)  # warm-up of both arms (connection, first forward): not timed
            _direct_tps(spec, s, texts[0], 4)
            for i, t in enumerate(texts):
                ctx.progress("HTTP and in-process requests (C = 1, pairs)", i, s.requests)
                if i % 2 == 0:
                    http.append(_http_tps(client, "m", t, s.max_tokens))
                    direct.append(_direct_tps(spec, s, t, s.max_tokens))
                else:
                    direct.append(_direct_tps(spec, s, t, s.max_tokens))
                    http.append(_http_tps(client, "m", t, s.max_tokens))
    ratio = np.array(http) / np.array(direct)
    ratio = ratio[np.isfinite(ratio)]
    ctx.data.update({"http_tps": http, "direct_tps": direct})
    return {"srv_http_over_direct": repeats_estimate(ratio)}


def _direct_tps(spec: Any, s: Setup, text: str, max_tokens: int) -> float:
    """Per-user TPS of one request on the same engine and policy as the server builds, driven without HTTP
    (``SpecEngine.step`` in this thread)."""
    from agentmill.lm.engine import SamplingParams
    from agentmill.methods.dspark.data import chat_ids

    rid = spec.add_request(chat_ids(spec.target.tokenizer, text), SamplingParams(temperature=0, max_tokens=max_tokens))
    stamps, n = [], 0
    while spec.has_work():
        for o in spec.step():
            if o.rid == rid and o.token_ids:
                stamps.append(time.perf_counter())
                n += len(o.token_ids)
    return (n - 1) / (stamps[-1] - stamps[0]) if n > 1 and len(stamps) > 1 else float("nan")


def _build(s: Setup, ctx: RunContext) -> tuple[Any, Path | None]:
    """The in-process arm, and the SPS table file it uses, which the server is then started with: the e179
    experiments' shared quick table (``sps_cache``; R buckets 1 and 4, as the server's ``--max-num-seqs 4``), so
    both arms schedule from the same costs and the server does not profile a table of its own."""
    from agentmill.experiments.e179_dspark.sps_cache import sps_table, sps_table_path
    from agentmill.methods.dspark.spec_engine import SpecEngine
    from agentmill.methods.dspark.pipeline import tapped_engine

    if s.policy == "off":
        return SpecEngine(tapped_engine((), threads=s.threads, model="tiny" if s.model == "tiny" else "smollm2"),
                          max_num_seqs=4), None
    from agentmill.methods.dspark.drafter import DSparkDrafter
    from agentmill.methods.dspark.pipeline import shipped_drafter
    from agentmill.methods.dspark.proposers import DSparkProposer

    engine = tapped_engine((1, 10, 19, 28), threads=s.threads)
    ck = shipped_drafter(engine)
    sps = sps_table(engine, ctx, quick=True, max_r=4)
    return SpecEngine(engine, DSparkProposer(DSparkDrafter.load(ck, engine), DSparkDrafter.calibration_of(ck)),
                      policy=s.policy, sps=sps, max_num_seqs=4), sps_table_path(engine, ctx, quick=True, max_r=4)


EXPERIMENT = Experiment(
    quick_budget_s=210,  # 202 s alone, which profiles the shared SPS table; ~105 s in the main job (docs/LOG.md)
    id="e179.server",
    title="DSpark served over the OpenAI-compatible API: HTTP vs in-process decode speed",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    scale_note="SmolLM2-135M fp32, 1 thread, loopback HTTP with SSE; quick: 6 request pairs × 48 tokens.",
    requires=frozenset({"hf", "serve"}),
    reads=_reads,
)
