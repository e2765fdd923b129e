"""``agentmill metis``: run a Metis agent on an AppSim stream, inspect its memory, export it as Agent Skills, and
show the sandbox layers in force (docs/methods/metis.md). A thin face over ``agentmill.methods.metis``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

EXAMPLES = """examples:
  agentmill metis run --mode metis --k 3 --stream zipf --tasks 300 --shift 150 --seed 0 --out runs/metis
  agentmill metis inspect runs/metis
  agentmill metis export-skills runs/metis --to skills/
"""


def cmd_run(args: argparse.Namespace) -> int:
    from agentmill.core.records import write_json_atomic, write_jsonl_atomic
    from agentmill.envs.appsim import TaskStream
    from agentmill.methods.metis import MetisConfig, ScriptedPolicyConfig, run_stream

    out = Path(args.out)
    if (out / "ledger.jsonl").exists():
        raise ValueError(f"--out {out} already holds a memory ledger; choose an empty directory")
    shift = None if args.shift < 0 else args.shift
    cfg = MetisConfig(mode=args.mode, k=args.k, feedback=args.feedback, seed=args.seed, codifier=args.codifier)
    lm = args.lm
    if args.record and not lm:
        raise ValueError("--record needs --lm")
    if lm and args.record:
        from agentmill.lm import load_lm
        from agentmill.lm.replay import RecordReplayLM

        rec = Path(args.record)
        lm = (RecordReplayLM(None, rec, mode="replay", spec=lm) if rec.exists()
              else RecordReplayLM(load_lm(lm), rec, mode="record"))
    stream = TaskStream(kind=args.stream, n_tasks=args.tasks, shift_at=shift, seed=args.seed)
    pol = ScriptedPolicyConfig(p_trust_tool=args.p_trust)
    out.mkdir(parents=True, exist_ok=True)
    r = run_stream(cfg, stream, lm=lm, seed=args.seed, out=out, policy_config=pol)
    write_jsonl_atomic(out / "tasks.jsonl", r.rows)
    write_jsonl_atomic(out / "gate.jsonl", [vars(d) for d in r.gate_log])  # type: ignore[attr-defined]
    summary = {"mode": cfg.mode, "k": cfg.gate_k, "stream": stream.kind, "tasks": stream.n_tasks, "shift": shift,
               "seed": args.seed, "accuracy": r.accuracy(), "accuracy_post_shift_affected":
               r.accuracy("post_shift_affected"), "llm_calls": r.total("llm_calls"), "api_calls": r.total("api_calls"),
               "build_cost": r.total("codifier_calls") + r.total("validation_replays"),
               "tools_admitted": r.admitted(), "tools_never_invoked": r.never_invoked(), "sandbox_layers": r.layers,
               "policy": f"LMPolicy ({args.lm})" if args.lm else "ScriptedPolicy (LLM-free)",
               "p_trust_tool": args.p_trust}
    write_json_atomic(out / "summary.json", summary)
    print(json.dumps(summary, indent=1))
    return 0


def cmd_inspect(args: argparse.Namespace) -> int:
    from agentmill.methods.metis import MemoryStore

    d = Path(args.dir)
    if not (d / "ledger.jsonl").exists():
        raise ValueError(f"{d} has no ledger.jsonl: pass the --out directory of 'agentmill metis run'")
    store = MemoryStore.replay(d)
    problems = store.ledger.verify() if store.ledger is not None else []
    snap_ok = None
    if (d / "snapshot.json").exists():
        snap_ok = json.loads((d / "snapshot.json").read_text()) == json.loads(json.dumps(store.snapshot_dict()))
    print(f"events: {len(store.events)}; ledger intact: {not problems}; replay equals snapshot: {snap_ok}")
    print(f"plans: {len(store.plans())}; facts: {len(store.facts())} current of {len(store.facts(False))}; "
          f"pitfalls: {len(store.pitfalls())}")
    for t in sorted(store.tools(status=None), key=lambda t: t.built_at):
        print(f"  tool {t.tool_id:60s} {t.status:10s} built at {t.built_at:4d}  uses {t.uses:3d}  failures "
              f"{t.failures}")
    for f in store.facts(current_only=False):
        mark = "" if f.superseded_by is None else f"  (superseded by fact #{f.superseded_by})"
        print(f"  fact {f.subject} {f.key} = {f.value}{mark}")
    if (d / "gate.jsonl").exists():
        opened = [json.loads(x) for x in (d / "gate.jsonl").read_text().splitlines() if '"codify": true' in x]
        print(f"gate opened {len(opened)} times: " + ", ".join(f"t={g['t']} {g['key'][:40]}" for g in opened[:10]))
    for p in problems:
        print("  ledger problem:", p)
    return 1 if problems or snap_ok is False else 0


def cmd_export(args: argparse.Namespace) -> int:
    from agentmill.methods.metis import MemoryStore, export_agent_skills

    d = Path(args.dir)
    if not (d / "ledger.jsonl").exists():
        raise ValueError(f"{d} has no ledger.jsonl: pass the --out directory of 'agentmill metis run'")
    paths = export_agent_skills(MemoryStore.replay(d), Path(args.to))
    print(f"wrote {len(paths)} files under {args.to}")
    return 0


def cmd_sandbox_check(args: argparse.Namespace) -> int:
    from agentmill.envs.appsim import AppSim
    from agentmill.methods.metis.toolbox import TOOL_LIMITS, make_sandbox, run_tool

    w = AppSim(0)
    w.begin_task()
    src = "def run(api, **slots):\n    return api.call('auth', 'login', app='notes')['token']\n"
    with make_sandbox() as sb:
        tok, _ = run_tool(sb, src, ("auth.login",), {}, w, budget=5, wall_s=5.0)
        layers = sb.last_layers
    print(f"tool round trip through the broker: {'ok' if tok == 'tok-notes' else 'FAILED'}")
    for k in ("isolation", "seccomp", "unshare_net", "audit_hook"):
        print(f"{k:28s} {layers.get(k, False)}")
    print(f"{'rlimits':28s} CPU {TOOL_LIMITS.cpu_s} s, address space {TOOL_LIMITS.memory_bytes >> 20} MiB, file size "
          f"{TOOL_LIMITS.max_file_bytes}, open files {TOOL_LIMITS.max_open_files}, no core")
    print("static policy                imports math/re/json/datetime only; no eval/exec/open/getattr…, no "
          "underscore attributes, no attribute assignment, no global; one def run(api, **slots)")
    print("note: audit hooks are not a security boundary (PEP 578); hostile code belongs in a container or VM")
    return 0


def register(sub) -> None:
    sp = sub.add_parser("metis", help="text-first agent memory that codifies plans into sandboxed tools only when "
                                      "earned (E168)",
                        description="Metis: keep experience as text (plans, facts, pitfalls); codify a plan into a "
                                    "validated tool\nonly when its query pattern recurs; run tools in a sandbox "
                                    "behind an API broker.",
                        epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)
    ps = sp.add_subparsers(dest="metis_cmd", required=True,
                           help="the subcommand ('agentmill metis SUBCOMMAND -h' shows its flags)")
    r = ps.add_parser("run", help="run one agent over an AppSim task stream (LLM-free ScriptedPolicy)")
    r.add_argument("--mode", default="metis", choices=("metis", "text_only", "code_naive", "eager", "none"),
                   help="memory policy (default metis)")
    r.add_argument("--k", type=int, default=3, help="recurrence gate: codify after k occurrences (default 3)")
    r.add_argument("--stream", default="zipf", choices=("zipf", "disjoint", "uniform"),
                   help="task stream (default zipf)")
    r.add_argument("--tasks", type=int, default=300, help="number of tasks (default 300)")
    r.add_argument("--shift", type=int, default=150,
                   help="index of the first task after the API change; -1 for no change (default 150)")
    r.add_argument("--feedback", default="oracle", choices=("oracle", "none"),
                   help="outcome signal: the world's checker, or none (default oracle)")
    r.add_argument("--p-trust", type=float, default=1.0,
                   help="probability the scripted agent accepts a tool's answer unchecked (default 1.0)")
    r.add_argument("--lm", default=None,
                   help="LM spec for the LLM-driven path (LMPolicy and LMDistiller), e.g. openai:MODEL@URL; "
                        "default: the LLM-free ScriptedPolicy")
    r.add_argument("--codifier", default="compile", choices=("compile", "lm"),
                   help="who writes tools: the LLM-free compiler (default) or the LM (needs --lm)")
    r.add_argument("--record", default=None,
                   help="with --lm: record every LM call to this JSONL file (RecordReplayLM), or replay it if it "
                        "exists")
    r.add_argument("--seed", type=int, default=0, help="seed of the world, the stream and the agent (default 0)")
    r.add_argument("--out", required=True, help="empty directory for the memory ledger, snapshot and task rows")
    r.set_defaults(fn=cmd_run)
    i = ps.add_parser("inspect", help="memory, tools, facts and the gate log of a run; verifies the ledger")
    i.add_argument("dir", help="the --out directory of 'agentmill metis run'")
    i.set_defaults(fn=cmd_inspect)
    e = ps.add_parser("export-skills", help="write the memory as Agent Skills folders (SKILL.md, references, "
                                            "scripts)")
    e.add_argument("dir", help="the --out directory of 'agentmill metis run'")
    e.add_argument("--to", required=True, help="output directory for the skill folders")
    e.set_defaults(fn=cmd_export)
    c = ps.add_parser("sandbox-check", help="print the isolation layers in force for codified tools")
    c.set_defaults(fn=cmd_sandbox_check)
