"""``agentmill constraint-rot``: the ConstraintRot benchmark (E164, arXiv:2606.22528) — catalogue, episodes, runs,
the summariser × actor crossing, the eviction-attack optimiser, the LoRA organism and reports.

A thin face over ``agentmill.methods.constraint_rot``: flags are turned into objects by its ``specs`` module, run
files (episodes, manifest, resume checks) are handled by ``runs``, the long jobs by ``sessions``, and the printed
tables come from ``analysis``. ``agentmill constraint-rot SUBCOMMAND -h`` lists every flag. What each command writes,
when it refuses (exit 2 for bad input, 3 for an unmet precondition) and how LLM summaries and organisms are cached
and gated: docs/methods/constraint_rot.md, "Experiments and commands".
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

SPLITS = ("train", "dev", "test_iid", "test_ood_family")
COUNTERS = ("smollm2", "whitespace")
"""``--counter`` choices (``specs.COUNTERS``; repeated so that building the parser imports no method code)."""
EXIT_BAD_INPUT, EXIT_PRECONDITION, EXIT_CLAIM_FAILED = 2, 3, 4


def _catalogue(path: str | None) -> Any:
    from agentmill.methods.constraint_rot import load_catalogue

    return load_catalogue(Path(path) if path else None)


def cmd_catalogue(args: argparse.Namespace) -> int:
    cat = _catalogue(args.path)
    if args.catalogue_cmd == "validate":
        fams = cat.families()
        kinds = {k: sum(f.kind == k for f in fams) for k in ("soft", "hard")}
        print(json.dumps({"ok": True, "version": cat.version, "sha256": cat.sha256, "families": len(fams),
                          **kinds}, indent=2))
        return 0
    if args.catalogue_cmd == "split":
        table = {s: {k: sorted(f.id for f in cat.families(kind=k, split=s)) for k in ("soft", "hard")}
                 for s in SPLITS}
        print(json.dumps(table, indent=2))
        return 0
    for f in cat.families(kind=args.kind, split=args.split):
        print(f"{f.id:32s} {f.kind:5s} {','.join(f.tools)}")
    return 0


def cmd_pin_hook(args: argparse.Namespace) -> int:
    from agentmill.methods.constraint_rot.pinning.integrations.claude_code import session_start_hook_output
    from agentmill.methods.constraint_rot.specs import load_registry

    print(session_start_hook_output(load_registry(Path(args.registry))))
    return 0


# -- generate --------------------------------------------------------------------------------------------------------
def _csv(value: str, flag: str, allowed: tuple[str, ...]) -> tuple[str, ...]:
    items = tuple(x.strip() for x in value.split(",") if x.strip())
    bad = [x for x in items if x not in allowed]
    if not items or bad:
        raise ValueError(f"{flag}: unknown value(s) {bad or [value]} (choose from {', '.join(allowed)})")
    return items


def cmd_generate(args: argparse.Namespace) -> int:
    from agentmill.core.records import write_text_atomic
    from agentmill.methods.constraint_rot.generate import LOCATIONS, generate_episodes
    from agentmill.methods.constraint_rot.specs import parse_attack, token_counter

    if args.n < 1:
        raise ValueError(f"--n must be >= 1, got {args.n}")
    kinds = _csv(args.kinds, "--kinds", ("soft", "hard"))
    locations = _csv(args.locations, "--locations", LOCATIONS) if args.locations else None
    attack = parse_attack(args.attack, channel=args.channel, position=args.position)
    cat = _catalogue(args.path)
    kw: dict[str, Any] = {"locations": locations} if locations else {}
    eps = generate_episodes(cat, split=args.split, n=args.n, seed=args.seed, kinds=kinds, attack=attack,
                            early_probe=args.early_probe, counter=token_counter(args.counter), **kw)
    write_text_atomic(Path(args.out), "".join(e.to_json() + "\n" for e in eps))
    print(json.dumps({"out": args.out, "episodes": len(eps), "split": args.split, "seed": args.seed,
                      "catalogue_version": cat.version, "catalogue_sha": cat.sha256,
                      "attack": attack.to_dict() if attack else None}, indent=2))
    return 0


# -- run ------------------------------------------------------------------------------------------------------------
def _progress() -> Any:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=Console(stderr=True))  # stdout stays machine-readable JSON


def _bar(title: str) -> Any:
    """A ``progress(total)`` for ``sessions``: a rich bar on stderr whose ``tick(description)`` advances it."""
    import contextlib

    @contextlib.contextmanager
    def progress(total: int) -> Any:
        with _progress() as bar:
            task = bar.add_task(title, total=total)
            yield lambda description: bar.update(task, advance=1, description=description)
    return progress


def cmd_run(args: argparse.Namespace) -> int:
    from agentmill.methods.constraint_rot.prereg import load_prereg
    from agentmill.methods.constraint_rot.runs import (actor_config, check_resume, load_episodes, manifest_path,
                                                       write_manifest)
    from agentmill.methods.constraint_rot.sessions import compactor_entries, provenance, run_conditions
    from agentmill.methods.constraint_rot.specs import (SummariserLM, build_conditions, check_backend,
                                                        episode_counter, open_summariser_lms, organism_refusal,
                                                        parse_actor, parse_compactor, parse_pin, summary_cache_dir)

    check_backend(args.backend)
    build_actor = parse_actor(args.actor, args.seed, dtype=args.dtype, max_new_tokens=args.max_new_tokens,
                              tool_format=args.tool_format, api_key_env=args.api_key_env)
    pins = [parse_pin(p) for p in (args.pin or ["none"])]
    cat = _catalogue(args.path)
    prereg = load_prereg(args.prereg)
    episodes = load_episodes(Path(args.episodes), cat)
    counter_name, counter = episode_counter(episodes)
    lms: dict[str, SummariserLM] = {}

    def build(cache: Any) -> tuple[list[Any], list[Any]]:
        ms = [parse_compactor(c, counter, lms=lms, cache=cache) for c in (args.compactor or [])]
        return ms, build_conditions(args.conditions, ms, pins, args.gate)

    compactors, conds = build(None)  # checks every flag; LLM summaries get their cache once it is opened
    cache_dir = summary_cache_dir(args.summary_cache) if lms else None
    out = Path(args.out)
    if out.exists() and not args.resume:
        raise ValueError(f"--out {out}: exists; pass --resume to continue it or choose a new file")
    old = check_resume(out, cat, prereg) if args.resume else None
    refusal = organism_refusal(args.actor, args.allow_unvalidated)
    if refusal:
        print(refusal, file=sys.stderr)
        return EXIT_PRECONDITION
    actor = build_actor()  # loads the organism / opens the endpoint client only once every flag is valid
    cache = open_summariser_lms(lms, cache_dir)
    if cache is not None:
        compactors, conds = build(cache)
    run = {**provenance(Path(args.episodes), episodes, args.seed), "episode_seeds": sorted({e.seed for e in episodes}),
           "generator_seeds": sorted({e.generator_config.get("seed") for e in episodes}, key=str),
           "actor": getattr(actor, "name", args.actor), "actor_config": actor_config(actor),
           "compactors": compactor_entries(compactors), "pins": pins, "gate": args.gate,
           "conditions": [c.label for c in conds], "counter": counter_name, "resume": bool(args.resume),
           "allow_unvalidated": bool(args.allow_unvalidated), "backend": args.backend, "summariser_lms": sorted(lms),
           "summary_cache": str(cache.root) if cache is not None else None}
    write_manifest(out, old, run, cat, prereg)
    card = getattr(actor, "card", None)
    if card is not None and not card.validated:
        print(f"warning: organism {args.actor} is not validated (gates G1-G6 failed or never run: `agentmill "
              f"constraint-rot organism validate`); claims judged on these rows need a validated organism",
              file=sys.stderr)
    counts = run_conditions(actor, episodes, conds, out, counter=counter, resume=bool(args.resume),
                            progress=_bar("constraint-rot run"))
    summaries = {"summary_cache": {**cache.stats(), "root": str(cache.root)}} if cache is not None else {}
    print(json.dumps({"out": str(out), "manifest": str(manifest_path(out)), **counts, **summaries}, indent=2))
    return 0


# -- cross -----------------------------------------------------------------------------------------------------------
def _flat(groups: list[list[str]] | None, flag: str) -> list[str]:
    items = [x for g in (groups or []) for x in g]
    dup = sorted({x for x in items if items.count(x) > 1})
    if dup:
        raise ValueError(f"{flag}: {dup[0]!r} given twice")
    if len(items) < 2:
        raise ValueError(f"{flag}: the crossing needs at least 2, got {len(items)} (η² needs a 2 x 2 matrix)")
    return items


def cmd_cross(args: argparse.Namespace) -> int:
    from agentmill.core.records import write_json_atomic
    from agentmill.methods.constraint_rot.analysis import crossing_matrix, matrix_lines
    from agentmill.methods.constraint_rot.prereg import load_prereg
    from agentmill.methods.constraint_rot.runs import load_episodes, manifest_path, matrix_path, write_manifest
    from agentmill.methods.constraint_rot.sessions import actor_entries, provenance, run_crossing
    from agentmill.methods.constraint_rot.specs import (SummariserLM, check_backend, episode_counter,
                                                        open_summariser_lms, organism_refusal, parse_actor,
                                                        parse_compactor, summary_cache_dir)

    check_backend(args.backend)
    s_texts = _flat(args.summarisers, "--summarisers")
    a_texts = _flat(args.actors, "--actors")
    if args.B < 1:
        raise ValueError(f"--B must be >= 1, got {args.B}")
    builders = {a: parse_actor(a, args.seed, dtype=args.dtype, max_new_tokens=args.max_new_tokens,
                               tool_format=args.tool_format, api_key_env=args.api_key_env) for a in a_texts}
    cat = _catalogue(args.path)
    prereg = load_prereg(args.prereg)
    episodes = load_episodes(Path(args.episodes), cat)
    counter_name, counter = episode_counter(episodes)
    lms: dict[str, SummariserLM] = {}

    def build(cache: Any) -> dict[str, Any]:
        return {s: parse_compactor(s, counter, lms=lms, cache=cache, flag="--summarisers") for s in s_texts}

    compactors = build(None)
    cache_dir = summary_cache_dir(args.summary_cache) if lms else None
    out = Path(args.out)
    for p in (out, manifest_path(out), matrix_path(out)):
        if p.exists():
            raise ValueError(f"--out {out}: {p.name} exists; choose a new file (summaries are cached, a rerun is "
                             f"cheap)")
    for a in a_texts:
        refusal = organism_refusal(a, args.allow_unvalidated)
        if refusal:
            print(refusal, file=sys.stderr)
            return EXIT_PRECONDITION
    actors = {a: b() for a, b in builders.items()}
    cache = open_summariser_lms(lms, cache_dir)
    if cache is not None:
        compactors = build(cache)
    run = {**provenance(Path(args.episodes), episodes, args.seed),
           "summarisers": [{"label": s, "name": m.name, "config_hash": m.config_hash} for s, m in compactors.items()],
           "actors": actor_entries(actors), "counter": counter_name, "allow_unvalidated": bool(args.allow_unvalidated),
           "backend": args.backend, "summariser_lms": sorted(lms),
           "summary_cache": str(cache.root) if cache is not None else None}
    write_manifest(out, None, run, cat, prereg)
    if any(e.early_probe for e in episodes):
        print("warning: episodes with an early probe: its answer differs per actor, so the compactors do not see "
              "identical inputs (generate with --early-probe 0)", file=sys.stderr)
    rows, seen = run_crossing(actors, compactors, episodes, out, counter=counter, progress=_bar("constraint-rot cross"))
    matrix = crossing_matrix(rows, s_texts, a_texts, B=args.B, seed=args.seed)
    calls = sum(getattr(m, "calls", 0) for m in compactors.values())
    matrix.update(summarisers=s_texts, actors=a_texts, n_episodes=len(episodes), rows=len(rows),
                  errors=sum(bool(r.get("error")) for r in rows),
                  identical_inputs=sum(len(x) == 1 for x in seen.values()) / len(seen),
                  summariser_calls=calls, summary_cache=cache.stats() if cache is not None else None)
    write_json_atomic(matrix_path(out), matrix)
    print("\n".join(matrix_lines(matrix, s_texts, a_texts)))
    print(f"{len(rows)} rows -> {out}; matrix -> {matrix_path(out)}; summariser calls {calls}; identical inputs "
          f"{matrix['identical_inputs']:.0%}; errors {matrix['errors']}")
    return 0


# -- attack optimise -------------------------------------------------------------------------------------------------
def cmd_attack_optimise(args: argparse.Namespace) -> int:
    from agentmill.methods.constraint_rot.attacks import TEMPLATES, optimise_attack
    from agentmill.methods.constraint_rot.runs import load_episodes
    from agentmill.methods.constraint_rot.sessions import attack_summary, dev_cases
    from agentmill.methods.constraint_rot.specs import (SummariserLM, check_backend, episode_counter,
                                                        open_summariser_lms, parse_compactor, summary_cache_dir)

    check_backend(args.backend)
    for flag, v, lo in (("--population", args.population, 2), ("--generations", args.generations, 0),
                        ("--keep-last", args.keep_last, 1)):
        if v < lo:
            raise ValueError(f"{flag} must be >= {lo}, got {v}")
    templates = _csv(args.templates, "--templates", tuple(t for t in TEMPLATES if t != "F0"))
    out = Path(args.out)
    if out.exists():
        raise ValueError(f"--out {out}: exists; attack artefacts are never overwritten (choose a new file)")
    cat = _catalogue(args.path)
    episodes = load_episodes(Path(args.dev), cat)
    for e in episodes:
        if e.split.startswith("test"):
            raise ValueError(f"--dev {args.dev}: episode {e.episode_id} is from split {e.split!r}; the optimiser "
                             f"must not see test episodes (generate --split dev)")
        if e.attack:
            raise ValueError(f"--dev {args.dev}: episode {e.episode_id} already carries an attack; generate dev "
                             f"episodes with --attack none")
    _, counter = episode_counter(episodes)
    lms: dict[str, SummariserLM] = {}
    target = parse_compactor(args.target, counter, lms=lms, flag="--target")
    cache_dir = summary_cache_dir(args.summary_cache) if lms else None
    cases, skipped = dev_cases(episodes, counter, args.keep_last)
    if not cases:
        raise ValueError(f"--dev {args.dev}: no episode has a distractor tool output outside the last "
                         f"{args.keep_last} messages to carry a payload")
    cache = open_summariser_lms(lms, cache_dir)
    if cache is not None:
        target = parse_compactor(args.target, counter, lms=lms, cache=cache, flag="--target")
    with _progress() as progress:
        progress.add_task(f"attack optimise: {len(cases)} dev cases x {args.population} x "
                          f"{args.generations + 1} generations", total=None)
        result = optimise_attack(target, cases, population=args.population, generations=args.generations,
                                 seed=args.seed, templates=templates, counter=counter)
    result.save(out)
    print(json.dumps({"out": str(out), "target": args.target, **attack_summary(result), "skipped_episodes": skipped,
                      "summariser_calls": getattr(target, "calls", 0),
                      "summary_cache": cache.stats() if cache is not None else None}, indent=2))
    return 0


# -- organism --------------------------------------------------------------------------------------------------------
PROFILE_N_TRAIN = {"quick": 320, "full": 960}
"""SFT examples per profile [R]. The E164 organism experiments train the quick
organism (320) at their ``full`` profile (their ``quick`` only plans), so ``--profile quick`` here trains the adapter
those runs use."""


def organism_recipe(args: argparse.Namespace) -> Any:
    """The :class:`Recipe` of ``organism train``: the experiments' recipe for the profile (same content address),
    with ``--n-train``/``--instinct``/``--dtype``/``--base``/``--max-length``/``--lr``/``--history-weight``/
    ``--no-paired``/``--fresh-values`` changes (``--no-paired`` is recipe v2; with ``--lr 3e-4 --history-weight 0``
    the spec's v1; ``--fresh-values`` recipe v4)."""
    from agentmill.methods.constraint_rot.organism.cache import Recipe

    n = args.n_train if args.n_train is not None else PROFILE_N_TRAIN[args.profile]
    try:
        given = {"lr": getattr(args, "lr", None), "history_weight": getattr(args, "history_weight", None),
                 "paired": getattr(args, "paired", None), "fresh_values": getattr(args, "fresh_values", None)}
        changes = {k: v for k, v in given.items() if v is not None}
        return Recipe(n_train=n, instinct=args.instinct, base=args.base, dtype=args.dtype,
                      max_length=args.max_length, **changes)
    except ValueError as e:
        raise ValueError(f"organism train: {e}") from None


def cmd_organism_train(args: argparse.Namespace) -> int:
    from agentmill.methods.constraint_rot.organism.cache import default_root, obtain_organism
    from agentmill.methods.constraint_rot.organism.train import OrganismCard
    from agentmill.methods.constraint_rot.sessions import organism_summary
    from agentmill.methods.constraint_rot.specs import load_organism_base, token_counter

    if args.max_length < 1:
        raise ValueError(f"--max-length must be >= 1, got {args.max_length}")
    recipe = organism_recipe(args)
    root = Path(args.out) if args.out else default_root()
    if root.exists() and not root.is_dir():
        raise ValueError(f"--out {root}: exists and is not a directory")
    cat = _catalogue(args.path)
    with _progress() as progress:
        task = progress.add_task("organism: SFT data and content address", total=None)

        def step(p: dict[str, Any]) -> None:
            progress.update(task, description=f"organism: training (loss {p['loss']:.3f})", completed=p["step"],
                            total=p["steps"])

        adapter, trained, info = obtain_organism(recipe, cat, counter=token_counter(args.counter),
                                                 load=lambda: load_organism_base(recipe.base), root=root,
                                                 progress=step)
    print(json.dumps(organism_summary(adapter, OrganismCard.load(adapter), trained, info["key"]), indent=2))
    return 0


def cmd_organism_validate(args: argparse.Namespace) -> int:
    from agentmill.methods.constraint_rot.organism.validate import validate_organism
    from agentmill.methods.constraint_rot.analysis import gate_table, paired_line
    from agentmill.methods.constraint_rot.specs import organism_actor, organism_dir, token_counter

    adapter = organism_dir(args.dir, f"organism validate {args.dir}")
    if args.n_per_cell < 1:
        raise ValueError(f"--n-per-cell must be >= 1, got {args.n_per_cell}")
    cat = _catalogue(args.path)
    counter = token_counter(args.counter)
    actor = organism_actor(adapter, dtype=args.dtype, max_new_tokens=args.max_new_tokens)
    if args.swap_phrasing:
        from agentmill.methods.constraint_rot.organism.phrasing_swap import run_phrasing_swap

        swap = run_phrasing_swap(adapter, cat, split=args.split, n_per_cell=args.n_per_cell, seed=args.seed,
                                 actor=actor, counter=counter)
        print(paired_line(f"{args.split} episodes, own sentences (validation)", swap.original))
        print(paired_line(f"{args.split} episodes, {swap.phrasing_split} sentences", swap.swapped))
        print(f"diagnostic, not the gates: written to {adapter / f'validation_swap_{args.split}.json'}; "
              f"the card is unchanged")
        return 0
    report = validate_organism(adapter, cat, n_per_cell=args.n_per_cell, seed=args.seed, actor=actor,
                               counter=counter, split=args.split)
    print("\n".join(gate_table(report)))
    note = " (low_n: fewer than 150 per cell)" if report.low_n else ""
    print(f"{report.n_per_cell} episodes per cell{note}; prereg sha256 {report.prereg_sha256}")
    print(paired_line("present vs absent, paired by episode", report.paired))
    if args.split != "test_iid":
        print(f"diagnostic on {args.split} episodes (not the gates): written to "
              f"{adapter / f'validation_{args.split}.json'}; the card is unchanged")
        return 0
    print(f"validated: {str(report.validated).lower()}; report written to {adapter / 'organism_card.json'}")
    if not report.validated:
        failed = [g.id for g in report.gates if not g.passed]
        print(f"precondition not met: organism failed gate(s) {', '.join(failed)}", file=sys.stderr)
        return EXIT_PRECONDITION
    return 0


# -- report ----------------------------------------------------------------------------------------------------------
def cmd_report(args: argparse.Namespace) -> int:
    from agentmill.core.records import write_text_atomic
    from agentmill.methods.constraint_rot.metrics import load_rows, summarise
    from agentmill.methods.constraint_rot.prereg import load_prereg
    from agentmill.methods.constraint_rot.analysis import withheld

    rows: list[dict[str, Any]] = []
    for r in args.results:
        if not Path(r).is_file():
            raise ValueError(f"{r}: results file not found")
        try:
            rows += load_rows(r)
        except ValueError as e:
            raise ValueError(f"{r}: {e}") from None
    if not rows:
        raise ValueError(f"{', '.join(args.results)}: no result rows")
    prereg = load_prereg(args.prereg)
    table = summarise(rows, B=args.B, seed=args.seed, prereg=prereg)
    out = Path(args.out)
    write_text_atomic(out, table.to_markdown().rstrip("\n") + "\n")
    json_out = out.with_suffix(".json")
    write_text_atomic(json_out, table.to_json() + "\n")
    print(f"prereg sha256 {prereg.sha256} (v{prereg.version})")
    print(f"wrote {out} and {json_out}: {table.health.n_rows} rows, {len(table.cells)} cells, "
          f"{table.health.errors} errors, {table.health.grader_mismatch} grader mismatches, "
          f"{table.health.summary_failed} failed LLM summaries (left out of every rate)")
    missing = withheld(table)
    if missing:
        print(f"precondition not met for {len(missing)} decay figure(s):", file=sys.stderr)
        for m in missing:
            print(f"  {m}", file=sys.stderr)
        return EXIT_PRECONDITION
    return 0


def _model_flags(p: argparse.ArgumentParser) -> None:
    """Flags ``run`` and ``cross`` share: how model actors and LLM summarisers are loaded and gated."""
    p.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32", help="organism: inference dtype")
    p.add_argument("--max-new-tokens", type=int, default=160, help="organism: decode budget per decision")
    p.add_argument("--tool-format", choices=("native", "json", "auto"), default="auto",
                   help="endpoint: OpenAI tools, JSON in the prompt, or native with a JSON fallback")
    p.add_argument("--api-key-env", default="AGENTMILL_API_KEY",
                   help="endpoint: environment variable holding the API key (never a flag)")
    p.add_argument("--allow-unvalidated", action="store_true",
                   help="run an organism whose card is not validated (refused with exit 3 otherwise); the manifest "
                        "records it")
    p.add_argument("--summary-cache", default=None,
                   help="content-addressed LLM summary cache folder (default: $AGENTMILL_CACHE/summaries)")
    p.add_argument("--backend", default="transformers",
                   help="model backend: only transformers (llamacpp is not implemented; it exits 2)")


EXAMPLES = """\
examples:
  agentmill constraint-rot generate --split test_iid --n 96 --seed 0 --out ep.jsonl
  agentmill constraint-rot run --episodes ep.jsonl --actor scripted:rule-reader --compactor window --out res.jsonl
  agentmill constraint-rot report res.jsonl --out report.md"""


def register(sub) -> None:
    sp = sub.add_parser("constraint-rot",
                        help="ConstraintRot (E164): catalogue, episodes, runs, reports, pinning hooks",
                        description="ConstraintRot: does an agent still follow a rule from its context after "
                                    "that context is compacted? Generate\nepisodes, run them through compactors and "
                                    "actors, report rule survival; pinning keeps rule cards in the context.",
                        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    cs = sp.add_subparsers(dest="cr_cmd", required=True,
                           help="the subcommand ('agentmill constraint-rot SUBCOMMAND -h' shows its flags)")
    c = cs.add_parser("catalogue", help="validate, list or split the rule catalogue")
    c.add_argument("catalogue_cmd", choices=("validate", "list", "split"),
                   help="validate: run every family's self-checks, print version and sha256; list: one line per rule "
                        "family; split: families per split and kind")
    c.add_argument("--path", default=None, help="catalogue folder (default: the shipped one)")
    c.add_argument("--kind", choices=("soft", "hard"), default=None, help="list: only this kind")
    c.add_argument("--split", choices=SPLITS, default=None, help="list: only this split")
    c.set_defaults(fn=cmd_catalogue)
    h = cs.add_parser("pin-hook", help="print Claude Code SessionStart hook JSON carrying the rule cards")
    h.add_argument("--registry", required=True, help="registry YAML (rules: [{rule_id, text, issuer, kind, "
                                                       "scope_tools}])")
    h.set_defaults(fn=cmd_pin_hook)

    g = cs.add_parser("generate", help="generate episodes into a JSONL file (kinds in turn, families in a seeded "
                                       "order)")
    g.add_argument("--split", choices=SPLITS, required=True,
                   help="parameter pool and phrasings to draw from: train, dev, test_iid, or test_ood_family (the "
                        "held-out families)")
    g.add_argument("--n", type=int, required=True, help="number of episodes")
    g.add_argument("--seed", type=int, default=0, help="seed of the episodes drawn (default 0)")
    g.add_argument("--kinds", default="soft,hard", help="comma list of soft,hard")
    g.add_argument("--locations", default=None, help="comma list of locations (default: the five in-context ones)")
    g.add_argument("--attack", default="none", help="none | fixed | filler | forged_card | template:A1..A6 | "
                                                    "attack.json")
    g.add_argument("--channel", default="http_page", choices=("http_page", "email_body", "ticket", "file"),
                   help="which distractor tool output carries the attack")
    g.add_argument("--position", default="end", choices=("start", "middle", "end"),
                   help="where in that tool output the payload goes")
    g.add_argument("--early-probe", type=float, default=0.5, help="probability of an early probe")
    g.add_argument("--counter", choices=COUNTERS, default="smollm2", help="token counter for length matching")
    g.add_argument("--path", default=None, help="catalogue folder (default: the shipped one)")
    g.add_argument("--out", required=True, help="episodes JSONL (written atomically)")
    g.set_defaults(fn=cmd_generate)

    r = cs.add_parser("run", help="run episodes x conditions with an actor; append result rows")
    r.add_argument("--episodes", required=True, help="episodes JSONL from `generate`")
    r.add_argument("--actor", required=True, help="scripted:rule-reader[:verbatim|semantic|card_only] | "
                   "scripted:always-comply | scripted:always-refuse | scripted:latest-wins | scripted:random:P | "
                   "organism:DIR | endpoint:URL#MODEL")
    r.add_argument("--compactor", action="append", help="NAME[:k=v,...], repeatable; NAME in window, head_tail, "
                   "tool_clear, extractive, structured, note_following, none, or summary:style=STYLE,lm=SPEC"
                   "[,ratio=R,keep_last=K,trim_input_tokens=N] (the LLM summariser; SPEC an agentmill.lm spec: "
                   "hf:smollm2, openai:MODEL@URL, scripted:NAME; a bare name means hf:NAME)")
    r.add_argument("--pin", action="append", help="none | card[:placement=P], repeatable")
    r.add_argument("--gate", action="store_true", help="add the deterministic policy-gate arm")
    r.add_argument("--conditions", default="full,never,compacted",
                   help="comma list of full, never, compacted, pinned, cf_keep, cf_drop, rounds:K, impersonation")
    r.add_argument("--seed", type=int, default=0, help="seed of random actors")
    r.add_argument("--prereg", default=None, help="prereg.yaml (default: the shipped one)")
    r.add_argument("--path", default=None, help="catalogue folder (default: the shipped one)")
    r.add_argument("--out", required=True, help="results JSONL")
    r.add_argument("--resume", action="store_true", help="continue --out, skipping completed keys")
    _model_flags(r)
    r.set_defaults(fn=cmd_run)

    x = cs.add_parser("cross", help="summarisers x actors on identical inputs: rule-survival matrix V[s][a] and the "
                                    "variance shares η²_S, η²_A")
    x.add_argument("--summarisers", nargs="+", action="append", required=True, metavar="COMPACTOR",
                   help="two or more --compactor specs (rows of V), e.g. window extractive "
                        "summary:style=handoff,lm=hf:smollm2")
    x.add_argument("--actors", nargs="+", action="append", required=True, metavar="ACTOR",
                   help="two or more --actor specs (columns of V)")
    x.add_argument("--episodes", required=True, help="episodes JSONL (generate with --early-probe 0 so every actor "
                                                     "reads the same compacted context)")
    x.add_argument("--out", required=True, help="result rows JSONL (one per episode x summariser x actor, readable "
                                                "by `report`); V[s][a] and η² go to <out>.matrix.json")
    x.add_argument("--B", type=int, default=1000, help="cluster-bootstrap resamples for the η² CIs")
    x.add_argument("--seed", type=int, default=0, help="bootstrap seed and seed of random actors")
    x.add_argument("--prereg", default=None, help="prereg.yaml (default: the shipped one)")
    x.add_argument("--path", default=None, help="catalogue folder (default: the shipped one)")
    _model_flags(x)
    x.set_defaults(fn=cmd_cross)

    at = cs.add_parser("attack", help="the compaction-eviction attack optimiser: payloads that make a compactor drop "
                                      "the rule")
    atsub = at.add_subparsers(dest="attack_cmd", required=True,
                              help="the subcommand ('agentmill constraint-rot attack SUBCOMMAND -h' shows its flags)")
    ao = atsub.add_parser("optimise", help="random search + GA over template slots against one compactor on dev "
                                           "episodes; writes the frozen attack JSON (usable as --attack FILE)")
    ao.add_argument("--target", required=True, help="the compactor to attack, a --compactor spec, e.g. "
                                                    "summary:style=goal_extract,lm=hf:smollm2 or note_following")
    ao.add_argument("--dev", required=True, help="dev episodes JSONL without attacks (generate --split dev)")
    ao.add_argument("--out", required=True, help="attack.json (written once, never overwritten)")
    ao.add_argument("--population", type=int, default=8, help="GA population (the design's budget: 8 quick, 16 full)")
    ao.add_argument("--generations", type=int, default=2, help="GA generations after the random one (quick 2, "
                                                               "full 4)")
    ao.add_argument("--templates", default=",".join(("A1", "A2", "A3", "A4", "A5", "A6")),
                    help="comma list of template ids the search may use (default: the eviction templates A1-A6)")
    ao.add_argument("--keep-last", type=int, default=4, help="messages the compaction keeps (the run loop's 4)")
    ao.add_argument("--seed", type=int, default=0, help="optimiser seed")
    ao.add_argument("--path", default=None, help="catalogue folder (default: the shipped one)")
    ao.add_argument("--summary-cache", default=None, help="summary cache folder (default: "
                                                          "$AGENTMILL_CACHE/summaries)")
    ao.add_argument("--backend", default="transformers", help="model backend: only transformers (llamacpp is not "
                                                              "implemented)")
    ao.set_defaults(fn=cmd_attack_optimise)

    o = cs.add_parser("organism", help="train (content-addressed, cached) or validate (G1-G6) the model organism")
    osub = o.add_subparsers(dest="organism_cmd", required=True,
                            help="the subcommand ('agentmill constraint-rot organism SUBCOMMAND -h' shows its flags)")
    t = osub.add_parser("train", help="train the LoRA organism, or reuse the cached adapter with the same address")
    t.add_argument("--profile", choices=tuple(PROFILE_N_TRAIN), required=True,
                   help="quick = 320 SFT examples (the E164 experiments' full-profile organism), full = 960")
    t.add_argument("--n-train", type=int, default=None, help="SFT examples (overrides the profile's)")
    t.add_argument("--instinct", action="store_true", help="the instinct variant (refuses hard triggers unruled)")
    t.add_argument("--dtype", choices=("fp32", "bf16"), default="bf16",
                   help="training dtype (bf16: CPU autocast, the default since recipe v2; fp32 = recipe v1)")
    t.add_argument("--base", default="hf:smollm2", help="organism base: an hf: GGUF spec (default SmolLM2)")
    t.add_argument("--max-length", type=int, default=1536, help="max tokens per SFT example")
    t.add_argument("--lr", type=float, default=None,
                   help="AdamW learning rate (default 1e-3, since recipe v2; recipe v1 used 3e-4)")
    t.add_argument("--history-weight", type=float, default=None,
                   help="weight of the loss on past tool-call turns (default 1.0, since recipe v2; 0 = recipe v1)")
    t.add_argument("--paired", action=argparse.BooleanOptionalAction, default=None,
                   help="contrastive-group SFT data kept together in a step (default: on, recipe v3; "
                        "--no-paired = recipe v2)")
    t.add_argument("--fresh-values", action=argparse.BooleanOptionalAction, default=None,
                   help="new parameter values for every SFT episode instead of the two train values per "
                        "parameter (recipe v4, which failed its gates at 960; default off)")
    t.add_argument("--counter", choices=COUNTERS, default="smollm2", help="token counter for the SFT data")
    t.add_argument("--path", default=None, help="catalogue folder (default: the shipped one)")
    t.add_argument("--out", default=None, help="cache root; the adapter goes into <root>/<content address> "
                                                 "(default: $AGENTMILL_CACHE/organisms)")
    t.set_defaults(fn=cmd_organism_train)
    v = osub.add_parser("validate", help="gates G1-G6 on held-out test_iid episodes; the report goes into the card")
    v.add_argument("dir", help="adapter directory (holds organism_card.json)")
    v.add_argument("--n-per-cell", type=int, default=150,
                   help="episodes per cell (default 150; the design asks >= 150 at full, >= 60 at quick)")
    v.add_argument("--seed", type=int, default=1, help="episode seed of the held-out cells")
    v.add_argument("--split", choices=("test_iid", "train"), default="test_iid",
                   help="test_iid = the gates (written into the card); train = diagnostic on fresh train-split "
                        "episodes, written to validation_train.json beside the card")
    v.add_argument("--swap-phrasing", action="store_true",
                   help="diagnostic: re-run the present cell of this split's finished validation with the other "
                        "split's rule sentences (same values), paired with its absent rows; the card is unchanged")
    v.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32", help="inference dtype")
    v.add_argument("--max-new-tokens", type=int, default=160, help="decode budget per decision")
    v.add_argument("--counter", choices=COUNTERS, default="smollm2", help="token counter for episode generation")
    v.add_argument("--path", default=None, help="catalogue folder (default: the shipped one)")
    v.set_defaults(fn=cmd_organism_validate)

    p = cs.add_parser("report", help="metrics of result rows -> Markdown + JSON; prints the prereg sha256")
    p.add_argument("results", nargs="+", help="results JSONL file(s)")
    p.add_argument("--out", required=True, help="report.md (the JSON goes next to it as report.json)")
    p.add_argument("--prereg", default=None, help="prereg.yaml (default: the shipped one)")
    p.add_argument("--B", type=int, default=2000, help="bootstrap resamples")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    p.set_defaults(fn=cmd_report)
