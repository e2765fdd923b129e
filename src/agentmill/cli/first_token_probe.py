"""``agentmill probe``: the first-token probe toolkit on the refusal organisms — train and validate an organism,
sample and label rollouts, relabel them with other judges, extract their activations to an on-disk store, fit
probes by position and layer (on fresh samples or on a store), run prefix-freeze resampling, and probe the synthetic
twin (docs/methods/first_token_probe.md). A thin face over
``agentmill.methods.first_token_probe``.

Exit codes: 0 ok; 2 bad input; 3 precondition not met (an unvalidated organism without --allow-unvalidated,
degenerate labels)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

EXAMPLES = """examples:
  agentmill probe fit --variant locked --positions think_open,first_generated --k 2
  agentmill probe fit --acts acts-train/ --acts acts-test/ --positions think_open
  agentmill probe organism validate /tmp/organism-d --n-per-cell 40
"""

PRECONDITION_EXIT = 3


def _organism(args: argparse.Namespace):
    from agentmill.methods.first_token_probe.organism import OrganismNotValidated, load_organism

    try:
        lm, card = load_organism(args.variant, Path(args.organism) if args.organism else None,
                                 allow_unvalidated=args.allow_unvalidated)
    except FileNotFoundError as e:
        raise ValueError(str(e)) from None
    except OrganismNotValidated as e:
        print(f"agentmill probe: precondition not met: {e}")
        return None, None
    stamp = "" if card.validated else "  [UNVALIDATED: numbers stamped, not claims]"
    print(f"organism {card.name}: gates {card.gates} validated={card.validated}{stamp}")
    return lm, card


def _counts(args: argparse.Namespace) -> dict[str, int]:
    return {"C": args.n_c, "N": args.n_n, "B": args.n_b, "D": args.n_d}


def cmd_organism_show(args: argparse.Namespace) -> int:
    from agentmill.methods.first_token_probe.organism import OrganismCard, shipped_dir

    from agentmill.methods.first_token_probe.organism_smollm2 import CARD_FILE

    path = Path(args.organism) if args.organism else shipped_dir(args.variant)
    if (path / CARD_FILE).exists():  # a SmolLM2 organism (LoRA adapter directory)
        card = json.loads((path / CARD_FILE).read_text())
        print(json.dumps({k: v for k, v in card.items() if k != "losses"}, indent=1, sort_keys=True))
        return 0
    if not (path / "card.json").exists():
        raise ValueError(f"no organism card at {path}")
    print(json.dumps(OrganismCard.load(path).__dict__, indent=1, sort_keys=True))
    return 0


def cmd_organism_train(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from agentmill.methods.first_token_probe.config import OrganismConfig
    from agentmill.methods.first_token_probe.organism import train_organism

    if args.base == "smollm2":
        from agentmill.methods.first_token_probe import organism_smollm2 as S

        cfg = S.SmolOrganismConfig(seed=args.seed)
        d, now = S.obtain(args.variant, cfg, progress=lambda p: print(
            f"step {p['step']}/{p['steps']} loss {p['loss']:.4f} {p['seconds']:.0f}s", flush=True))
        print(f"{'trained' if now else 'found cached'} SmolLM2 organism {d}; validate with: "
              f"agentmill probe organism validate {d}")
        return 0
    if args.out is None:
        raise ValueError("--out is required for a tiny organism")
    out = Path(args.out)
    if out.exists() and any(out.iterdir()):
        raise ValueError(f"--out {out} is not empty: trained organisms go to new directories")
    cfg = replace(OrganismConfig(), steps=args.steps, seed=args.seed)
    card = train_organism(args.variant, out, cfg, log=print)
    print(f"trained {card.name} in {card.train_seconds} s, final loss {card.final_loss:.4f}; "
          f"validate with: agentmill probe organism validate {out}")
    return 0


def cmd_organism_validate(args: argparse.Namespace) -> int:
    from agentmill.methods.first_token_probe.organism import validate_organism

    from agentmill.methods.first_token_probe import organism_smollm2 as S

    path = Path(args.dir)
    if (path / S.CARD_FILE).exists():  # a SmolLM2 organism: R1–R6 gated, R7 (base model on C) reported
        c = S.validate(path, n_per_cell=args.n_per_cell, seed=args.seed)
        for k, v in c["gates"].items():
            print(f"  {k}: {v:.3f}  {'pass' if c['gate_pass'][k] else 'FAIL'}")
        print(f"  R7 (base SmolLM2, refusal on C; reported): {c['R7'].get('R7')}")
        print(f"validated: {c['validated']}")
        return 0 if c["validated"] else PRECONDITION_EXIT
    if not (path / "card.json").exists():
        raise ValueError(f"{path} holds no organism (card.json missing)")
    card = validate_organism(path, n_per_cell=args.n_per_cell, seed=args.seed)
    for k, v in card.gates.items():
        print(f"  {k}: {v:.3f}  {'pass' if card.gate_pass[k] else 'FAIL'}")
    print(f"validated: {card.validated}")
    return 0 if card.validated else PRECONDITION_EXIT


def cmd_sample(args: argparse.Namespace) -> int:
    from agentmill.core.records import write_jsonl_atomic
    from agentmill.methods.first_token_probe.core import organism_rollouts

    lm, _ = _organism(args)
    if lm is None:
        return PRECONDITION_EXIT
    rolls = organism_rollouts(lm, args.split, _counts(args), k=args.k, k_contested=args.k_contested, seed=args.seed)
    rows = [{"rollout_id": r.key, "template_id": r.item.template_id, "category": r.item.category, "q": r.item.q,
             "split": r.item.split, "lm_spec": lm.spec, "prompt_ids": r.prompt_ids, "sampled_ids": r.sampled_ids,
             "text": r.text, "finish": r.finish, "labels": r.labels, "vote": r.outcome, "truth": r.truth,
             "sentence_roles": list(r.parsed.roles)} for r in rolls]
    write_jsonl_atomic(Path(args.out), rows)
    votes = [r.outcome for r in rolls if r.outcome is not None]
    print(f"{len(rolls)} rollouts -> {args.out}; refuse share {sum(votes)}/{len(votes)}; "
          f"unfinished/abstained {len(rolls) - len(votes)}")
    return 0


def cmd_fit(args: argparse.Namespace) -> int:
    from agentmill.methods.first_token_probe.config import ProbeConfig
    from agentmill.methods.first_token_probe.core import baselines, organism_rollouts, probe_study

    acts = None
    if args.acts:  # a store written by `probe extract`: no model, no sampling
        from agentmill.methods.first_token_probe.store import load_train_test, select_positions

        train, test, a_tr, a_te, manifest = load_train_test(args.acts)
        positions = ([p.strip() for p in args.positions.split(",") if p.strip()] if args.positions
                     else list(a_tr.positions))
        acts = (select_positions(a_tr, positions), select_positions(a_te, positions))
        lm = None
        print(f"store of {manifest['model']}: {len(train)} probe_train + {len(test)} probe_test rollouts, "
              f"layers {manifest['layers']}")
    else:
        lm, _ = _organism(args)
        if lm is None:
            return PRECONDITION_EXIT
        positions = [p.strip() for p in (args.positions or "think_open,first_generated").split(",") if p.strip()]
        kw = {"k": args.k, "k_contested": args.k_contested, "seed": args.seed}
        train = organism_rollouts(lm, "probe_train", _counts(args), **kw)
        test = organism_rollouts(lm, "probe_test", _counts(args), **kw)
    from agentmill.methods.first_token_probe.probes import DegenerateLabels

    try:
        res = probe_study(lm, train, test, positions=positions, label_source=args.labels,
                          cfg=ProbeConfig(n_shuffles=args.shuffles, seed=args.seed), acts=acts)
    except DegenerateLabels as e:
        print(f"agentmill probe: precondition not met: {e}")
        return PRECONDITION_EXIT
    g = res.grid
    print(f"labels: {args.labels}; train {g.n_train}, test {g.n_test}; dropped {res.dropped}")
    print("position        " + " ".join(f"L{li:<5d}" for li in g.layers) + "  l*")
    for p, pos in enumerate(g.positions):
        print(f"{pos:15s} " + " ".join(f"{a:.3f} " for a in g.auroc[p]) + f"  {g.best_layer[pos]}")
    if "think_open" in positions:
        print("baselines:", {k: round(v, 3) for k, v in baselines(res).items()})
    return 0


EXTRACT_EXAMPLES = """examples:
  agentmill probe extract rollouts.jsonl --positions think_open,first_generated,frac:0:1:0.05 --layers all --out acts/ --allow-unvalidated
  agentmill probe extract train.jsonl --positions think_open,frac:0.5 --layers 1,2,3 --out acts-train/ --allow-unvalidated
  agentmill probe fit --acts acts-train/ --acts acts-test/ --labels vote
"""


def cmd_extract(args: argparse.Namespace) -> int:
    """Rollouts (``probe sample --out``) -> an activation store: hidden states at the named positions and layers
    from one teacher-forced pass per batch on the model that sampled them."""
    from agentmill.methods.first_token_probe.store import extract, parse_layers, parse_positions, read_rollout_rows

    positions = parse_positions(args.positions)  # bad specs exit 2 before any model loads
    lm, _ = _organism(args)
    if lm is None:
        return PRECONDITION_EXIT
    vocab = getattr(getattr(lm, "cfg", None), "vocab_size", None)
    rows = read_rollout_rows(args.rollouts, vocab=vocab, max_positions=getattr(lm, "max_positions", None))
    other = next((r for r in rows if r.get("lm_spec") not in (None, lm.spec)), None)
    if other is not None:
        raise ValueError(f"{args.rollouts}: line {other['_line']}: a rollout of {other['lm_spec']}, not of {lm.spec}: "
                         "activations must come from the model that sampled it")
    layers = parse_layers(args.layers, lm.num_layers + 1)
    from agentmill.methods.first_token_probe.capture import PositionError
    from agentmill.methods.first_token_probe.store import StoreError

    try:
        path = extract(lm, rows, positions, layers, args.out, source=str(args.rollouts), batch_size=args.batch_size)
    except PositionError as e:
        raise StoreError(f"{args.rollouts}: {e}") from None
    from agentmill.methods.first_token_probe.store import read_store

    acts, _, m = read_store(path.parent)
    present = acts.mask.mean(0)
    size = sum((path.parent / sh["file"]).stat().st_size for sh in m["shards"])
    print(f"{m['n']} rollouts x {len(positions)} positions x {len(layers)} layers x d={m['hidden_size']} "
          f"(float16, {size / 1e6:.2f} MB in {len(m['shards'])} shard(s)) -> {path.parent}")
    missing = [f"{p} {1 - f:.0%}" for p, f in zip(positions, present) if f < 1]
    if missing:
        print("missing (NaN rows: trace too short or no closer): " + ", ".join(missing))
    return 0


def cmd_freeze(args: argparse.Namespace) -> int:
    from agentmill.methods.first_token_probe.config import FreezeConfig
    from agentmill.methods.first_token_probe.freeze import prefix_freeze
    from agentmill.methods.first_token_probe.prompts import sample_prompts
    from agentmill.methods.first_token_probe.sampling import sample_rollouts

    lm, _ = _organism(args)
    if lm is None:
        return PRECONDITION_EXIT
    items = sample_prompts(args.split, {"D": 2 * args.traces}, seed=args.seed)
    rolls = [r for r in sample_rollouts(lm, items, k=1, seed=args.seed) if r.outcome is not None][: args.traces]
    cfg = FreezeConfig(resamples=args.resamples, lam=args.lam)
    for i, r in enumerate(rolls):
        c = prefix_freeze(lm, r, cfg=cfg, seed=args.seed, rollout_id=i)
        curve = " ".join(f"{p.sentence}:{p.A:.2f}" for p in c.points)
        print(f"{r.key} q={r.item.q} outcome={c.base_outcome} site={r.parsed.site} lock={c.lock_sentence}  {curve}")
    return 0


def cmd_twin(args: argparse.Namespace) -> int:
    from agentmill.methods.first_token_probe.config import ProbeConfig
    from agentmill.methods.first_token_probe.probes import fit_probes
    from agentmill.methods.first_token_probe.synthetic import SyntheticTwin
    from agentmill.methods.first_token_probe.valley import valley_depth

    fr = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
    tw = SyntheticTwin(n_layers=3, d=32, onset=1, profile=args.profile, snr=args.snr)
    Htr, ytr, gtr, ptr = tw.sample(args.prompts // 2, 2, fr, seed=args.seed)
    Hte, yte, gte, _ = tw.sample(args.prompts // 2, 2, fr, seed=args.seed + 1, group_offset=1)
    grid = fit_probes(Htr, ytr, gtr, ptr, Hte, yte, gte, positions=[f"frac:{f}" for f in fr], layers=[0, 1, 2],
                      cfg=ProbeConfig(C_grid=(1.0,), n_shuffles=0, bootstrap=10, min_per_class=2),
                      shuffle_cells=False)
    import numpy as np

    S = np.stack([grid.fits[(p, 2)].test_scores for p in range(len(fr))], 1)
    curve, est = valley_depth(S, yte, gte, fr, n_boot=500, seed=args.seed)
    print(f"twin profile {args.profile}: AUROC by fraction {[round(a, 3) for a in curve]}; valley depth {est.fmt()}")
    return 0


VALLEY_EXAMPLES = """examples:
  agentmill probe valley --variant locked --allow-unvalidated --plot valley.png
  agentmill probe valley --variant locked --allow-unvalidated --train train.jsonl --test test.jsonl --labels truth
  agentmill probe valley --variant locked --allow-unvalidated --fractions 0,0.1,0.3,0.5,0.7,0.9,1
"""


def cmd_valley(args: argparse.Namespace) -> int:
    """Separability by trace fraction at l*(think_open): sample probe_train/probe_test rollouts (or read them),
    print the curve and the valley depth, optionally plot it."""
    from agentmill.methods.first_token_probe.core import organism_rollouts
    from agentmill.methods.first_token_probe.probes import DegenerateLabels
    from agentmill.methods.first_token_probe.relabel import load_rollout_rows, rows_to_rollouts
    from agentmill.methods.first_token_probe.valley import organism_valley, plot_valley

    try:
        fractions = [float(x) for x in args.fractions.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--fractions {args.fractions!r}: expected comma-separated numbers in [0, 1]") from None
    if bool(args.train) != bool(args.test):
        raise ValueError("--train and --test go together (the rollouts files of two probe sample runs)")
    lm, _ = _organism(args)
    if lm is None:
        return PRECONDITION_EXIT
    if args.train:
        sets = []
        for path in (args.train, args.test):
            rows = load_rollout_rows(path)
            other = sorted({str(r.get("lm_spec")) for r in rows} - {lm.spec})
            if other:
                raise ValueError(f"{path}: rollouts of {other}, not of {lm.spec}: activations must come from the "
                                 "model that sampled them")
            sets.append(rows_to_rollouts(rows, where=path))
        train, test = sets
    else:
        kw = {"k": args.k, "k_contested": args.k_contested, "seed": args.seed}
        train = organism_rollouts(lm, "probe_train", _counts(args), **kw)
        test = organism_rollouts(lm, "probe_test", _counts(args), **kw)
    try:
        curve = organism_valley(lm, train, test, fractions=fractions, label_source=args.labels,
                                min_per_class=args.min_per_class, n_boot=args.bootstrap, seed=args.seed)
    except DegenerateLabels as e:
        print(f"agentmill probe: precondition not met: {e}")
        return PRECONDITION_EXIT
    print(f"labels: {args.labels}; train {curve.n_train}, test {curve.n_test}; layer l* = {curve.layer} "
          f"(think_open AUROC {curve.think_open_auroc:.3f})")
    print("fraction  " + " ".join(f"{f:6.2f}" for f in curve.fractions))
    print("AUROC     " + " ".join(f"{a:6.3f}" for a in curve.auroc))
    print(f"valley depth D = {curve.depth.fmt()}  (min of the ends minus the minimum over φ in [0.3, 0.7]; "
          "template bootstrap)")
    if args.plot:
        print(f"wrote {plot_valley(curve, args.plot, title=f'{lm.spec}, labels {args.labels}')}")
    return 0


LABEL_EXAMPLES = """examples:
  agentmill probe label rollouts.jsonl --judge rule:lexicon_a --judge classifier:bow --out relabelled.jsonl
  agentmill probe label rollouts.jsonl --judge rule:regex_b --judge lm:openai:M@http://127.0.0.1:8000/v1 --recording judge.jsonl --replay-mode record --out relabelled.jsonl
  agentmill probe label rollouts.jsonl --judge rule:lexicon_a --judge lm:openai:M --recording judge.jsonl --out relabelled.jsonl
"""


def cmd_label(args: argparse.Namespace) -> int:
    """Relabel a rollouts file with the chosen judges and their vote (exit 3 when the vote has one class only)."""
    from agentmill.core.records import write_jsonl_atomic
    from agentmill.lm.replay import ReplayMiss
    from agentmill.methods.first_token_probe.judges import DEFAULT_ENSEMBLE, make_judge
    from agentmill.methods.first_token_probe.relabel import load_rollout_rows, relabel

    rows = load_rollout_rows(args.rollouts)
    names = args.judge or list(DEFAULT_ENSEMBLE)
    if args.recording and not any(n.startswith("lm:") for n in names):
        raise ValueError("--recording is for lm: judges; no --judge lm:<spec> was given")
    judges = [make_judge(n, recording=args.recording, replay_mode=args.replay_mode) for n in names]
    try:
        res = relabel(rows, judges, rule=args.vote)
    except ReplayMiss as e:
        raise ValueError(str(e)) from None
    write_jsonl_atomic(Path(args.out), res.rows)
    vc = res.vote_counts
    print(f"{len(res.rows)} rollouts -> {args.out}; vote ({args.vote}): refuse {vc['refuse']}, comply "
          f"{vc['comply']}, abstain {vc['abstain']}; unfinished {res.unfinished} (no label)")
    for s in res.judges:
        extra = []
        if s.agree_truth is not None:
            extra.append(f"agrees with truth {s.agree_truth[0]}/{s.agree_truth[1]}")
        if s.agree_rule is not None:
            extra.append(f"with the first rule judge {s.agree_rule[0]}/{s.agree_rule[1]}")
        if s.status is not None:
            extra.append("replies " + ", ".join(f"{k} {v}" for k, v in s.status.items()))
        flag = "  UNRELIABLE (abstains on > 10%)" if s.unreliable else ""
        print(f"  {s.id}: refuse {s.refuse}, comply {s.comply}, abstain {s.abstain} ({s.abstain_share:.0%})"
              f"{'; ' + '; '.join(extra) if extra else ''}{flag}")
    for j in judges:
        lm = getattr(j, "lm", None)
        if hasattr(lm, "replayed"):
            print(f"  {j.id}: {lm.replayed} call(s) replayed, {lm.recorded} recorded ({lm.path})")
    if res.degenerate:
        print(f"agentmill probe: precondition not met: {res.degenerate} (labels written to {args.out})")
        return PRECONDITION_EXIT
    return 0


EXPORT_EXAMPLES = """examples:
  agentmill probe export --inspect --in rollouts.jsonl --out rollouts.eval
  agentmill probe export --inspect --in rollouts.jsonl --out rollouts.json --decode none
"""


def _prompt_decoder(spec: str):
    """A function decoding prompt token ids with the model ``spec`` names (the shipped organisms by name, any other
    loadable LM spec), or None with a warning when it cannot be loaded."""
    import sys

    from agentmill.methods.first_token_probe.organism import load_organism, organism_name

    try:
        for variant in ("locked", "deliberative"):
            if spec == f"tiny:{organism_name(variant)}":
                return load_organism(variant, allow_unvalidated=True)[0].decode  # its tokenizer only: no claim
        from agentmill.lm import load_lm

        lm = load_lm(spec)
        if hasattr(lm, "decode"):
            return lm.decode
    except Exception as e:  # noqa: BLE001 - any load failure: export without prompt text, and say so
        print(f"warning: cannot load {spec} to decode the prompts ({type(e).__name__}: {e}); exporting without "
              "prompt text (--decode none)", file=sys.stderr)
        return None
    print(f"warning: {spec} has no decode(); exporting without prompt text", file=sys.stderr)
    return None


def cmd_export(args: argparse.Namespace) -> int:
    """Rollouts -> one Inspect eval log (needs the 'inspect' extra): one sample per rollout, judge labels as scores."""
    import sys

    if not args.inspect:
        raise ValueError("choose the export format: --inspect (an Inspect eval log) is the one there is")
    from agentmill.methods.first_token_probe.inspect_export import export_inspect, load_rollouts

    decode = None
    if args.decode == "auto":
        specs = sorted({str(r.get("lm_spec") or "") for r in load_rollouts(args.src)} - {""})
        if len(specs) == 1:
            decode = _prompt_decoder(specs[0])
        else:
            print(f"warning: rollouts of {len(specs)} models ({specs}): exporting without prompt text",
                  file=sys.stderr)
    path, log = export_inspect(args.src, args.out, decode=decode)
    print(f"wrote {path}: {len(log.samples)} rollouts (Inspect log, {path.suffix[1:]}); refuse share by score "
          "(Inspect mean over scored samples):")
    for sc in log.results.scores:
        print(f"  {sc.name}: {sc.metrics['mean'].value:.3f} over {sc.scored_samples} scored, "
              f"{sc.unscored_samples} unscored")
    return 0


def _organism_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--variant", default="locked", choices=("locked", "deliberative"),
                   help="which shipped tiny organism (default locked)")
    p.add_argument("--organism", default=None, help="an organism directory instead of the shipped one")
    p.add_argument("--allow-unvalidated", action="store_true",
                   help="use an organism whose gates did not pass (every number is stamped, never a claim)")
    p.add_argument("--seed", type=int, default=0, help="seed of prompts and sampling (default 0)")


def _count_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--n-c", type=int, default=8, help="C (private data) prompts per split (default 8)")
    p.add_argument("--n-n", type=int, default=8, help="N (near-miss) prompts per split (default 8)")
    p.add_argument("--n-b", type=int, default=6, help="B (benign) prompts per split (default 6)")
    p.add_argument("--n-d", type=int, default=6, help="D (contested) prompts per split (default 6)")
    p.add_argument("--k", type=int, default=2, help="samples per C/N/B prompt (default 2)")
    p.add_argument("--k-contested", type=int, default=4, help="samples per D prompt (default 4)")


def register(sub) -> None:
    sp = sub.add_parser("probe", help="first-token safety probes on refusal model organisms (E171)",
                        description="First-token probes: is the refuse/comply outcome readable before the "
                                    "thinking?\nProbes by position and layer with controls, prefix-freeze "
                                    "resampling, and the tiny refusal organisms.",
                        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    ps = sp.add_subparsers(dest="probe_cmd", required=True,
                           help="the subcommand ('agentmill probe SUBCOMMAND -h' shows its flags)")
    org = ps.add_parser("organism", help="train, validate or show a tiny refusal organism")
    os_ = org.add_subparsers(dest="organism_cmd", required=True, help="organism subcommand")
    o = os_.add_parser("show", help="print an organism's card (recipe, gates, validated)")
    o.add_argument("--variant", default="locked", choices=("locked", "deliberative"),
                   help="which shipped organism (default locked)")
    o.add_argument("--organism", default=None, help="an organism directory instead of the shipped one")
    o.set_defaults(fn=cmd_organism_show)
    o = os_.add_parser("train", help="train a tiny organism from scratch (minutes on one core), or the SmolLM2 "
                                     "organism (LoRA, ≈ 33–41 min) with --base smollm2")
    o.add_argument("--variant", required=True, choices=("locked", "deliberative"), help="trace grammar variant")
    o.add_argument("--base", default="tiny", choices=("tiny", "smollm2"),
                   help="tiny: a byte-level TinyLM from scratch into --out; smollm2: a LoRA on SmolLM2-135M into "
                        "the content-addressed cache (resumes a killed run; --out and --steps unused)")
    o.add_argument("--out", default=None, help="new (empty) directory for the tiny model and its card")
    o.add_argument("--steps", type=int, default=1000, help="optimiser steps (default 1000, the shipped recipe)")
    o.add_argument("--seed", type=int, default=0, help="seed of data, initialisation and batches (default 0)")
    o.set_defaults(fn=cmd_organism_train)
    o = os_.add_parser("validate", help="measure gates R1–R6 and write them into the card (exit 3 if any fails)")
    o.add_argument("dir", help="the organism directory (a tiny organism, or a SmolLM2 organism's adapter directory)")
    o.add_argument("--n-per-cell", type=int, default=40, help="rollouts per gate cell (default 40)")
    o.add_argument("--seed", type=int, default=1, help="seed of the validation prompts (default 1)")
    o.set_defaults(fn=cmd_organism_validate)
    s = ps.add_parser("sample", help="sample and label rollouts of an organism to JSONL")
    _organism_flags(s)
    _count_flags(s)
    s.add_argument("--split", default="probe_test", choices=("organism_train", "probe_train", "probe_test"),
                   help="prompt split (default probe_test)")
    s.add_argument("--out", required=True, help="JSONL file for the rollouts")
    s.set_defaults(fn=cmd_sample)
    f = ps.add_parser("fit", help="sample probe_train/probe_test rollouts and fit probes by position and layer")
    _organism_flags(f)
    _count_flags(f)
    f.add_argument("--positions", default="",
                   help="comma-separated positions: think_open, prompt_last, first_generated, frac:φ, think_close, "
                        "answer_first, abs:i (default think_open,first_generated; with --acts, the store's)")
    f.add_argument("--acts", action="append", default=[],
                   help="an activation store written by probe extract, repeatable: fit on its rows (split by their "
                        "probe_train/probe_test split) instead of sampling; needs no model")
    f.add_argument("--labels", default="vote", help="label source: vote, truth or a judge id (default vote)")
    f.add_argument("--shuffles", type=int, default=5, help="shuffled-label refits per cell (default 5)")
    f.set_defaults(fn=cmd_fit)
    x = ps.add_parser("extract", help="write the activations of sampled rollouts (probe sample --out) at named "
                                      "positions and layers to an on-disk store that probe fit --acts reads",
                      epilog=EXTRACT_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    x.add_argument("rollouts", help="the rollouts JSONL written by probe sample --out (or probe label --out)")
    _organism_flags(x)
    x.add_argument("--positions", default="think_open,first_generated",
                   help="comma-separated positions: think_open, prompt_last, first_generated, frac:φ, frac:a:b:step "
                        "(a range), think_close, answer_first, abs:i (default think_open,first_generated)")
    x.add_argument("--layers", default="all",
                   help="hidden-state indices, comma-separated, or all (0 = embeddings; default all)")
    x.add_argument("--out", required=True, help="new (empty) directory for manifest.json, rollouts.jsonl and the "
                                                "float16 .npz shards")
    x.add_argument("--batch-size", type=int, default=16, help="rollouts per teacher-forced pass (default 16)")
    x.set_defaults(fn=cmd_extract)
    z = ps.add_parser("freeze", help="prefix-freeze resampling of contested traces (agreement by sentences kept)")
    _organism_flags(z)
    z.add_argument("--split", default="probe_test", choices=("organism_train", "probe_train", "probe_test"),
                   help="prompt split of the contested prompts (default probe_test)")
    z.add_argument("--traces", type=int, default=4, help="contested base traces (default 4)")
    z.add_argument("--resamples", type=int, default=4, help="continuations per freeze point (default 4)")
    z.add_argument("--lam", type=float, default=0.9, help="lock threshold λ (default 0.9)")
    z.set_defaults(fn=cmd_freeze)
    t = ps.add_parser("twin", help="probe the synthetic twin (no model): AUROC by trace fraction and valley depth")
    t.add_argument("--profile", default="valley", choices=("flat", "valley", "ramp"),
                   help="planted position profile (default valley)")
    t.add_argument("--prompts", type=int, default=200, help="twin prompts, K = 2 each (default 200)")
    t.add_argument("--snr", type=float, default=1.5, help="signal-to-noise of the planted signal (default 1.5)")
    t.add_argument("--seed", type=int, default=0, help="seed (default 0)")
    t.set_defaults(fn=cmd_twin)
    va = ps.add_parser("valley", help="separability by trace fraction (the valley): probe AUROC per fraction at "
                                      "the think_open layer, valley depth with CI, optional plot",
                       epilog=VALLEY_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    _organism_flags(va)
    _count_flags(va)
    va.add_argument("--train", default="", help="a rollouts JSONL (probe sample --split probe_train, or its "
                                                "probe label output) instead of sampling; needs --test")
    va.add_argument("--test", default="", help="the test rollouts JSONL (probe sample --split probe_test); "
                                               "needs --train")
    va.add_argument("--fractions", default="0,0.2,0.4,0.6,0.8,1.0",
                    help="comma-separated trace fractions φ; must include points in [0.3, 0.7] and 1.0 "
                         "(default 0,0.2,0.4,0.6,0.8,1.0)")
    va.add_argument("--labels", default="vote", help="label source: vote, truth or a judge id (default vote)")
    va.add_argument("--min-per-class", type=int, default=20,
                    help="fewest train rollouts per class to fit a probe (default 20); fewer exits 3")
    va.add_argument("--bootstrap", type=int, default=1000, help="template bootstrap resamples of the depth "
                                                                "(default 1000)")
    va.add_argument("--plot", default="", help="write the valley plot to this PNG")
    va.set_defaults(fn=cmd_valley)
    lb = ps.add_parser("label", help="relabel sampled rollouts (probe sample --out) with chosen judges and their "
                                     "vote; lm: judges can record and replay their calls",
                       epilog=LABEL_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    lb.add_argument("rollouts", help="the rollouts JSONL written by probe sample --out")
    lb.add_argument("--judge", action="append", default=[],
                    help="a judge, repeatable: rule:lexicon_a, rule:regex_b, classifier:bow, rule:private_keyword, "
                         "or lm:<model spec> (an LM asked for strict JSON with a quote; default: the three-judge "
                         "ensemble rule:lexicon_a, rule:regex_b, classifier:bow)")
    lb.add_argument("--vote", default="majority", choices=("majority", "unanimous", "any"),
                    help="how the judges' labels combine: majority of non-abstaining judges (a tie abstains), "
                         "unanimous, or any refusal (default majority)")
    lb.add_argument("--recording", default=None,
                    help="a call recording (JSONL) for the lm: judges: record their calls to it or answer them "
                         "from it (see --replay-mode)")
    lb.add_argument("--replay-mode", default="replay", choices=("replay", "record", "record-missing"),
                    help="with --recording: replay answers from the file and never loads the model (a miss is an "
                         "error), record asks the model and appends, record-missing replays what the file holds "
                         "and records the rest (default replay)")
    lb.add_argument("--out", required=True, help="JSONL file for the relabelled rollouts (same rows, new labels "
                                                 "and vote)")
    lb.set_defaults(fn=cmd_label)
    e = ps.add_parser("export", help="write sampled rollouts (probe sample --out) as an Inspect eval log: one "
                                     "sample per rollout, the judges' labels, vote and truth as scores",
                      epilog=EXPORT_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    e.add_argument("--inspect", action="store_true",
                   help="write an Inspect eval log through inspect_ai.log (the one format; needs the 'inspect' "
                        "extra: pip install 'agentmill[inspect]')")
    e.add_argument("--in", dest="src", required=True, help="the rollouts JSONL written by probe sample --out")
    e.add_argument("--out", required=True, help="the log file: NAME.eval (Inspect's zip log) or NAME.json")
    e.add_argument("--decode", default="auto", choices=("auto", "none"),
                   help="prompt text for the user turn: auto decodes the stored prompt token ids with the "
                        "rollouts' own model (default); none keeps only the ids")
    e.set_defaults(fn=cmd_export)
