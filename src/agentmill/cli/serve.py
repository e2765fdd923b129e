"""``agentmill serve``: the OpenAI-compatible server on the ragged engine (dspark spec §6.4, §6.5).

    agentmill serve [--model hf:smollm2] [--host 127.0.0.1] [--port 8000] [--max-num-seqs 16]
                    [--policy off|ngram:K] [--dtype float32] [--threads 1] [--api-key KEY]

Serves the embedded SmolLM2-135M-Instruct by default, with continuous batching. ``--policy off`` decodes plainly;
``--policy ngram:K`` drafts by prompt lookup and verifies exactly (lossless). The DSpark drafter is not built yet.
"""

from __future__ import annotations

import argparse

MODELS = ("hf:smollm2", "tiny")


def load_engine(spec: str, dtype: str, threads: int, max_model_len: int):
    from agentmill.lm.engine import EngineConfig, LlamaEngine

    ecfg = EngineConfig(dtype=dtype, threads=threads, max_model_len=max_model_len)
    if spec in ("hf:smollm2", "smollm2", "smollm2-135m"):
        return LlamaEngine.smollm2_135m(ecfg), "smollm2-135m"
    if spec == "tiny":
        from agentmill.lm.engine.tiny import tiny_llama

        return tiny_llama(0, ecfg), "tiny"
    if spec.startswith("hf:"):
        from agentmill.lm.hf import load

        lm = load(spec[3:])
        return LlamaEngine.from_hf_model(lm.model, ecfg, tokenizer=lm.tokenizer), spec[3:]
    raise ValueError(f"serve: unknown model {spec!r}; use hf:smollm2 (default), hf:<llama folder or gguf> or tiny")


def parse_policy(policy: str) -> int:
    """``off`` → 0; ``ngram:K`` → prompt-lookup drafts verified K at a time."""
    if policy == "off":
        return 0
    if policy.startswith("ngram:") and policy[6:].isdigit() and 1 <= int(policy[6:]) <= 16:
        return int(policy[6:])
    raise ValueError(f"--policy must be off or ngram:K with 1 <= K <= 16, got {policy!r}")


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from agentmill.methods.dspark.engine import SpecEngine
    from agentmill.methods.dspark.proposers import NgramProposer
    from agentmill.serve import BatchingLoop, create_app

    if not 0 < args.port < 65536:
        raise ValueError(f"--port must be in 1..65535, got {args.port}")
    k = parse_policy(args.policy)
    engine, name = load_engine(args.model, args.dtype, args.threads, args.max_model_len)
    spec = SpecEngine(engine, NgramProposer(k=k) if k else None, verify_len=k, max_num_seqs=args.max_num_seqs)
    loop = BatchingLoop(spec).start()
    app = create_app(loop, served_model_name=args.served_model_name or name, api_key=args.api_key)
    print(f"agentmill serve: {args.served_model_name or name} on http://{args.host}:{args.port}/v1 "
          f"(policy {spec.policy}, {args.dtype}, {args.threads} thread(s))", flush=True)
    try:
        uvicorn.run(app, host=args.host, port=args.port, workers=1, log_level="warning")
    finally:
        loop.stop()
    return 0


def register(sub) -> None:
    sp = sub.add_parser("serve", help="OpenAI-compatible server (chat/completions, SSE, continuous batching)")
    sp.add_argument("--model", default="hf:smollm2", help="hf:smollm2 (default), hf:<llama folder/gguf>, tiny")
    sp.add_argument("--served-model-name", default=None)
    sp.add_argument("--host", default="127.0.0.1")
    sp.add_argument("--port", type=int, default=8000)
    sp.add_argument("--max-num-seqs", type=int, default=16)
    sp.add_argument("--max-model-len", type=int, default=2048)
    sp.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    sp.add_argument("--threads", type=int, default=1)
    sp.add_argument("--policy", default="off", help="off (plain decoding) or ngram:K (prompt-lookup speculation)")
    sp.add_argument("--api-key", default=None, help="require 'Authorization: Bearer KEY'")
    sp.set_defaults(fn=cmd_serve)
