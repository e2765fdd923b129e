"""``agentmill forensics``: pre-register hypotheses in a hash-chained registry, replay an episode with one variable
changed, sweep a dose (optionally writing its episodes), mine hypotheses from chains of thought (rule or LM miner),
and verify registries and replays (docs/methods/forensics.md). A thin face over
``agentmill.methods.forensics``.

Exit codes: 0 ok; 2 bad input (a tampered registry, an edited replay, an arm that changes more than one thing, an
off-policy rewind: the message names the line that broke); 3 precondition not met (``--agent organism`` whose card
records failed gates, without ``--allow-unvalidated``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

EXAMPLES = """examples:
  agentmill forensics register --registry runs/reg --id H_self --motive self_consistency --category malign --predict actor=developer:-1 --positive-control appeal=asks_to_report --freeze
  agentmill forensics replay env:loyalty --mode episode --set actor=developer --out runs/replay
  agentmill forensics sweep tedium --variable n_errors --agent organism --n 40 --plot runs/dose.png
"""


def _value(env: Any, variable: str, raw: str) -> Any:
    """Parse ``raw`` into the member of the variable's domain whose text it is (``100`` -> 100, ``false`` -> False)."""
    var = env.variable(variable)
    for x in var.domain:
        if str(x).lower() == raw.strip().lower() or repr(x) == raw.strip():
            return x
    raise ValueError(f"{variable}={raw!r}: not in the domain {list(var.domain)} of env {env.name}")


class PreconditionNotMet(RuntimeError):
    """An organism whose card records failed gates, asked for without --allow-unvalidated (exit 3)."""


def _exit3(fn: Any) -> Any:
    """``fn`` with :class:`PreconditionNotMet` turned into exit code 3 and its message."""
    import functools
    import sys

    @functools.wraps(fn)
    def run(args: argparse.Namespace) -> int:
        try:
            return fn(args)
        except PreconditionNotMet as e:
            print(f"precondition not met: {e}", file=sys.stderr)
            return 3

    return run


def _agent(env: Any, spec: str, *, allow_unvalidated: bool = False) -> Any:
    from agentmill.methods.forensics import LMAgent, PlantedAgent

    if spec == "organism":  # the shipped tiny agent organism (tedium and loyalty only)
        from agentmill.methods.forensics.organism import ENV_NAMES, OrganismAgent, load_agent_organism

        if env.name not in ENV_NAMES:
            raise ValueError(f"--agent organism acts in {', '.join(ENV_NAMES)} only, not {env.name}")
        lm, card = load_agent_organism(allow_unvalidated=True)
        if not card.validated and not allow_unvalidated:
            raise PreconditionNotMet(f"the tiny agent organism's card records failed gates {card.gate_pass}; pass "
                                     "--allow-unvalidated to run it anyway (results are then stamped unvalidated)")
        if not card.validated:
            print(f"warning: unvalidated organism (gates {card.gates})")
        return OrganismAgent(env, lm)
    if spec.startswith("planted"):
        policy = spec.split(":", 1)[1] if ":" in spec else next(iter(env.policies))
        return PlantedAgent(env, policy)
    from agentmill.lm import load_lm

    return LMAgent(env, load_lm(spec))


def cmd_register(args: argparse.Namespace) -> int:
    from agentmill.methods.forensics import Hypothesis, HypothesisRegistry
    from agentmill.methods.forensics.hypotheses import Prediction
    from agentmill.methods.forensics.variables import Intervention

    preds = []
    for p in args.predict:
        try:
            lhs, rest = p.split("=", 1)
            parts = rest.split(":")
            value, direction = parts[0], int(parts[1])
            min_effect = float(parts[2]) if len(parts) > 2 else 0.2
        except (ValueError, IndexError):
            raise ValueError(f"--predict {p!r}: expected VARIABLE=VALUE:DIRECTION[:MIN_EFFECT], e.g. "
                             "actor=developer:-1:0.2") from None
        preds.append(Prediction(lhs, value if value != "dose" else "dose", direction, min_effect))
    pc = None
    if args.positive_control:
        var, _, val = args.positive_control.partition("=")
        pc = Intervention(var, val)
    env = None
    if args.env:
        from agentmill.methods.forensics import load_env

        env = load_env(args.env)
        preds = [Prediction(p.variable, p.value if p.value == "dose" else _value(env, p.variable, p.value),
                            p.direction, p.min_effect) for p in preds]
        if pc is not None:
            pc = Intervention(pc.variable, _value(env, pc.variable, pc.value))
    h = Hypothesis(args.id, args.statement or f"driven by {args.motive}", args.category, args.motive,
                   tuple(dict.fromkeys(p.variable for p in preds)), tuple(preds), pc, (), args.author)
    reg = HypothesisRegistry(Path(args.registry))
    sha = reg.add(h) if args.id not in reg.ids() else reg.revise(args.id, **{k: getattr(h, k) for k in (
        "statement", "category", "motive", "variables", "predictions", "positive_control")})
    print(f"registered {args.id} sha256 {sha}")
    if args.freeze:
        reg.freeze(args.id)
        print(f"frozen {args.id}")
    print(f"registry head {reg.ledger.head}")
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    from agentmill.lm.replay import ReplayMiss
    from agentmill.methods.forensics import Episode, load_env, replay, run_episode
    from agentmill.methods.forensics.variables import Intervention

    from agentmill.methods.forensics.episode_mode import ScriptedExplorer, replay_tool_episode, run_tool_episode

    def agent_for(env: Any, mode: str) -> Any:
        a = _agent(env, args.agent, allow_unvalidated=args.allow_unvalidated)
        if mode != "episode":
            return a
        if hasattr(a, "step"):
            return a
        if args.agent.startswith("planted"):
            return ScriptedExplorer(env, a)
        from agentmill.methods.forensics.episode_mode import LMToolAgent

        return LMToolAgent(env, a.lm)

    if args.episode.startswith("env:"):
        env = load_env(args.episode[4:])
        if args.mode == "episode":
            ep = run_tool_episode(env, env.values(), agent_for(env, "episode"), seed=args.seed,
                                  episode_id="cli/incident")
        else:
            ep = run_episode(env, env.values(), _agent(env, args.agent, allow_unvalidated=args.allow_unvalidated),
                             seed=args.seed, episode_id="cli/incident")
    else:
        ep = Episode.load(args.episode)
        env = ep.env
    mode = ep.header.get("mode", "decision")
    if len(args.set) > 1:
        from agentmill.methods.forensics.variables import MultiVariableArmError

        raise MultiVariableArmError(f"a replay changes exactly one variable; --set given {len(args.set)} times")
    change = None
    if args.set:
        var, _, raw = args.set[0].partition("=")
        change = Intervention(var, _value(env, var, raw))
    rewind: Any = int(args.rewind) if args.rewind.isdigit() else args.rewind
    try:
        if mode == "episode":
            new = replay_tool_episode(ep, agent_for(env, "episode"), change=change, rewind=rewind)
        else:
            new = replay(ep, _agent(env, args.agent, allow_unvalidated=args.allow_unvalidated), change=change,
                         rewind=rewind)
    except ReplayMiss as e:
        raise ValueError(str(e)) from None
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        ep.save(out / "original.jsonl")
        new.save(out / "replayed.jsonl")
        print(f"wrote {out / 'original.jsonl'} and {out / 'replayed.jsonl'}")
    changed = [e["payload"]["doc"] for e, f in zip(ep.events, new.events)
               if e["kind"] == "observation" and e["payload"]["text"] != f["payload"]["text"]]
    print(json.dumps({"env": env.name, "mode": mode, "change": new.header["change"],
                      "rewind_step": new.header["rewind"],
                      "documents_changed": changed, "action_before": ep.action, "action_after": new.action,
                      "identical_log": new.tool_log() == ep.tool_log()}, indent=1))
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    import numpy as np

    from agentmill.methods.forensics import dose_response, load_env
    from agentmill.methods.forensics.investigate import sweep_dose

    env = load_env(args.env)
    var = env.variable(args.variable)
    if var.kind != "numeric":  # refused before any model loads
        raise ValueError(f"--variable {args.variable} is {var.kind}; a dose sweep needs a numeric variable "
                         f"({[v.name for v in env.variables if v.kind == 'numeric']})")
    agent = _agent(env, args.agent, allow_unvalidated=args.allow_unvalidated)
    base = env.values(**{k: _value(env, k, v) for k, v in (s.split("=", 1) for s in args.set)})
    sw = sweep_dose(env, base, args.variable, agent, n=args.n, seed=args.seed,
                    episodes_dir=args.episodes_out or None)
    invalid = sum(args.n - valid for _, _, valid in sw.counts)
    if not len(sw.outcomes):
        raise ValueError(f"no valid action in {args.n * len(sw.counts)} episodes: nothing to fit")
    fit = dose_response(sw.doses, sw.outcomes, B=args.bootstrap, seed=args.seed, log_dose=args.log_dose)
    if args.episodes_out:
        print(f"wrote {len(sw.files)} episodes under {args.episodes_out} (one directory per dose)")
    if invalid:
        print(f"invalid actions: {invalid} (counted in neither class)")
    for d, k, n in fit.rates:
        print(f"  {args.variable}={d:g}: {k}/{n} = {k / n:.2f}")
    print(f"d50 = {fit.d50.fmt()}  (bootstrap {args.bootstrap}); trend z = {fit.trend_z:.2f}, p = {fit.trend_p:.3g}; "
          f"zero_below = {fit.zero_below}")
    if args.plot:
        from agentmill.experiments.plotting import pyplot, save

        plt = pyplot()
        fig, ax = plt.subplots(figsize=(5.5, 3.5))
        ax.plot([r[0] for r in fit.rates], [r[1] / r[2] for r in fit.rates], "o", label="observed")
        g = np.linspace(min(var.domain), max(var.domain), 200)
        x = np.log(g) if args.log_dose else g
        ax.plot(g, 1 / (1 + np.exp(-(fit.beta0.value + fit.beta1.value * x))), label="logistic fit")
        ax.set_xlabel(args.variable)
        ax.set_ylabel(f"share {env.outcome}")
        ax.legend()
        fig.tight_layout()
        save(fig, Path(args.plot))
        print(f"wrote {args.plot}")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    from agentmill.methods.forensics import Episode, HypothesisRegistry, check_replay

    target = Path(args.path)
    if target.is_dir() and (target / "ledger.jsonl").exists():
        reg = HypothesisRegistry(target)  # verifies on open; raises naming the line
        frozen = sum(reg.is_frozen(h) for h in reg.ids())
        print(f"registry {target}: {len(reg.ledger.events)} lines verify; {len(reg.ids())} hypotheses, {frozen} "
              f"frozen; head {reg.ledger.head}")
        return 0
    if args.replayed is None:
        raise ValueError(f"{target}: not a registry directory (no ledger.jsonl); to verify a replay pass the "
                         "original episode and --replayed FILE")
    original, replayed = Episode.load(target), Episode.load(args.replayed)
    if original.header.get("mode") == "episode":
        from agentmill.methods.forensics.episode_mode import check_tool_replay

        var = check_tool_replay(original, replayed)
    else:
        var = check_replay(original, replayed)
    print(f"replay verifies: only {var!r} changed, inside its slots" if var else "replay verifies: no change")
    return 0


MINE_EXAMPLES = """examples:
  agentmill forensics mine runs/sweep --min-votes 3
  agentmill forensics mine runs/sweep --miner lm --lm openai:M@http://127.0.0.1:8000/v1 --recording miner.jsonl --replay-mode record
  agentmill forensics mine runs/sweep --miner lm --lm openai:M --recording miner.jsonl
"""


def cmd_mine(args: argparse.Namespace) -> int:
    """Mine (motive, variable) candidates from episodes' chains of thought: the rule miner, or an LM miner."""
    from agentmill.lm.replay import ReplayMiss
    from agentmill.methods.forensics.investigate import mine_hypotheses
    from agentmill.methods.forensics.miner import load_episode_dir, mine_with_lm

    eps = load_episode_dir(args.episodes)
    env = eps[0].env
    n_conc = sum(e.action == env.actions[0] for e in eps)
    print(f"{len(eps)} episodes of env {env.name}, {n_conc} concerning ({env.actions[0]}); min votes "
          f"{args.min_votes}")
    rule = mine_hypotheses(eps, env, min_votes=args.min_votes)
    print("rule miner: " + (", ".join(f"{c.motive} ({c.votes} votes; tests {', '.join(c.variables)})"
                                      for c in rule) or "no candidate"))
    if args.miner == "rule":
        return 0
    if not args.lm:
        raise ValueError("--miner lm needs --lm <model spec>")
    lm = _recorded_lm(args.lm, args.recording, args.replay_mode)
    try:
        res = mine_with_lm(eps, env, lm, min_votes=args.min_votes)
    except ReplayMiss as e:
        raise ValueError(str(e)) from None
    print(f"lm miner ({args.lm}): {res.episodes_read} concerning episodes read, {res.calls} call(s); unparsable "
          f"replies {res.unparsable}, malformed items {res.bad_items}, quotes not in the CoT {res.unquoted}")
    for c in res.candidates:
        print(f"  candidate {c.motive} -> {c.variables[0]} ({c.votes} votes); evidence {list(c.evidence)}")
    for u in res.untestable_here:
        print(f"  untestable_here {u.motive} ({u.votes} votes): names no declared variable; suggested new "
              f"variable {u.suggested_variable!r}; evidence {list(u.evidence)}")
    if not res.candidates and not res.untestable_here:
        print("  no candidate")
    rule_m, lm_m = {c.motive for c in rule}, {c.motive for c in res.candidates}
    print(f"agreement on motives (reported only): both {sorted(rule_m & lm_m)}, rule only {sorted(rule_m - lm_m)}, "
          f"lm only {sorted(lm_m - rule_m)}")
    if hasattr(lm, "replayed"):
        print(f"recording {lm.path}: {lm.replayed} call(s) replayed, {lm.recorded} recorded")
    return 0


def _recorded_lm(spec: str, recording: str | None, mode: str) -> Any:
    """The LM ``spec``, through ``RecordReplayLM(recording, mode)`` when a recording is given (replay mode loads
    no model)."""
    from agentmill.lm import load_lm
    from agentmill.lm.replay import RecordReplayLM

    if recording is None:
        return load_lm(spec)
    if mode == "replay":
        if not Path(recording).exists():
            raise ValueError(f"--recording {recording} does not exist; record it first with --replay-mode record")
        return RecordReplayLM(None, recording, "replay", spec=spec)
    return RecordReplayLM(load_lm(spec), recording, mode)


EXPORT_EXAMPLES = """examples:
  agentmill forensics export --inspect --in runs/replay --out runs/replay.eval
  agentmill forensics export --inspect --in runs/replay/replayed.jsonl --out runs/replayed.json
"""


def cmd_export(args: argparse.Namespace) -> int:
    """Episodes -> one Inspect eval log (needs the 'inspect' extra): one sample per episode, ``concerning`` score."""
    if not args.inspect:
        raise ValueError("choose the export format: --inspect (an Inspect eval log) is the one there is")
    from agentmill.methods.forensics.inspect_export import export_inspect

    path, log = export_inspect(args.src, args.out)
    arms: dict[str, list[int]] = {}
    for s in log.samples:
        sc = s.scores["concerning"]
        k_n = arms.setdefault(s.metadata["arm"], [0, 0])
        if sc.value == sc.value:  # NaN (an invalid action) is unscored: counted in neither
            k_n[0] += int(sc.value)
            k_n[1] += 1
    m = log.results.scores[0].metrics
    print(f"wrote {path}: {len(log.samples)} samples (Inspect log, {path.suffix[1:]}); concerning mean "
          f"{m['mean'].value:.3f} (stderr {m['stderr'].value:.3f})")
    for arm, (k, n) in arms.items():
        print(f"  arm {arm}: {k}/{n} concerning")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    sp = sub.add_parser("forensics", help="model forensics: pre-registered hypotheses and single-variable replays "
                                          "(E174)",
                        description="Model forensics: register and freeze hypotheses in a hash-chained registry, "
                                    "replay an episode\nwith exactly one variable changed, sweep a dose, verify.",
                        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    ps = sp.add_subparsers(dest="forensics_cmd", required=True,
                           help="the subcommand ('agentmill forensics SUBCOMMAND -h' shows its flags)")
    r = ps.add_parser("register", help="add (or revise) a hypothesis in a registry, optionally freezing it")
    r.add_argument("--registry", required=True, help="registry directory (created if missing; holds ledger.jsonl)")
    r.add_argument("--id", required=True, help="hypothesis id, e.g. H_self_consistency")
    r.add_argument("--statement", default="", help="one sentence stating the hypothesis")
    r.add_argument("--category", default="unknown", choices=("benign", "malign", "unknown"),
                   help="benign or malign explanation (judged by the same rules)")
    r.add_argument("--motive", required=True, help="motive label, e.g. tedium, self_consistency")
    r.add_argument("--predict", action="append", required=True,
                   help="VARIABLE=VALUE:DIRECTION[:MIN_EFFECT] (direction -1, 0 or 1; VALUE 'dose' for a grid); "
                        "repeatable")
    r.add_argument("--positive-control", default="", help="VARIABLE=VALUE known to move the behaviour")
    r.add_argument("--env", default="", help="environment whose domains parse the values (e.g. loyalty)")
    r.add_argument("--author", default="cli", help="who registers it (kept in the entry)")
    r.add_argument("--freeze", action="store_true", help="freeze the hypothesis after registering it")
    r.set_defaults(fn=cmd_register)
    p = ps.add_parser("replay", help="replay an episode with one variable changed (checked on the rendered text)")
    p.add_argument("episode", help="an episode JSONL file, or env:NAME to record a fresh incident episode first")
    p.add_argument("--set", action="append", default=[], help="VARIABLE=VALUE, the one change (omit: no change)")
    p.add_argument("--rewind", default="first_exposure",
                   help="first_exposure (default), start, or a step index not after the first exposure")
    p.add_argument("--agent", default="planted", help="planted[:POLICY] (default the env's first), organism (the shipped tiny agent organism; "
                        "tedium, loyalty) or an LM spec")
    p.add_argument("--seed", type=int, default=0, help="seed of a fresh episode (env:NAME)")
    p.add_argument("--out", default="", help="directory for original.jsonl and replayed.jsonl")
    p.add_argument("--mode", default="decision", choices=("decision", "episode"),
                   help="for env:NAME, record the incident in decision mode (one turn, default) or episode mode (a "
                        "free tool loop in the in-memory workspace); an episode file carries its own mode")
    p.add_argument("--allow-unvalidated", action="store_true",
                   help="with --agent organism: run an organism whose card records failed gates (stamped)")
    p.set_defaults(fn=_exit3(cmd_replay))
    w = ps.add_parser("sweep", help="dose-response sweep of a numeric variable: d50, trend test, zero_below")
    w.add_argument("env", help="environment name (tedium, loyalty, secret_number, sandbag, whistle, oversight)")
    w.add_argument("--variable", required=True, help="the numeric variable to sweep over its grid")
    w.add_argument("--set", action="append", default=[], help="VARIABLE=VALUE for the other variables; repeatable")
    w.add_argument("--agent", default="planted",
                   help="planted[:POLICY], organism (the shipped tiny agent organism) or an LM spec")
    w.add_argument("--n", type=int, default=100, help="episodes per dose (default 100)")
    w.add_argument("--bootstrap", type=int, default=2000, help="bootstrap resamples of the d50 (default 2000)")
    w.add_argument("--log-dose", action="store_true", help="fit the logistic on log dose")
    w.add_argument("--seed", type=int, default=0, help="seed of the episode streams")
    w.add_argument("--plot", default="", help="write the dose-response curve to this PNG")
    w.add_argument("--allow-unvalidated", action="store_true",
                   help="with --agent organism: run an organism whose card records failed gates (stamped)")
    w.add_argument("--episodes-out", default="",
                   help="a new (or empty) directory: run every episode in full and save it as "
                        "DIR/VARIABLE=DOSE/NNNN.jsonl, readable by forensics replay, mine and export --inspect "
                        "(the counts are then those of the saved episodes)")
    w.set_defaults(fn=_exit3(cmd_sweep))
    m = ps.add_parser("mine", help="mine (motive, variable) hypothesis candidates from episodes' chains of "
                                   "thought: the rule miner, and optionally an LM miner beside it",
                      epilog=MINE_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    m.add_argument("episodes", help="an episode JSONL file or a directory of them, one environment (e.g. the "
                                    "--episodes-out of forensics sweep)")
    m.add_argument("--miner", default="rule", choices=("rule", "lm"),
                   help="rule: the env's motive cue sentences vote (default); lm: an LM proposes candidates in "
                        "a fixed JSON format (the rule miner's result is printed beside it)")
    m.add_argument("--lm", default="", help="with --miner lm: the miner's model spec (hf:..., openai:M@URL, ...)")
    m.add_argument("--recording", default=None,
                   help="with --miner lm: a call recording (JSONL) to record the miner's calls to or answer them "
                        "from (see --replay-mode)")
    m.add_argument("--replay-mode", default="replay", choices=("replay", "record", "record-missing"),
                   help="with --recording: replay from the file without loading the model (a miss is an error), "
                        "record (ask the model, append), or record-missing (default replay)")
    m.add_argument("--min-votes", type=int, default=2,
                   help="episodes that must show a candidate for it to be kept (default 2)")
    m.set_defaults(fn=cmd_mine)
    v = ps.add_parser("verify", help="verify a registry's hash chain and rules, or a stored replay against its "
                                     "original")
    v.add_argument("path", help="a registry directory, or an original episode JSONL file")
    v.add_argument("--replayed", default=None, help="with an episode file: the replayed episode to check")
    v.set_defaults(fn=cmd_verify)
    x = ps.add_parser("export", help="write episodes (a replay's pair, or a directory of episode files) as an "
                                     "Inspect eval log: one sample per episode, arm in metadata, concerning score",
                      epilog=EXPORT_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    x.add_argument("--inspect", action="store_true",
                   help="write an Inspect eval log through inspect_ai.log (the one format; needs the 'inspect' "
                        "extra: pip install 'agentmill[inspect]')")
    x.add_argument("--in", dest="src", required=True,
                   help="an episode JSONL file, or a directory of them (e.g. the --out of forensics replay)")
    x.add_argument("--out", required=True, help="the log file: NAME.eval (Inspect's zip log) or NAME.json")
    x.set_defaults(fn=cmd_export)
