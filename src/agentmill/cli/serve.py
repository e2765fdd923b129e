"""``agentmill serve``: the OpenAI-compatible server on the ragged engine (docs/methods/dspark.md, "Use it").

    agentmill serve [--model hf:smollm2] [--host 127.0.0.1] [--port 8000] [--max-num-seqs 16]
                    [--drafter auto|dspark|PATH|ngram|none] [--policy auto|off|fixed:K|threshold:T|dspark|dspark-async]
                    [--sps-table PATH] [--dtype float32] [--threads 1] [--api-key KEY]

Serves the embedded SmolLM2-135M-Instruct by default, with continuous batching and DSpark speculation (the shipped
drafter, ``dspark-async`` scheduling on a profiled SPS table). ``--drafter none`` (or ``--policy off``) decodes
plainly; ``--drafter ngram`` drafts by prompt lookup (``--policy ngram:K`` is the short form). Every speculative
mode verifies exactly, so outputs follow the target's distribution.

Exposure: the server binds 127.0.0.1 unless ``--host`` names another address. ``--api-key KEY`` (or the
``AGENTMILL_API_KEY`` environment variable, which keeps the key out of ``ps`` listings and shell history) makes
every ``/v1`` request carry ``Authorization: Bearer KEY``; binding a non-loopback address without a key prints a
warning, since anyone who can reach the port can then spend this machine's CPU.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
import sys

API_KEY_ENV = "AGENTMILL_API_KEY"
MODELS = ("hf:smollm2", "tiny")


def load_engine(spec: str, dtype: str, threads: int, max_model_len: int, tap_layers: tuple[int, ...] = (), *,
                weights: str = "dense"):
    from agentmill.lm.engine import EngineConfig, LlamaEngine

    ecfg = EngineConfig(dtype=dtype, threads=threads, max_model_len=max_model_len, tap_layers=tap_layers,
                        weights=weights)
    if spec in ("hf:smollm2", "smollm2", "smollm2-135m"):
        return LlamaEngine.smollm2_135m(ecfg), "smollm2-135m"
    if spec == "tiny":
        from agentmill.lm.engine.tiny import tiny_llama

        return tiny_llama(0, ecfg), "tiny"
    if spec.startswith("hf:"):
        from agentmill.lm.hf import load

        lm = load(spec[3:])
        return LlamaEngine.from_hf_model(lm.model, ecfg, tokenizer=lm.tokenizer,
                                         fingerprint=str(lm.info.get("gguf_sha256") or "")[:16]), spec[3:]
    raise ValueError(f"serve: unknown model {spec!r}; use hf:smollm2 (default), hf:qwen-coder-0.5b, "
                     "hf:<Llama or Qwen2 folder or gguf> or tiny")


POLICIES = ("off", "fixed:K", "threshold:T", "dsd", "dspark", "dspark-async[:S]", "ngram:K")


def resolve(model: str, drafter: str, policy: str) -> tuple[str, str]:
    """(drafter, policy) after defaults: the embedded SmolLM2 gets DSpark with ``dspark-async``; ``ngram:K`` as a
    policy means the n-gram drafter verified K at a time; ``off`` needs no drafter."""
    if policy.startswith("ngram:"):
        k = policy[6:]
        if not (k.isdigit() and 1 <= int(k) <= 16):
            raise ValueError(f"--policy ngram:K needs 1 <= K <= 16, got {policy!r}")
        return "ngram", f"fixed:{k}"
    if policy == "off":
        return "none", "off"
    if drafter == "auto":
        drafter = "dspark" if model in ("hf:smollm2", "smollm2", "smollm2-135m") else "none"
    if policy == "auto":
        policy = {"dspark": "dspark-async", "ngram": "fixed:4", "none": "off"}.get(drafter, "dspark-async")
    if drafter == "none" and policy != "off":
        raise ValueError(f"--policy {policy} needs a drafter (--drafter dspark|PATH|ngram)")
    return drafter, policy


def build_spec_engine(model: str, drafter: str, policy: str, *, dtype: str, threads: int, max_model_len: int,
                      max_num_seqs: int, sps_table: str | None, weights: str = "dense"):
    """The served ``SpecEngine`` (and the served model name)."""
    from agentmill.methods.dspark.spec_engine import SpecEngine
    from agentmill.methods.dspark.proposers import NgramProposer

    drafter, policy = resolve(model, drafter, policy)
    if drafter in ("none", "ngram"):
        engine, name = load_engine(model, dtype, threads, max_model_len, weights=weights)
        if drafter == "none":
            return SpecEngine(engine, max_num_seqs=max_num_seqs), name
        k = int(policy.split(":")[1]) if policy.startswith("fixed:") else 4
        return SpecEngine(engine, NgramProposer(k=k), verify_len=k, max_num_seqs=max_num_seqs), name
    import json
    from pathlib import Path

    from agentmill.methods.dspark.drafter import DSparkDrafter
    from agentmill.methods.dspark.pipeline import shipped_drafter
    from agentmill.methods.dspark.proposers import DSparkProposer

    if model not in ("hf:smollm2", "smollm2", "smollm2-135m", "tiny"):
        raise ValueError("the DSpark drafter is trained for hf:smollm2; use --drafter ngram|none for other models")
    if drafter != "dspark" and not (Path(drafter) / "config.json").exists():
        raise ValueError(f"--drafter {drafter!r}: no drafter checkpoint there (config.json missing)")
    ckpt = Path(drafter) if drafter != "dspark" else None
    layers = tuple(json.loads((ckpt / "config.json").read_text())["dspark"]["target_layer_ids"]) if ckpt else \
        (1, 10, 19, 28)
    engine, name = load_engine(model, dtype, threads, max_model_len, tap_layers=layers, weights=weights)
    ckpt = ckpt or shipped_drafter(engine)
    d = DSparkDrafter.load(ckpt, engine)
    sps = None
    if policy.startswith(("dspark", "dsd")):
        from agentmill.methods.dspark.costmodel import SPSTable

        sps = SPSTable.load(Path(sps_table)) if sps_table else serve_sps_table(engine, max_num_seqs)
    spec = SpecEngine(engine, DSparkProposer(d, DSparkDrafter.calibration_of(ckpt)), policy=policy, sps=sps,
                      max_num_seqs=max_num_seqs)
    return spec, name


def serve_sps_table(engine, max_num_seqs: int):
    """A quick SPS(B) table for this engine, profiled at start-up and cached per fingerprint (docs/methods/dspark.md, "What it does")."""
    from agentmill.methods.dspark.costmodel import SPSTable, engine_step_fn
    from agentmill.methods.dspark.pipeline import artifacts_root

    path = artifacts_root(engine.fingerprint) / f"sps-serve-t{engine.engine_config.threads}-r{max_num_seqs}.json"
    if path.exists():
        return SPSTable.load(path)
    print("agentmill serve: profiling the SPS(B) cost table (once per machine and thread count) ...", flush=True)
    rs = [r for r in (1, 4, 16) if r <= max(1, max_num_seqs)]
    table = SPSTable.profile(engine_step_fn(engine), {"B": [1, 2, 4, 8, 16, 32, 64, 128], "R": rs, "ctx": [256]},
                             reps=3, warmup=1)
    path.parent.mkdir(parents=True, exist_ok=True)
    table.save(path)
    return table


def api_key_from(args: argparse.Namespace) -> str | None:
    """``--api-key``, else ``$AGENTMILL_API_KEY`` (an empty variable counts as unset); an empty ``--api-key`` is an
    error, not "no key", so a script that lost its secret fails instead of serving openly."""
    if args.api_key is not None:
        if not args.api_key.strip():
            raise ValueError("--api-key must not be empty")
        return args.api_key
    return os.environ.get(API_KEY_ENV) or None


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:          # a host name: it may resolve to anything
        return False


def exposure_warning(host: str, api_key: str | None) -> str | None:
    """The warning printed when the server is reachable beyond this machine without a key, else ``None``."""
    if api_key is not None or is_loopback(host):
        return None
    return (f"agentmill serve: warning: listening on {host} without an API key; anyone who can reach this port can "
            f"use the model. Set --api-key or ${API_KEY_ENV}, or bind 127.0.0.1.")


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    from agentmill.serve import BatchingLoop, create_app

    if not 0 < args.port < 65536:
        raise ValueError(f"--port must be in 1..65535, got {args.port}")
    if args.router:
        return serve_router(args)
    api_key = api_key_from(args)
    spec, name = build_spec_engine(args.model, args.drafter, args.policy, dtype=args.dtype, threads=args.threads,
                                   max_model_len=args.max_model_len, max_num_seqs=args.max_num_seqs,
                                   sps_table=args.sps_table, weights=args.weights)
    loop = BatchingLoop(spec).start()
    app = create_app(loop, served_model_name=args.served_model_name or name, api_key=api_key)
    print(f"agentmill serve: {args.served_model_name or name} on http://{args.host}:{args.port}/v1 "
          f"(policy {spec.policy}, {args.dtype}, {args.weights} weights, {args.threads} thread(s)"
          f"{', API key required' if api_key else ''})", flush=True)
    if (warning := exposure_warning(args.host, api_key)) is not None:
        print(warning, file=sys.stderr, flush=True)
    try:
        uvicorn.run(app, host=args.host, port=args.port, workers=1, log_level="warning")
    finally:
        loop.stop()
    return 0


def serve_router(args: argparse.Namespace) -> int:
    """``--router R``: the learned router of E166 in front of its workers (serve/router_app.py)."""
    import uvicorn

    from agentmill.cli.files import existing_file
    from agentmill.methods.router import Router
    from agentmill.methods.router.workers import make_worker
    from agentmill.serve.router_app import create_router_app

    router = Router.load(existing_file(args.router, "--router"))
    workers = {w: make_worker(w) for w in router.workers}
    for w, fp in router.fingerprints.items():
        if fp and workers[w].fingerprint != fp:
            print(f"agentmill serve: warning: worker {w} differs from the one the router was trained on "
                  f"(fingerprint {workers[w].fingerprint[:24]} vs {fp[:24]})", file=sys.stderr, flush=True)
    name = args.served_model_name or "agentmill-router"
    api_key = api_key_from(args)
    app = create_router_app(router, workers, served_model_name=name, api_key=api_key)
    print(f"agentmill serve: router {name} over {', '.join(router.workers)} on http://{args.host}:{args.port}/v1",
          flush=True)
    if (warning := exposure_warning(args.host, api_key)) is not None:
        print(warning, file=sys.stderr, flush=True)
    import socket

    # Nagle off on the listening socket (accepted connections inherit it on Linux): uvicorn writes the response
    # head and body separately, and with Nagle on a keep-alive client waits ~40 ms for a delayed ACK per request.
    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((args.host, args.port))
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])
    return 0


EXAMPLES = """\
examples:
  agentmill serve
  agentmill serve --policy ngram:4 --max-num-seqs 8 --threads 2
  agentmill serve --host 0.0.0.0 --port 8080    # with the key in $AGENTMILL_API_KEY"""


def register(sub) -> None:
    sp = sub.add_parser("serve", help="OpenAI-compatible server (chat/completions, SSE, continuous batching)",
                        description="Serve a model over the OpenAI API (/v1/chat/completions, /v1/completions, "
                                    "/v1/models) with continuous\nbatching and exact speculative decoding (DSpark "
                                    "by default for the embedded SmolLM2).",
                        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    sp.add_argument("--model", default="hf:smollm2", help="hf:smollm2 (default, the embedded SmolLM2-135M-Instruct), "
                                                          "hf:qwen-coder-0.5b (Qwen2.5-Coder-0.5B-Instruct, "
                                                          "plain decoding), hf:<Llama or Qwen2 folder/gguf>, or "
                                                          "tiny (a small test model)")
    sp.add_argument("--served-model-name", default=None,
                    help="model name that /v1/models lists and responses carry; requests naming another model get "
                         "404 (default: from --model, e.g. smollm2-135m)")
    sp.add_argument("--host", default="127.0.0.1",
                    help="address to bind (default 127.0.0.1: this machine only; 0.0.0.0 exposes the server)")
    sp.add_argument("--port", type=int, default=8000, help="TCP port, 1-65535 (default 8000)")
    sp.add_argument("--max-num-seqs", type=int, default=16,
                    help="most requests decoded together in one batch; later ones wait (default 16)")
    sp.add_argument("--max-model-len", type=int, default=2048,
                    help="longest sequence a request may reach, prompt plus generated tokens (default 2048)")
    sp.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                    help="dtype of weights, activations and KV cache (default float32)")
    sp.add_argument("--weights", choices=("dense", "int8"), default="dense",
                    help="weights of the dense products: dense (in --dtype) or int8 (float32 only; ~1.5x faster decode "
                         "steps, flatter in the verify length, but not lossless against float32: mean KL 0.025 nats, "
                         "top-1 agreement 0.93 on SmolLM2; benchmarks/engine_weights.py) (default dense)")
    sp.add_argument("--threads", type=int, default=1,
                    help="torch CPU threads of the model's forward passes (default 1)")
    sp.add_argument("--drafter", default="auto",
                    help="auto (DSpark for hf:smollm2, none otherwise), dspark (the shipped drafter), a drafter "
                         "checkpoint PATH, ngram (prompt lookup) or none")
    sp.add_argument("--policy", default="auto",
                    help="verify-length policy: auto, off, fixed:K, threshold:T, dsd, dspark, dspark-async[:S]; "
                         "ngram:K = the n-gram drafter verified K at a time")
    sp.add_argument("--sps-table", default=None, help="SPS(B) cost table JSON (profiled at start-up if absent)")
    sp.add_argument("--router", default=None,
                    help="serve a learned router (JSON from agentmill router train) in front of its workers instead "
                         "of one model")
    sp.add_argument("--api-key", default=None,
                    help=f"require 'Authorization: Bearer KEY' on /v1 (default: ${API_KEY_ENV}, else no key)")
    sp.set_defaults(fn=cmd_serve)
