"""``agentmill envs``: generate TextWorld games and collect rollout groups (docs/methods/g2po.md).

    agentmill envs textworld-games --n 6 --seed 1000 [--world-size 3 --nb-objects 6 --quest-length 3] --out DIR
    agentmill envs rollout --env keydoor-v0|keydoor-unique-v0|textworld:DIR --policy random|table:PATH|lm:SPEC
                           [--groups 20 --n 8 --seed 0 --max-steps N] --out rollouts.jsonl

A thin face over ``agentmill.envs`` (``make_games``, ``make``, ``GamePool``, ``collect_groups``): parsing, calls,
a progress bar and a one-line summary. The rollout file is ``agentmill.rollout/1`` JSONL (``core.types``) (one line per
trajectory, oracle labels under ``label``). Groups are appended to ``<out>.partial`` as they complete (flushed and
fsynced) and the file is renamed to ``<out>`` at the end, so ``<out>`` is always complete; after a Ctrl-C the
completed groups stay in ``<out>.partial``.

``table:PATH`` loads a :class:`~agentmill.envs.policies.SoftmaxTablePolicy` from a JSON file::

    {"schema": "agentmill.table_policy/1",
     "rows": [{"task_id": "keydoor-r6l2d2t-0", "key": ["-= Workshop =-\\n...", "You are carrying nothing."],
               "logits": {"take orange key": 2.0}}]}

where ``key`` is the policy's state key: the ``[description, inventory]`` pair (KeyDoor, TextWorld) or the
whitespace-normalised observation (a string) — ``envs.policies.fields_or_obs_key``. Unlisted logits are 0.

``lm:SPEC`` is ``agentmill.lm.policy.CandidatePolicy`` over the white-box model SPEC (``hf:smollm2``,
``tiny:DIR``, ``scripted:whitebox``) with its default command prompt and temperature 1: the LM chooses among the
admissible commands, π(a|s) = softmax of the candidates' summed log-probs.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

from agentmill.cli.bars import started_bar
from agentmill.cli.files import existing_file, output_path

ENV_CHOICES = "keydoor-v0 | keydoor-unique-v0 | textworld:DIR"
TABLE_POLICY_SCHEMA = "agentmill.table_policy/1"


def _positive(name: str, v: int) -> int:
    if v < 1:
        raise ValueError(f"--{name} must be >= 1, got {v}")
    return v


# ---------------------------------------------------------------------------------------------- textworld-games
def cmd_textworld_games(args: argparse.Namespace) -> int:
    from agentmill.envs.textworld_env import make_games

    _positive("n", args.n)
    if args.seed < 0:
        raise ValueError(f"--seed must be >= 0, got {args.seed}")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out: {out} exists and is not a directory")
    before = set(out.glob("*.z8")) if out.is_dir() else set()
    calibrate = None if args.no_calibrate else (args.calibrate_lo, args.calibrate_hi)
    if calibrate is not None and not 0 <= calibrate[0] <= calibrate[1] <= 1:
        raise ValueError(f"--calibrate-lo/--calibrate-hi must satisfy 0 <= lo <= hi <= 1, got {calibrate}")
    # make_games validates its ranges (world size 1-20, objects 0-50, quest length 1-20) and the textworld install
    # before it creates anything; it copies each kept game into ``out`` as soon as it passes calibration, so the bar
    # polls the folder (generation runs two tw-make processes in parallel inside make_games).
    result: dict[str, Any] = {}

    def work() -> None:
        try:
            result["games"] = make_games(out, args.n, seed0=args.seed, world_size=args.world_size,
                                         nb_objects=args.nb_objects, quest_length=args.quest_length,
                                         calibrate=calibrate, max_steps=args.max_steps)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread
            result["error"] = exc

    t0 = time.perf_counter()
    thread = threading.Thread(target=work, name="make_games", daemon=True)
    prog, task = started_bar(args.n, "TextWorld games (tw-make, calibrated)")
    try:
        thread.start()
        while thread.is_alive():
            thread.join(0.5)
            done = len(set(out.glob("*.z8")) - before) if out.is_dir() else 0
            prog.update(task, completed=min(done, args.n))
        if "games" in result:
            prog.update(task, completed=len(result["games"]))
    finally:
        prog.stop()
    if "error" in result:
        exc = result["error"]
        if isinstance(exc, RuntimeError):  # generation failed or too few games passed calibration: not bad input
            print(f"agentmill: error: {exc}", file=sys.stderr)
            return 1
        raise exc
    games = result["games"]
    print(json.dumps({"games": [str(g) for g in games], "out": str(out), "calibrate": calibrate,
                      "seconds": round(time.perf_counter() - t0, 1)}, indent=1))
    return 0


# ---------------------------------------------------------------------------------------------- rollout
def load_table_policy(path: str | os.PathLike[str]) -> Any:
    """A ``SoftmaxTablePolicy`` from a ``agentmill.table_policy/1`` JSON file (format in the module docstring)."""
    from agentmill.envs.policies import SoftmaxTablePolicy

    p = existing_file(path, "--policy table:")
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"--policy table:{p}: not JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("schema") != TABLE_POLICY_SCHEMA:
        raise ValueError(f"--policy table:{p}: expected a JSON object with schema {TABLE_POLICY_SCHEMA!r}")
    policy = SoftmaxTablePolicy()
    for n, row in enumerate(doc.get("rows") or []):
        try:
            key = row["key"]
            key = tuple(key) if isinstance(key, list) else key
            if not (isinstance(key, str) or (isinstance(key, tuple) and all(isinstance(k, str) for k in key))):
                raise TypeError("key must be a string or a list of strings")
            logits = {str(a): float(v) for a, v in dict(row["logits"]).items()}
            if not all(v == v and abs(v) != float("inf") for v in logits.values()):
                raise ValueError("logits must be finite numbers")
            policy.table[(str(row["task_id"]), key)] = logits
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            what = f"missing field {exc.args[0]!r}" if isinstance(exc, KeyError) else str(exc)
            raise ValueError(f"--policy table:{p}: row {n}: {what}") from None
    return policy


def make_policy(spec: str) -> Any:
    """``random`` | ``table:PATH`` | ``lm:SPEC`` -> a policy with ``act``/``logprob`` (envs.rollout.Policy)."""
    from agentmill.envs.rollout import RandomPolicy

    if spec == "random":
        return RandomPolicy()
    kind, _, arg = spec.partition(":")
    if kind == "table" and arg:
        return load_table_policy(arg)
    if kind == "lm" and arg:
        try:
            from agentmill.lm.policy import CandidatePolicy  # built by the lm layer's owner
        except ImportError:
            raise ValueError(f"--policy {spec}: LM policies need agentmill.lm.policy.CandidatePolicy (an LM choosing "
                             "among the admissible commands), which is not available yet; use random or "
                             "table:PATH") from None
        from agentmill.lm import load_lm

        try:
            return CandidatePolicy(load_lm(arg))
        except TypeError as exc:  # e.g. a black-box model: candidates are scored through forward()
            raise ValueError(f"--policy {spec}: {exc}") from None
    raise ValueError(f"--policy must be random, table:PATH or lm:SPEC, got {spec!r}")


def env_tasks(env: str, groups: int, seed: int, max_steps: int | None, calibrate: bool) -> tuple[Any, list[Any], str]:
    """(task -> env factory, one task per group, the env name recorded in the file)."""
    from agentmill.envs.base import make

    if env in ("keydoor-v0", "keydoor-unique-v0"):
        from agentmill.envs.keydoor import KeyDoorConfig, layouts

        cfg = KeyDoorConfig() if max_steps is None else KeyDoorConfig(max_steps=max_steps)
        # one calibrated layout per group (random-policy success in [0.05, 0.5] under this config [R]),
        # from seeds seed, seed+1, ...
        try:
            tasks = layouts(groups, seed, calibrate=(0.05, 0.5) if calibrate else None, config=cfg)
        except RuntimeError as exc:  # no layout in the interval under this config (e.g. a tiny --max-steps)
            raise ValueError(f"{exc}; or pass --no-calibrate") from None
        return (lambda lay: make(env, layout=lay, config=cfg)), tasks, env
    kind, _, arg = env.partition(":")
    if kind == "textworld" and arg:
        from agentmill.envs.textworld_env import GamePool

        folder = Path(arg)
        if not folder.is_dir():
            raise ValueError(f"--env textworld:{arg}: no such directory")
        try:
            pool = GamePool(folder, max_steps=max_steps or 40)
        except FileNotFoundError as exc:
            raise ValueError(str(exc)) from None
        # groups cycle over the sorted games; a game listed twice gives two groups with different rollout seeds
        return pool, [pool.tasks[k % len(pool)] for k in range(groups)], f"textworld:{folder}"
    raise ValueError(f"--env must be one of {ENV_CHOICES}, got {env!r}")


class _Counted:
    """Forwards a TextEnv and ticks the progress bar when the collector closes it (once per completed group)."""

    def __init__(self, env: Any, tick: Any) -> None:
        self._env, self._tick = env, tick

    def reset(self, **kw: Any) -> Any:
        return self._env.reset(**kw)

    def step(self, action: str) -> Any:
        return self._env.step(action)

    def close(self) -> None:
        self._env.close()
        self._tick()


def cmd_rollout(args: argparse.Namespace) -> int:
    from agentmill import __version__
    from agentmill.envs.rollout import collect_groups
    from agentmill.experiments.runner import git_commit

    _positive("groups", args.groups)
    _positive("n", args.n)
    if args.max_steps is not None:
        _positive("max-steps", args.max_steps)
    out = output_path(args.out, "--out")
    policy = make_policy(args.policy)
    factory, tasks, env_name = env_tasks(args.env, args.groups, args.seed, args.max_steps, not args.no_calibrate)
    partial = out.with_name(out.name + ".partial")
    out.parent.mkdir(parents=True, exist_ok=True)
    if partial.exists():
        partial.unlink()  # a stale partial of an earlier interrupted run: never append to it
    meta = {"policy": args.policy, "agentmill": __version__, "git": git_commit(), "group_size": args.n,
            "max_steps": args.max_steps}
    t0 = time.perf_counter()
    prog, task = started_bar(len(tasks), f"rollout groups ({env_name}, N={args.n})")
    try:
        steps, labels, _ = collect_groups(lambda t: _Counted(factory(t), lambda: prog.advance(task)), policy, tasks,
                                          group_size=args.n, seed=args.seed, out=partial,
                                          env_name=env_name, meta=meta)
    except KeyboardInterrupt:
        prog.stop()
        if partial.exists():
            print(f"agentmill: completed groups kept in {partial}", file=sys.stderr)
        raise
    except BaseException:
        prog.stop()
        if partial.exists():
            partial.unlink()
        raise
    prog.stop()
    os.replace(partial, out)
    known = labels.progress >= 0
    print(json.dumps({"out": str(out), "env": env_name, "policy": args.policy, "groups": steps.n_groups,
                      "trajectories": steps.n_trajectories, "steps": len(steps),
                      "success_rate": round(float(steps.success[steps.traj_starts].mean()), 4),
                      "progress_labelled_steps": int(known.sum()), "seconds": round(time.perf_counter() - t0, 2)},
                     indent=1))
    return 0


EXAMPLES = """\
examples:
  agentmill envs rollout --env keydoor-v0 --policy random --groups 20 --n 8 --out rollouts.jsonl
  agentmill envs textworld-games --n 6 --seed 1000 --out games
  agentmill envs rollout --env textworld:games --groups 6 --out tw-rollouts.jsonl"""


def register(sub) -> None:
    sp = sub.add_parser("envs", help="text environments: generate TextWorld games, collect rollout groups",
                        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    es = sp.add_subparsers(dest="envs_cmd", required=True,
                           help="the subcommand ('agentmill envs SUBCOMMAND -h' shows its flags)")
    g = es.add_parser("textworld-games", help="generate calibrated TextWorld games offline with tw-make")
    g.add_argument("--n", type=int, required=True, help="games to keep")
    g.add_argument("--seed", type=int, default=1000, help="first tw-make seed (then seed+1, ...)")
    g.add_argument("--world-size", type=int, default=3, help="rooms (1-20)")
    g.add_argument("--nb-objects", type=int, default=6, help="objects (0-50)")
    g.add_argument("--quest-length", type=int, default=3, help="quest length (1-20)")
    g.add_argument("--max-steps", type=int, default=40, help="episode length of the calibration runs")
    g.add_argument("--calibrate-lo", type=float, default=0.05, help="keep games whose random-policy success ...")
    g.add_argument("--calibrate-hi", type=float, default=0.6, help="... over 16 episodes lies in [lo, hi]")
    g.add_argument("--no-calibrate", action="store_true", help="keep every generated game")
    g.add_argument("--out", required=True, help="folder receiving tw_<seed>.z8 + .json")
    g.set_defaults(fn=cmd_textworld_games)
    r = es.add_parser("rollout", help="collect groups of rollouts into an agentmill.rollout/1 JSONL file")
    r.add_argument("--env", required=True, help=ENV_CHOICES)
    r.add_argument("--policy", default="random", help="random | table:PATH | lm:SPEC")
    r.add_argument("--groups", type=int, default=20, help="groups (one task each: a KeyDoor layout or a game)")
    r.add_argument("--n", type=int, default=8, help="rollouts per group (GiGPO's N = 8)")
    r.add_argument("--seed", type=int, default=0, help="seeds the KeyDoor layouts and every rollout")
    r.add_argument("--max-steps", type=int, default=None,
                   help="episode step limit (default: the env's own, 30 for KeyDoor, 40 for TextWorld)")
    r.add_argument("--no-calibrate", action="store_true", help="KeyDoor: keep uncalibrated layouts")
    r.add_argument("--out", required=True, help="rollouts JSONL")
    r.set_defaults(fn=cmd_rollout)
    register_pyrepo(es)


# ---------------------------------------------------------------------------------------------- pyrepo
PYREPO_EXAMPLES = """examples:
  agentmill envs pyrepo fetch --packages cachetools==8.0.1,toolz==1.2.0 --mine 6
  agentmill envs pyrepo list
  agentmill envs pyrepo mutate --package cachetools==8.0.1 --n 4 --seed 0 --out tasks.jsonl
  agentmill envs pyrepo mutate --package fixture --n 2 --out fixture-tasks.jsonl"""


def cmd_pyrepo_fetch(args: argparse.Namespace) -> int:
    from agentmill.envs.pyrepo import fetch, seed_bugs

    if args.mine < 0:
        raise ValueError(f"--mine must be >= 0, got {args.mine}")
    rows = []
    for spec in [p.strip() for p in args.packages.split(",") if p.strip()]:
        t0 = time.perf_counter()
        repo = fetch(spec)
        n = len(seed_bugs(repo, args.mine, seed=args.seed)) if args.mine else 0
        rows.append({"package": spec, "tests_selected": len(repo.passing), "tests_deselected": list(repo.deselected),
                     "suite_wall_s": round(repo.suite_wall_s, 2), "instances_mined": n,
                     "seconds": round(time.perf_counter() - t0, 1), "root": str(repo.root)})
        print(json.dumps(rows[-1]))
    return 0


def cmd_pyrepo_list(args: argparse.Namespace) -> int:
    from agentmill.envs.pyrepo import PACKAGES, cached, open_repo
    from agentmill.envs.pyrepo.mutate import attempts

    for spec, pkg in PACKAGES.items():
        row: dict[str, Any] = {"package": spec, "sha256": pkg.sha256[:12], "cached": cached(spec)}
        if row["cached"]:
            repo = open_repo(spec)
            log = attempts(repo, seed=args.seed)
            row.update(tests_selected=len(repo.passing), suite_wall_s=round(repo.suite_wall_s, 2),
                       mining_attempts=len(log), instances=sum(r["kept"] for r in log))
        print(json.dumps(row))
    return 0


def cmd_pyrepo_mutate(args: argparse.Namespace) -> int:
    from agentmill.core.records import write_jsonl_atomic
    from agentmill.envs.pyrepo import fixture_dir, fixture_repo, open_repo, seed_bugs

    _positive("n", args.n)
    out = output_path(args.out, "--out")
    repo = fixture_repo(fixture_dir()) if args.package == "fixture" else open_repo(args.package)
    prog, task = started_bar(args.n, f"mining seeded bugs in {repo.key}")
    try:
        tasks = seed_bugs(repo, args.n, seed=args.seed, max_tries=args.max_tries,
                          progress=lambda d, n: prog.update(task, completed=d))
    finally:
        prog.stop()
    write_jsonl_atomic(out, [t.to_dict() for t in tasks])
    print(json.dumps({"out": str(out), "package": repo.key, "instances": len(tasks),
                      "ops": sorted({t.mutations[0]["op"] for t in tasks})}))
    return 0


def register_pyrepo(es: argparse._SubParsersAction) -> None:
    pr = es.add_parser("pyrepo", help="real Python repositories from PyPI sdists: fetch, list, seed bugs",
                       epilog=PYREPO_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    ps = pr.add_subparsers(dest="pyrepo_cmd", required=True,
                           help="the subcommand ('agentmill envs pyrepo SUBCOMMAND -h' shows its flags)")
    f = ps.add_parser("fetch", help="pip download (hash-pinned), extract, git init and baseline; the only network use")
    f.add_argument("--packages", default="cachetools==8.0.1,toolz==1.2.0,boltons==26.2.0",
                   help="comma-separated pinned name==version specs")
    f.add_argument("--mine", type=int, default=6, help="also mine this many seeded bugs per package (0: none)")
    f.add_argument("--seed", type=int, default=0, help="mining seed")
    f.set_defaults(fn=cmd_pyrepo_fetch)
    ls = ps.add_parser("list", help="the pinned packages, whether each is cached, and the bugs mined so far")
    ls.add_argument("--seed", type=int, default=0, help="mining seed whose log is counted")
    ls.set_defaults(fn=cmd_pyrepo_list)
    m = ps.add_parser("mutate", help="seed bugs (AST mutations killed by the suite) and write them as JSONL")
    m.add_argument("--package", required=True, help="a cached name==version, or 'fixture' (the in-code package)")
    m.add_argument("--n", type=int, default=4, help="instances to keep")
    m.add_argument("--seed", type=int, default=0, help="mining seed (order of the candidate mutations)")
    m.add_argument("--max-tries", type=int, default=None, help="stop after this many pytest-screened mutations")
    m.add_argument("--out", required=True, help="tasks JSONL (SWE-bench-style fields)")
    m.set_defaults(fn=cmd_pyrepo_mutate)
