"""``agentmill dspark``: build, train, calibrate and export the DSpark drafter (docs/methods/dspark.md).

    agentmill dspark train [--model smollm2|tiny] [--steps 1200] [--prompts 480] [--markov-rank 64]
                           [--draft-vocab 8192|full] [--out CKPT]
        the whole pipeline with every stage cached: the target's own answers to templated training prompts, the
        feature cache, training (resumable), STS calibration on held-out prompt families
    agentmill dspark gen-data | cache | calibrate | export     one stage at a time
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

LAYERS = "1,10,19,28"


def _layers(s: str) -> tuple[int, ...]:
    try:
        out = tuple(int(x) for x in s.split(","))
    except ValueError:
        raise ValueError(f"--layers must be comma-separated integers, got {s!r}") from None
    if not out:
        raise ValueError("--layers must name at least one layer")
    return out


def _bar(total: int, desc: str):
    """A started bar and a function that advances it by k."""
    from agentmill.cli.bars import started_bar

    prog, task = started_bar(total, desc)
    return prog, (lambda k: prog.advance(task, k))


def _positive(name: str, v: int) -> int:
    if v < 1:
        raise ValueError(f"--{name} must be >= 1, got {v}")
    return v


def stage_corpus(engine, n: int, max_new: int, temperature: float, out: Path, seed: int = 0) -> Path:
    from agentmill.methods.dspark.pipeline import ensure_corpus

    prog, tick = _bar(n, "corpus (target answers)")
    try:
        return ensure_corpus(engine, n, max_new, temperature, out, seed=seed, progress=tick)
    finally:
        prog.stop()


def stage_cache(engine, corpus: Path, out: Path, layers: tuple[int, ...]):
    from agentmill.methods.dspark.data import load_corpus
    from agentmill.methods.dspark.pipeline import ensure_cache

    prog, tick = _bar(len(load_corpus(corpus)), "feature cache")
    try:
        return ensure_cache(engine, corpus, out, layers, progress=tick)
    finally:
        prog.stop()


def stage_train(engine, cache, corpus: Path, out: Path, *, steps: int, markov_rank: int, draft_vocab: str,
                block_size: int, num_layers: int, layers: tuple[int, ...], seed: int = 0, init: Path | None = None):
    from agentmill.methods.dspark.drafter import DraftVocab, DSparkConfig, DSparkDrafter
    from agentmill.methods.dspark.features import token_counts
    from agentmill.methods.dspark.pipeline import describe, pick_mask_token
    from agentmill.methods.dspark.train import TrainConfig, train_drafter

    counts = token_counts(corpus, engine.vocab_size)
    mask = pick_mask_token(engine.tokenizer, counts)
    nv = None if draft_vocab == "full" else int(draft_vocab)
    specials = tuple(int(t) for t in engine.eos_token_ids)
    vocab = DraftVocab.from_counts(counts, nv, specials) if nv else DraftVocab.full(engine.vocab_size)
    cfg = DSparkConfig(block_size=block_size, num_draft_layers=num_layers, target_layer_ids=layers,
                       markov_rank=markov_rank, draft_vocab_size=nv, mask_token_id=mask)
    model = DSparkDrafter.init_for(engine, cfg, vocab, seed=seed)
    if init is not None:
        model.load_state_dict(DSparkDrafter.load(init, engine).state_dict(), strict=False)
    tcfg = TrainConfig(steps=steps, seed=seed)
    work = out.with_name(out.name + ".work")
    prog, tick = _bar(steps, "training")
    t0 = time.perf_counter()
    try:
        last = train_drafter(model, cache, tcfg, work, progress=tick)
    finally:
        prog.stop()
    meta = {"train": {**tcfg.__dict__}, "last_log": last, "seconds": round(time.perf_counter() - t0, 1),
            "cache": cache.meta["key"], "corpus_sequences": cache.n_sequences, **describe(model)}
    model.save(out, train_meta=meta)
    return out


def stage_calibrate(ckpt: Path, *, model_name: str, prompts: int, buckets: list[str], max_new: int,
                    threads: int) -> dict[str, list[float]]:
    from agentmill.lm.engine import SamplingParams
    from agentmill.methods.dspark.calibration import calibrate_sts, confidence_metrics, prefix_labels, survival
    from agentmill.methods.dspark.data import builtin_prompts, chat_ids
    from agentmill.methods.dspark.drafter import DSparkDrafter
    from agentmill.methods.dspark.spec_engine import SpecEngine
    from agentmill.methods.dspark.pipeline import calibration_rounds, tapped_engine
    from agentmill.methods.dspark.proposers import DSparkProposer

    meta = json.loads((ckpt / "config.json").read_text())
    layers = tuple(meta["dspark"]["target_layer_ids"])
    engine = tapped_engine(layers, threads=threads, model=model_name)
    d = DSparkDrafter.load(ckpt, engine)
    g = d.cfg.block_size
    ids = [chat_ids(engine.tokenizer, p.text) for p in builtin_prompts("calib", prompts, seed=1)]
    temps = {"greedy": 0.0, "t0.7": 0.7, "t1.0": 1.0}
    cal, report = {}, {}
    for b in buckets:
        if b not in temps:
            raise ValueError(f"unknown bucket {b!r}; use greedy, t0.7, t1.0")
        spec = SpecEngine(engine, DSparkProposer(d), verify_len=g, max_num_seqs=8, record_rounds=True)
        prog, tick = _bar(prompts * max_new, f"calibration rounds ({b})")
        try:
            rounds = calibration_rounds(spec, ids, SamplingParams(temperature=temps[b], max_tokens=max_new,
                                                                  seed=7, ignore_eos=True), progress=tick)
        finally:
            prog.stop()
        t = calibrate_sts(rounds["conf_logits"], rounds["accepted"])
        y = prefix_labels(rounds["accepted"], g)
        before = confidence_metrics(survival(rounds["conf_logits"]), y)
        after = confidence_metrics(survival(rounds["conf_logits"], t), y)
        cal[b] = t.tolist()
        report[b] = {"rounds": len(y), "tau": float(1 + rounds["accepted"].mean()), "ece_before": before["ece"],
                     "ece_after": after["ece"], "auroc": after["auroc"]}
    (ckpt / "calibration.json").write_text(json.dumps(cal, indent=1))
    (ckpt / "calibration_report.json").write_text(json.dumps(report, indent=1))
    return report


def cmd_train(args: argparse.Namespace) -> int:
    from agentmill.methods.dspark.features import FeatureCache
    from agentmill.methods.dspark.pipeline import artifacts_root, asset_dir, tapped_engine

    layers = _layers(args.layers)
    for name in ("steps", "prompts", "max_new", "block_size", "num_layers"):
        _positive(name.replace("_", "-"), getattr(args, name))
    if args.draft_vocab != "full" and not (args.draft_vocab.isdigit() and int(args.draft_vocab) >= 16):
        raise ValueError(f"--draft-vocab must be 'full' or an integer >= 16, got {args.draft_vocab!r}")
    t0 = time.perf_counter()
    engine = tapped_engine(layers, threads=args.threads, final_hidden=True, model=args.model)
    root = artifacts_root(engine.fingerprint)
    name = f"corpus-train-{args.prompts}x{args.max_new}.jsonl"
    shipped = asset_dir() / name      # the committed corpus of SmolLM2's own answers (token ids only)
    corpus = Path(args.data) if args.data else (shipped if args.model == "smollm2" and shipped.exists()
                                                else root / name)
    if not args.data:
        stage_corpus(engine, args.prompts, args.max_new, args.temperature, corpus)
    cache = FeatureCache.load(Path(args.cache)) if args.cache else stage_cache(
        engine, corpus, root / f"cache-{corpus.stem}", layers)
    out = Path(args.out) if args.out else root / f"drafter-r{args.markov_rank}-s{args.steps}"
    stage_train(engine, cache, corpus, out, steps=args.steps, markov_rank=args.markov_rank,
                draft_vocab=args.draft_vocab, block_size=args.block_size, num_layers=args.num_layers, layers=layers,
                seed=args.seed, init=Path(args.init) if args.init else None)
    del engine
    report = {}
    if args.calib_prompts:
        report = stage_calibrate(out, model_name=args.model, prompts=args.calib_prompts,
                                 buckets=args.buckets.split(","), max_new=args.calib_max_new, threads=args.threads)
    print(json.dumps({"drafter": str(out), "seconds": round(time.perf_counter() - t0, 1), "calibration": report},
                     indent=1))
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    report = stage_calibrate(Path(args.ckpt), model_name=args.model, prompts=_positive("prompts", args.prompts),
                             buckets=args.buckets.split(","), max_new=args.max_new, threads=args.threads)
    print(json.dumps(report, indent=1))
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    from agentmill.methods.dspark.pipeline import export_fp16, tapped_engine

    meta = json.loads((Path(args.ckpt) / "config.json").read_text())
    engine = tapped_engine(tuple(meta["dspark"]["target_layer_ids"]), model=args.model)
    if args.format == "fp16":
        print(export_fp16(Path(args.ckpt), Path(args.out), engine))
    else:
        from agentmill.methods.dspark.export import export_deepspec

        print(export_deepspec(Path(args.ckpt), Path(args.out), engine))
    return 0


EXAMPLES = """\
examples:
  agentmill dspark train --steps 1200 --out drafters/r64
  agentmill dspark calibrate --ckpt drafters/r64 --buckets greedy,t0.7,t1.0
  agentmill dspark export --ckpt drafters/r64 --format deepspec --out drafters/r64-deepspec"""
MODEL_HELP = "target model: smollm2 (the embedded SmolLM2-135M-Instruct, default) or tiny (a small test model)"
BUCKETS_HELP = ("sampling temperatures to calibrate, comma-separated from greedy, t0.7, t1.0 "
                "(default greedy,t1.0)")


def register(sub) -> None:
    sp = sub.add_parser("dspark", help="DSpark drafter: train (whole cached pipeline), calibrate, export",
                        description="DSpark: a small drafter reading the target's hidden states proposes a block of "
                                    "tokens,\nthe target verifies them exactly. Build, calibrate and export the "
                                    "drafter that 'agentmill serve' uses.",
                        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    ds = sp.add_subparsers(dest="dspark_cmd", required=True,
                           help="the subcommand ('agentmill dspark SUBCOMMAND -h' shows its flags)")
    t = ds.add_parser("train", help="corpus → feature cache → training → STS calibration, each stage cached")
    t.add_argument("--model", default="smollm2", choices=("smollm2", "tiny"), help=MODEL_HELP)
    t.add_argument("--prompts", type=int, default=480, help="training prompts (templated, train families; default 480)")
    t.add_argument("--max-new", type=int, default=128,
                   help="tokens the target generates per training prompt (default 128)")
    t.add_argument("--temperature", type=float, default=1.0,
                   help="sampling temperature of the target's training answers (default 1.0)")
    t.add_argument("--data", default=None, help="use this corpus JSONL instead of generating one")
    t.add_argument("--cache", default=None, help="use this feature cache instead of building one")
    t.add_argument("--layers", default=LAYERS,
                   help=f"target layers whose hidden states the drafter reads, comma-separated (default {LAYERS})")
    t.add_argument("--steps", type=int, default=1200, help="training steps (default 1200)")
    t.add_argument("--markov-rank", type=int, default=64,
                   help="rank of the drafter's Markov correction head, 0 = none (default 64)")
    t.add_argument("--draft-vocab", default="8192",
                   help="draft vocabulary: the N most frequent corpus tokens (N >= 16) or 'full' (default 8192)")
    t.add_argument("--block-size", type=int, default=7,
                   help="block size: most tokens drafted per verification round (default 7)")
    t.add_argument("--num-layers", type=int, default=2, help="transformer layers of the drafter (default 2)")
    t.add_argument("--init", default=None, help="start from this drafter checkpoint")
    t.add_argument("--seed", type=int, default=0, help="seed of the drafter's initialisation and training (default 0)")
    t.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2)")
    t.add_argument("--out", default=None,
                   help="drafter checkpoint folder (default: artifacts/dspark/<target>/drafter-r<rank>-s<steps>; "
                        "$AGENTMILL_ARTIFACTS replaces artifacts/)")
    t.add_argument("--calib-prompts", type=int, default=24,
                   help="held-out calibration prompts after training; 0 skips calibration (default 24)")
    t.add_argument("--calib-max-new", type=int, default=96,
                   help="tokens generated per calibration prompt (default 96)")
    t.add_argument("--buckets", default="greedy,t1.0", help=BUCKETS_HELP)
    t.set_defaults(fn=cmd_train)
    c = ds.add_parser("calibrate", help="STS temperatures from full-verification rounds on calib families")
    c.add_argument("--ckpt", required=True,
                   help="drafter checkpoint folder (holds config.json); calibration.json is written into it")
    c.add_argument("--model", default="smollm2", choices=("smollm2", "tiny"), help=MODEL_HELP)
    c.add_argument("--prompts", type=int, default=24, help="held-out calibration prompts (default 24)")
    c.add_argument("--max-new", type=int, default=96, help="tokens generated per calibration prompt (default 96)")
    c.add_argument("--buckets", default="greedy,t1.0", help=BUCKETS_HELP)
    c.add_argument("--threads", type=int, default=2, help="torch CPU threads (default 2)")
    c.set_defaults(fn=cmd_calibrate)
    e = ds.add_parser("export", help="fp16 copy for assets/, or the DeepSpec layout for vLLM/SGLang users")
    e.add_argument("--ckpt", required=True, help="drafter checkpoint folder to export (holds config.json)")
    e.add_argument("--model", default="smollm2", choices=("smollm2", "tiny"), help=MODEL_HELP)
    e.add_argument("--format", choices=("fp16", "deepspec"), default="deepspec",
                   help="deepspec: DeepSpec's checkpoint layout (default); fp16: this project's layout with fp16 "
                        "weights, small enough for assets/")
    e.add_argument("--out", required=True,
                   help="folder the exported drafter is written to (deepspec replaces an existing one)")
    e.set_defaults(fn=cmd_export)
