"""``agentmill progress``: the free progress-advantage grader (E173; docs/methods/progress_advantage.md).

    agentmill progress score --in rollouts.jsonl --policy SPEC --reference SPEC
                             [--beta 1 --token-agg sum --step-agg sum --action-space free_text] --out scores.json
    agentmill progress bon --in scores.json --rollouts rollouts.jsonl [--step-agg sum]
    agentmill progress auroc --in scores.json --rollouts rollouts.jsonl [--step-agg sum]
    agentmill progress attribute --in scores.json --rollouts rollouts.jsonl [--method min_cumulative]
                                 [--out picks.jsonl]

A SPEC is any lm-layer model spec (``hf:DIR``, ``tiny:DIR``, ``tiny:new?seed=1``, ``scripted:whitebox``), or
``hf:BASE+adapter=DIR`` for a LoRA policy scored against its own base (``--reference hf:BASE``): one copy of the
weights with the adapter on and off (``lm.pair.HFPair``).

A thin face over ``agentmill.methods.progress_advantage``. ``score`` renders each trajectory in the plain layout
(``Episode.from_steps``: observation, ``"\\n> "``, action, newline — renderer ``plain/1``), scores both models once
per trajectory and writes the package's score file (``agentmill.progress_scores/1``: one JSON document, written
atomically, holding the pair's identity — model specs, tokenizer fingerprints, β, token aggregation, ratio mode,
action space, renderer — and per-trajectory step scores keyed by (group_id, traj_id)). The analysis commands join
that file with the rollouts it was computed from (success, return, oracle progress labels) and refuse a file whose
trajectories or step counts do not match. Every AUROC carries a 95 % bootstrap CI; step-error AUROC resamples whole
trajectories (progress_advantage README deviation 7).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import warnings
from typing import Any

from agentmill.cli.files import existing_file, output_path, read_rollouts
from agentmill.core.records import write_jsonl_atomic

ADAPTER_MARK = "+adapter="


def _finite(name: str, v: float) -> float:
    if not (v == v and abs(v) != float("inf")):
        raise ValueError(f"--{name} must be a finite number, got {v}")
    return v


def load_pair(policy: str, reference: str) -> tuple[Any, Any, Any]:
    """(policy LM, reference LM, the object keeping them alive). ``hf:BASE+adapter=DIR`` loads one HFPair."""
    if ADAPTER_MARK in reference:
        raise ValueError(f"--reference {reference}: the reference is a plain model; put +adapter= on --policy")
    if ADAPTER_MARK in policy:
        base, _, adapter = policy.partition(ADAPTER_MARK)
        if not base.startswith("hf:") or not adapter:
            raise ValueError(f"--policy {policy}: expected hf:BASE+adapter=DIR")
        if reference != base:
            raise ValueError(f"--policy {policy} is a LoRA adapter over {base}; --reference must be {base} (the same "
                             f"weights with the adapter off), got {reference}")
        from agentmill.lm.pair import HFPair

        pair = HFPair(base.removeprefix("hf:"), adapter=adapter)
        return pair.policy, pair.reference, pair
    from agentmill.lm import load_lm, parse_spec

    parse_spec(policy)  # a malformed spec fails before anything loads
    parse_spec(reference)
    pol = load_lm(policy)
    return pol, load_lm(reference), None


def cmd_score(args: argparse.Namespace) -> int:
    import numpy as np

    from agentmill.cli.bars import started_bar
    from agentmill.methods.progress_advantage.config import PAConfig
    from agentmill.methods.progress_advantage.scorer import ProgressAdvantageScorer, episodes_from_table, write_scores

    cfg = PAConfig(beta=_finite("beta", args.beta), token_agg=args.token_agg, step_agg=args.step_agg,
                   ratio_mode=args.ratio_mode, action_space=args.action_space, truncate=args.truncate,
                   top_k=args.top_k)
    if args.batch_size < 1:
        raise ValueError(f"--batch-size must be >= 1, got {args.batch_size}")
    out = output_path(args.out, "--out")
    table, _, _ = read_rollouts(args.inp)
    keyed = episodes_from_table(table)
    if cfg.action_space == "candidates" and any(ep.candidates is None for _, ep in keyed):
        raise ValueError("--action-space candidates needs the admissible set of every step; these rollouts lack "
                         "'candidates' (collected with a free-text policy?)")
    pol, ref, _keep = load_pair(args.policy, args.reference)
    scorer = ProgressAdvantageScorer(pol, ref, cfg)
    scores = []
    seen: set[str] = set()
    prog, task = started_bar(len(keyed), f"progress scores ({args.policy} vs {args.reference})")
    try:
        for s in range(0, len(keyed), args.batch_size):
            chunk = [ep for _, ep in keyed[s: s + args.batch_size]]
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                scores += scorer.score_many(chunk, batch_size=args.batch_size)
            # per-chunk "all scores equal" warnings are re-judged over the whole file below; third-party
            # deprecation notices (transformers) are not the user's business here
            seen.update(str(w.message) for w in caught if "step scores equal" not in str(w.message)
                        and not issubclass(w.category, (DeprecationWarning, FutureWarning)))
            prog.advance(task, len(chunk))
    finally:
        prog.stop()
    for msg in sorted(seen):
        print(f"agentmill: warning: {msg}", file=sys.stderr)
    vals = np.concatenate([sc.A for sc in scores])
    vals = vals[~np.isnan(vals)]
    if vals.size >= 2 and np.all(vals == vals[0]):
        print(f"agentmill: warning: all {vals.size} step scores equal {vals[0]:.3g}: the policy equals the reference "
              "(or ignores the context); the progress advantage carries no signal here", file=sys.stderr)
    identity = scorer.identity()
    write_scores(out, [(k, sc) for (k, _), sc in zip(keyed, scores)], identity)
    from agentmill.methods.progress_advantage.core import aggregate_steps

    traj = np.array([aggregate_steps(sc.A, cfg.step_agg) for sc in scores])
    scored = traj[~np.isnan(traj)]
    print(json.dumps({"out": str(out), "identity": identity, "trajectories": len(scores),
                      "steps": int(sum(len(sc) for sc in scores)),
                      "missing_steps": int(sum(sc.n_missing for sc in scores)),
                      "unscored_trajectories": int(traj.size - scored.size),
                      "truncated_left": int(sum(sc.n_truncated_left for sc in scores)),
                      f"mean_trajectory_score_{cfg.step_agg}": float(scored.mean()) if scored.size else None},
                     indent=1))
    return 0


def _num(x: float) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


def _est(e: Any) -> dict[str, Any]:
    d = e.to_dict()
    return {k: (_num(v) if isinstance(v, float) else v) for k, v in d.items()}


def load_joined(scores_path: str, rollouts_path: str) -> dict[str, Any]:
    """The score file joined with its rollouts, per trajectory in score-file order: key, A, success, return,
    progress labels (or None), actions. Refuses scores that do not belong to these rollouts."""
    from agentmill.methods.progress_advantage.scorer import read_scores

    p = existing_file(scores_path, "--in")
    try:
        with open(p, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"--in {p}: not a progress-score file (not JSON: {exc})") from None
    try:
        keyed = read_scores(p)
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"--in {p}: not a progress-score file ({type(exc).__name__}: {exc})") from None
    table, labels, records = read_rollouts(rollouts_path, "--rollouts")
    starts = table.traj_starts.tolist()
    ends = starts[1:] + [len(table)]
    rows = {(str(table.group_id[s]), str(table.traj_id[s])): (s, e) for s, e in zip(starts, ends)}
    task_of = {(str(r["group_id"]), str(r["traj_id"])): str(r.get("task_id", r["group_id"])) for r in records}
    out: list[dict[str, Any]] = []
    for key, sc in keyed:
        k = tuple(str(x) for x in key) if isinstance(key, tuple) else key
        if k not in rows:
            raise ValueError(f"--in {p}: trajectory {key} is not in {rollouts_path}; these scores were computed from "
                             "other rollouts")
        s, e = rows[k]
        if len(sc) != e - s:
            raise ValueError(f"--in {p}: trajectory {key} has {len(sc)} scored steps but {e - s} steps in "
                             f"{rollouts_path}; these scores were computed from other rollouts")
        out.append({"key": k, "task": task_of.get(k, k[0]), "A": sc.A, "success": bool(table.success[s]),
                    "return": float(table.reward[s:e].sum()), "actions": [str(a) for a in table.action[s:e]],
                    "progress": None if labels is None else labels.progress[s:e],
                    "dead_end": None if labels is None else labels.dead_end[s:e]})
    if not out:
        raise ValueError(f"--in {p}: no scored trajectories")
    return {"identity": doc.get("identity"), "trajectories": out}


def _check_agg(how: str) -> str:
    from agentmill.methods.progress_advantage.config import STEP_AGGS

    if how not in STEP_AGGS:
        raise ValueError(f"--step-agg must be one of {', '.join(STEP_AGGS)}, got {how!r}")
    return how


def _traj_scores(joined: dict[str, Any], how: str) -> list[float]:
    from agentmill.methods.progress_advantage.core import aggregate_steps

    return [aggregate_steps(t["A"], how) for t in joined["trajectories"]]


def cmd_bon(args: argparse.Namespace) -> int:
    from agentmill.core.stats import paired_diff
    from agentmill.methods.progress_advantage.core import best_of_n

    how = _check_agg(args.step_agg)
    joined = load_joined(args.inp, args.rollouts)
    by_group: dict[str, list[float]] = {}
    succ: dict[str, list[bool]] = {}
    # the N candidates of one task are one group (N rollouts of the same task)
    for t, score in zip(joined["trajectories"], _traj_scores(joined, how)):
        by_group.setdefault(t["key"][0], []).append(score)
        succ.setdefault(t["key"][0], []).append(t["success"])
    res = best_of_n(by_group, succ, seed=args.seed)
    gain = (paired_diff(res.picked_success, res.mean_success, seed=args.seed) if res.picked_success.size >= 2
            else None)
    print(json.dumps({"identity": joined["identity"], "step_agg": how, "tasks": len(res.tasks),
                      "n_per_task": sorted({len(v) for v in by_group.values()}),
                      "best_of_n_success": _num(res.success), "pass_at_1": _num(res.pass_at_1),
                      "pass_at_n": _num(res.pass_at_n),
                      "gain_over_random_pick": None if gain is None else _est(gain),
                      "ties": res.n_ties, "excluded_tasks": res.n_excluded_tasks}, indent=1))
    return 0


def cmd_auroc(args: argparse.Namespace) -> int:
    from agentmill.methods.progress_advantage.core import return_spearman, step_error_auroc, success_auroc

    how = _check_agg(args.step_agg)
    joined = load_joined(args.inp, args.rollouts)
    trajs = joined["trajectories"]
    scores = _traj_scores(joined, how)
    report: dict[str, Any] = {"identity": joined["identity"], "step_agg": how, "trajectories": len(trajs),
                              "successes": sum(t["success"] for t in trajs)}
    ys = [t["success"] for t in trajs]
    if 0 < sum(ys) < len(ys):
        est, excluded = success_auroc(scores, ys, n_boot=args.n_boot, seed=args.seed)
        report["success_auroc"] = {**_est(est), "excluded_nan": excluded}
    else:
        report["success_auroc"] = None
        report["success_auroc_note"] = "needs both successful and failed trajectories"
    if len({t["return"] for t in trajs}) >= 2:
        est, excluded = return_spearman(scores, [t["return"] for t in trajs], n_boot=args.n_boot, seed=args.seed)
        report["return_spearman"] = {**_est(est), "excluded_nan": excluded}
    if trajs[0]["progress"] is None:
        report["step_error_auroc"] = None
        report["step_error_auroc_note"] = "the rollouts carry no oracle progress labels"
    else:
        try:
            r = step_error_auroc([t["A"] for t in trajs], [t["progress"] for t in trajs], n_boot=args.n_boot,
                                 seed=args.seed)
            report["step_error_auroc"] = {**_est(r.estimate), "steps": r.n_steps, "errors": r.n_errors,
                                          "unknown_label": r.n_unknown_label, "missing_score": r.n_missing_score}
        except ValueError as exc:  # only one class of steps: undefined, said so rather than failing the command
            report["step_error_auroc"] = None
            report["step_error_auroc_note"] = str(exc)
    print(json.dumps(report, indent=1))
    return 0


def cmd_attribute(args: argparse.Namespace) -> int:
    import numpy as np

    from agentmill.methods.progress_advantage.core import ATTRIBUTION_METHODS, attribute_failure, attribution_metrics

    if args.method not in ATTRIBUTION_METHODS:
        raise ValueError(f"--method must be one of {', '.join(ATTRIBUTION_METHODS)}, got {args.method!r}")
    out = output_path(args.out, "--out") if args.out else None
    joined = load_joined(args.inp, args.rollouts)
    failed = [t for t in joined["trajectories"] if not t["success"]]
    picks = []
    for t in failed:
        a = attribute_failure(t["A"], args.method)
        # the known decisive step, when the oracle has one: the first step that entered a dead end
        true = None
        if t["dead_end"] is not None and np.any(t["dead_end"]):
            true = int(np.argmax(t["dead_end"]))
        picks.append({"group_id": t["key"][0], "traj_id": t["key"][1], "step": a.index,
                      "action": t["actions"][a.index], "fallback": a.fallback, "true_step": true})
    report: dict[str, Any] = {"identity": joined["identity"], "method": args.method, "failed_trajectories": len(failed),
                              "fallback_rate": _num(float(np.mean([p["fallback"] for p in picks]))) if picks
                              else None}
    known = [(t, p) for t, p in zip(failed, picks) if p["true_step"] is not None]
    if known:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            m = attribution_metrics([t["A"] for t, _ in known], [p["true_step"] for _, p in known], args.method)
        for w in caught:
            print(f"agentmill: warning: {w.message}", file=sys.stderr)
        report["with_known_decisive_step"] = {
            "n": m.n, "accuracy": m.accuracy, "mae_steps": m.mae, "fallback_rate": m.fallback_rate,
            # README caveats: fallbacks pick the first step, which looks like skill when errors come early
            "first_step_baseline_accuracy": float(np.mean([p["true_step"] == 0 for _, p in known])),
            "random_step_baseline_accuracy": float(np.mean([1.0 / len(t["A"]) for t, _ in known]))}
    else:
        report["with_known_decisive_step"] = None
    if out is not None:
        write_jsonl_atomic(out, picks)
        report["out"] = str(out)
    print(json.dumps(report, indent=1))
    return 0


# help texts only; PAConfig validates the values (kept literal so building the parser imports no method code)
HELP_TOKEN_AGGS = ("sum", "mean", "min", "max", "last")
HELP_STEP_AGGS = ("sum", "mean", "min", "max", "last", "bottom10")
HELP_RATIO_MODES = ("per_token", "separate")
HELP_ACTION_SPACES = ("free_text", "candidates")


EXAMPLES = """\
examples:
  agentmill progress score --in rollouts.jsonl --policy hf:smollm2+adapter=lora --reference hf:smollm2 --out scores.json
  agentmill progress auroc --in scores.json --rollouts rollouts.jsonl
  agentmill progress attribute --in scores.json --rollouts rollouts.jsonl --out picks.jsonl"""


def register(sub) -> None:
    sp = sub.add_parser("progress", help="progress advantage β·log(π/π_ref): score rollouts, best-of-N, AUROC, "
                                         "failure attribution (E173)",
                        description="The progress advantage A_t = β·log(π/π_ref) of each step of a rollout, from a "
                                    "post-trained policy and its\nreference model, used as a free step grader.",
                        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    ps = sp.add_subparsers(dest="progress_cmd", required=True,
                           help="the subcommand ('agentmill progress SUBCOMMAND -h' shows its flags)")
    s = ps.add_parser("score", help="step scores of every trajectory under a (policy, reference) pair")
    s.add_argument("--in", dest="inp", metavar="ROLLOUTS", required=True, help="rollouts JSONL (agentmill.rollout/1)")
    s.add_argument("--policy", required=True,
                   help="the post-trained policy π: an LM spec, or hf:BASE+adapter=DIR for a LoRA adapter over BASE")
    s.add_argument("--reference", required=True, help="LM spec of the reference model π_ref (hf:BASE for an adapter)")
    s.add_argument("--beta", type=float, default=1.0, help="β (official default 1.0; rescales, ranks unchanged)")
    s.add_argument("--token-agg", default="sum",
                   help="how an action's token log-ratios become its step score: "
                        + " | ".join(HELP_TOKEN_AGGS) + " (default sum, the exact one)")
    s.add_argument("--step-agg", default="sum",
                   help="how step scores become a trajectory score, for the printed summary: "
                        + " | ".join(HELP_STEP_AGGS) + " (default sum)")
    s.add_argument("--action-space", default="free_text",
                   help="free_text: log-prob of the action text (default); candidates: normalised over the step's "
                        "admissible commands (needs rollouts with 'candidates')")
    s.add_argument("--ratio-mode", default="per_token",
                   help="per_token: aggregate the token log-ratios (default); separate: aggregate each model's "
                        "log-probs, then subtract (the official scorer's semantics)")
    s.add_argument("--truncate", default="error",
                   help="a rollout longer than the model's context: error (default) or left (drop the oldest tokens; "
                        "steps that lose tokens score NaN)")
    s.add_argument("--top-k", type=int, default=0,
                   help="k of the top-k mean log-prob kept for the self-certainty baseline; 0 = not computed "
                        "(default 0)")
    s.add_argument("--batch-size", type=int, default=4, help="trajectories per forward pass (default 4)")
    s.add_argument("--out", required=True, help="score file (one JSON document)")
    s.set_defaults(fn=cmd_score)
    for name, fn, text in (("bon", cmd_bon, "best-of-N selection per group by trajectory score"),
                           ("auroc", cmd_auroc, "success AUROC, return Spearman and step-error AUROC with CIs"),
                           ("attribute", cmd_attribute, "blame one step of each failed trajectory")):
        a = ps.add_parser(name, help=text)
        a.add_argument("--in", dest="inp", metavar="SCORES", required=True,
                       help="score file of `agentmill progress score`")
        a.add_argument("--rollouts", required=True, help="the rollouts JSONL the scores were computed from")
        a.add_argument("--seed", type=int, default=0, help="tie-breaking / bootstrap seed")
        if name == "attribute":
            a.add_argument("--method", default="min_cumulative",
                           help="rule picking the blamed step: min_cumulative (lowest running total; default), "
                                "sharpest_drop (lowest step score), sharpest_abs_drop (largest fall between steps)")
            a.add_argument("--out", default=None, help="optional JSONL of the per-trajectory picks")
        else:
            a.add_argument("--step-agg", default="sum",
                           help="how step scores become a trajectory score: "
                                + " | ".join(HELP_STEP_AGGS) + " (default sum, the pre-registered one)")
        if name == "auroc":
            a.add_argument("--n-boot", type=int, default=2000,
                           help="bootstrap resamples of each 95%% CI (default 2000)")
        a.set_defaults(fn=fn)
