"""``agentmill g2po``: step advantages and state graphs of rollout groups (E165; docs/methods/g2po.md).

    agentmill g2po advantages --in rollouts.jsonl --estimator grpo|gigpo|g2po
                              [--key exact|hash|fields:description,inventory|scrub:REGEX|scrub:unique|similar:0.95]
                              [--gamma 0.95 --omega 1] [--set FIELD=VALUE ...] --out adv.jsonl
        prints the estimator's and the state graph's diagnostics (merge rate, shared-visit fraction, ...) as JSON
    agentmill g2po graph --in rollouts.jsonl --group G [--key ...] [--gamma 0.95] --dot out.dot

A thin face over ``agentmill.methods.g2po`` (GRPO, GiGPO, G2PO-style (reconstructed)). ``--set`` reaches any
other field of the estimator's frozen config (``--set graph_norm=mean --set visit=first``); an unknown field or
value exits 2. The advantage file is JSONL: a header line ``{"schema": "agentmill.advantages/1", "kind":
"header", estimator, key, config, diagnostics, source}``, then one line per trajectory ``{"kind": "trajectory",
group_id, traj_id, t, advantages, episode, step, returns}`` (lists over the trajectory's steps, in step order).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import warnings
from pathlib import Path
from typing import Any

from agentmill.cli.files import output_path, read_rollouts
from agentmill.core.records import write_jsonl_atomic, write_text_atomic

ADVANTAGES_SCHEMA = "agentmill.advantages/1"
ESTIMATORS = ("grpo", "gigpo", "g2po")
DEFAULT_KEY = "fields:description,inventory"
"""[R] ``FieldsKey(("description", "inventory"))`` is the default for TextWorld and KeyDoor."""


def _parse_value(field: dataclasses.Field, text: str) -> Any:
    """A ``--set`` value for a config field, typed by the field's current default."""
    default = field.default
    if isinstance(default, bool):
        if text.lower() not in ("true", "false"):
            raise ValueError(f"--set {field.name}: expected true or false, got {text!r}")
        return text.lower() == "true"
    if isinstance(default, float) or field.name == "similarity":
        if field.name == "similarity" and text.lower() == "none":
            return None
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"--set {field.name}: expected a number, got {text!r}") from None
    return text


def estimator_config(name: str, gamma: float | None, omega: float | None, sets: list[str] | None,
                     similarity: float | None) -> Any:
    """The frozen config of estimator ``name`` with the command-line overrides (validated by the dataclass)."""
    from agentmill.methods.g2po.config import G2POConfig, GiGPOConfig, GRPOConfig

    cls = {"grpo": GRPOConfig, "gigpo": GiGPOConfig, "g2po": G2POConfig}[name]
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kw: dict[str, Any] = {}
    for flag, value in (("gamma", gamma), ("omega", omega)):
        if value is not None:
            if flag not in fields:
                raise ValueError(f"--{flag} does not apply to {name} (it has no {flag}: GRPO is undiscounted)")
            kw[flag] = value
    for item in sets or []:
        k, eq, v = item.partition("=")
        k = k.strip()
        if not eq or not k:
            raise ValueError(f"--set expects FIELD=VALUE, got {item!r}")
        if k not in fields:
            raise ValueError(f"--set {k}: {cls.__name__} has no field {k!r}; fields: {', '.join(fields)}")
        if k in kw:
            raise ValueError(f"{k} is given twice")
        kw[k] = _parse_value(fields[k], v.strip())
    if similarity is not None:
        if name != "gigpo":
            raise ValueError(f"--key similar:θ is GiGPO's similarity grouping; {name} needs a per-observation key "
                             "(exact, hash, fields:..., scrub:...)")
        kw.setdefault("similarity", similarity)
    return cls(**kw)  # __post_init__ raises ValueError on a bad value


def _finite(name: str, v: float | None) -> float | None:
    if v is not None and not (v == v and abs(v) != float("inf")):
        raise ValueError(f"--{name} must be a finite number, got {v}")
    return v


def _with_warnings(fn, *a, **kw):
    """Run ``fn``; its warnings (low merge rate, copied terminal rewards) become one stderr line each."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn(*a, **kw)
    for w in caught:
        print(f"agentmill: warning: {w.message}", file=sys.stderr)
    return out


def cmd_advantages(args: argparse.Namespace) -> int:
    from agentmill.methods.g2po.core import g2po_advantages, gigpo_advantages, grpo_advantages
    from agentmill.methods.g2po.graph import build_state_graph
    from agentmill.methods.g2po.keys import key_from_spec

    if args.estimator not in ESTIMATORS:
        raise ValueError(f"--estimator must be one of {', '.join(ESTIMATORS)}, got {args.estimator!r}")
    key_fn, similarity = key_from_spec(args.key)
    cfg = estimator_config(args.estimator, _finite("gamma", args.gamma), _finite("omega", args.omega), args.set,
                           similarity)
    out = output_path(args.out, "--out")
    table, _, _ = read_rollouts(args.inp)
    try:
        if args.estimator == "grpo":
            res = _with_warnings(grpo_advantages, table, cfg)
        elif args.estimator == "gigpo":
            res = _with_warnings(gigpo_advantages, table, key_fn, cfg)
        else:
            res = _with_warnings(g2po_advantages, table, key_fn, cfg)
        # the graph facts predict whether G2PO can differ from GRPO [R]: report them for every estimator
        graph = None if args.estimator == "g2po" else build_state_graph(
            table, key_fn, gamma=getattr(cfg, "gamma", 0.95)).diagnostics()
    except KeyError as exc:  # e.g. FieldsKey naming a field the rollouts' info lacks (the message names the row)
        raise ValueError(f"--key {args.key}: {exc.args[0]}") from None
    except TypeError as exc:
        raise ValueError(f"--key {args.key}: {exc}") from None
    diagnostics = dict(res.diagnostics)
    if graph is not None:
        diagnostics["graph"] = graph
    header = {"schema": ADVANTAGES_SCHEMA, "kind": "header", "estimator": args.estimator, "key": args.key,
              "config": dataclasses.asdict(cfg), "diagnostics": diagnostics, "source": str(Path(args.inp))}
    starts = table.traj_starts.tolist()
    ends = starts[1:] + [len(table)]
    lines: list[dict[str, Any]] = [header]
    for s, e in zip(starts, ends):
        lines.append({"kind": "trajectory", "group_id": str(table.group_id[s]), "traj_id": str(table.traj_id[s]),
                      "t": table.t[s:e].tolist(), "advantages": res.advantages[s:e].tolist(),
                      "episode": res.episode[s:e].tolist(), "step": res.step[s:e].tolist(),
                      "returns": res.returns[s:e].tolist()})
    write_jsonl_atomic(out, lines)
    print(json.dumps({"estimator": args.estimator, "key": args.key, "rows": len(table), "groups": table.n_groups,
                      "trajectories": table.n_trajectories, "out": str(out), "diagnostics": diagnostics}, indent=1))
    return 0


def _group_rows(table: Any, group: str) -> tuple[str, Any]:
    """The group named by id, or by its 0-based position in file order; (group_id, row indices)."""
    import numpy as np

    ids = list(dict.fromkeys(table.group_id.tolist()))
    if group in ids:
        gid = group
    elif group.isdigit() and int(group) < len(ids):
        gid = ids[int(group)]
    else:
        shown = ", ".join(repr(g) for g in ids[:3]) + (", ..." if len(ids) > 3 else "")
        raise ValueError(f"--group {group!r}: no such group; give a group_id ({shown}) or an index 0..{len(ids) - 1}")
    return gid, np.flatnonzero(table.group_id == gid)


def cmd_graph(args: argparse.Namespace) -> int:
    from agentmill.methods.g2po.graph import build_state_graph
    from agentmill.methods.g2po.keys import key_from_spec

    key_fn, similarity = key_from_spec(args.key)
    if similarity is not None:
        raise ValueError("--key similar:θ is a grouping pass, not a state key; the graph needs exact, hash, "
                         "fields:... or scrub:...")
    cfg = estimator_config("g2po", _finite("gamma", args.gamma), None, None, None)
    dot = output_path(args.dot, "--dot")
    table, _, _ = read_rollouts(args.inp)
    gid, rows = _group_rows(table, args.group)
    try:
        graph = _with_warnings(build_state_graph, table.take(rows), key_fn, gamma=cfg.gamma, visit=cfg.visit,
                               truncation=cfg.truncation)
    except (KeyError, TypeError) as exc:
        raise ValueError(f"--key {args.key}: {exc.args[0] if isinstance(exc, KeyError) else exc}") from None
    write_text_atomic(dot, graph.to_dot(gid))
    print(json.dumps({"group": gid, "dot": str(dot), "key": args.key, "gamma": cfg.gamma,
                      "diagnostics": graph.diagnostics()}, indent=1))
    return 0


EXAMPLES = """\
examples:
  agentmill g2po advantages --in rollouts.jsonl --estimator g2po --out adv.jsonl
  agentmill g2po advantages --in rollouts.jsonl --estimator gigpo --key similar:0.95 --out adv-gigpo.jsonl
  agentmill g2po graph --in rollouts.jsonl --group 0 --dot group0.dot"""


def register(sub) -> None:
    sp = sub.add_parser("g2po", help="GRPO / GiGPO / G2PO-style (reconstructed) step advantages and state graphs",
                        description="Step advantages of rollout groups (from 'agentmill envs rollout'): GRPO's "
                                    "episode-level baseline, GiGPO's\nanchor-state groups, and G2PO-style credit from "
                                    "a graph of the states the group revisits.",
                        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    gs = sp.add_subparsers(dest="g2po_cmd", required=True,
                           help="the subcommand ('agentmill g2po SUBCOMMAND -h' shows its flags)")
    a = gs.add_parser("advantages", help="advantages of every step of a rollout file, with graph diagnostics")
    a.add_argument("--in", dest="inp", metavar="ROLLOUTS", required=True, help="rollouts JSONL (agentmill.rollout/1)")
    a.add_argument("--estimator", required=True,
                   help="grpo (episode advantage only) | gigpo (plus step groups of equal states) | g2po (plus credit "
                        "from the state graph)")
    a.add_argument("--key", default=DEFAULT_KEY,
                   help=f"state key: exact | hash | fields:a,b | scrub:REGEX | scrub:unique | similar:θ (GiGPO only); "
                        f"default {DEFAULT_KEY}")
    a.add_argument("--gamma", type=float, default=None, help="discount (default 0.95; gigpo, g2po)")
    a.add_argument("--omega", type=float, default=None, help="weight of the step/graph term (default 1; gigpo, g2po)")
    a.add_argument("--set", action="append", metavar="FIELD=VALUE", help="any other field of the estimator's config")
    a.add_argument("--out", required=True, help="advantages JSONL")
    a.set_defaults(fn=cmd_advantages)
    g = gs.add_parser("graph", help="the merged state-transition graph of one group as Graphviz DOT")
    g.add_argument("--in", dest="inp", metavar="ROLLOUTS", required=True, help="rollouts JSONL (agentmill.rollout/1)")
    g.add_argument("--group", required=True, help="a group_id, or its 0-based index in the file")
    g.add_argument("--key", default=DEFAULT_KEY, help=f"state key (default {DEFAULT_KEY})")
    g.add_argument("--gamma", type=float, default=None, help="discount of node values and TD errors (default 0.95)")
    g.add_argument("--dot", required=True, help="output .dot file")
    g.set_defaults(fn=cmd_graph)
