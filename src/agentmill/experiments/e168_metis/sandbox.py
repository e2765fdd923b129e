"""E168 MT-9: codified tools are contained (an engineering claim [R]).

A suite of hostile or broken tools runs through the Metis tool path (static policy + ``metis_check``, the persistent
``ToolSandbox`` child, the capability broker) against a live AppSim world. A case is *contained* when (1) it raises
its specific error class, (2) within its limit + 1 s (static cases never start a process: limit 0 s; run-time cases
are bounded by the watchdog, ``wall_s``), (3) the live world's state digest is unchanged, and (4) the parent is
unaffected (same cwd and open-fd count, and a correct tool still returns the right answer afterwards).

The record names the layers that were active (bubblewrap or python-only, seccomp, network unshare, audit hook).
CPython audit hooks are not a security boundary (PEP 578); hostile code belongs in a container or VM.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentmill.core.stats import Estimate
from agentmill.experiments.e168_metis import PAPER
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, Experiment, RunContext

HEAD = "def run(api, **slots):\n"


def _body(lines: str, head: str = HEAD) -> str:
    return head + "\n".join("    " + x for x in lines.splitlines()) + "\n"


CAPS = ("auth.login", "payments.list")
# name -> (source, expected error class name, layer)
CASES: dict[str, tuple[str, str, str]] = {
    "import os": ("import os\n" + _body("return os.listdir('/')"), "CodeRejected", "static"),
    "import socket": ("import socket\n" + _body("socket.socket().connect(('127.0.0.1', 9))"), "CodeRejected",
                      "static"),
    "open a file": (_body("return open('/etc/hostname').read()"), "CodeRejected", "static"),
    "eval": (_body("return eval('1 + 1')"), "CodeRejected", "static"),
    "getattr": (_body("return getattr(api, 'call')"), "CodeRejected", "static"),
    "dunder walk": (_body("return ().__class__.__mro__[-1].__subclasses__()"), "CodeRejected", "static"),
    "attribute assignment": ("import math\n" + _body("math.pi = 3\nreturn 1"), "CodeRejected", "static"),
    "global statement": (_body("global x\nx = 1\nreturn x"), "CodeRejected", "static"),
    "second top-level def": ("def helper():\n    return 1\n" + _body("return helper()"), "CodeRejected", "static"),
    "capability escalation": (_body("api.call('auth', 'login', app='payments')\n"
                                    "return api.call('payments', 'send', contact_id=1, amount=500.0, note='x')"),
                              "CapabilityDenied", "runtime"),
    "API budget exhaustion": (_body("api.call('auth', 'login', app='payments')\nwhile True:\n"
                                    "    api.call('payments', 'list', direction='sent')"), "BudgetExceeded", "runtime"),
    "infinite loop": (_body("k = 0\nwhile True:\n    k += 1"), "SandboxTimeout", "runtime"),
    "memory bomb": (_body("x = 'a' * (1 << 31)\nreturn len(x)"), "SandboxMemory", "runtime"),
    "recursion bomb": (_body("def f(n):\n    return f(n + 1)\nreturn f(0)"), "ToolOutputError", "runtime"),
    "huge output": (_body("return 'y' * (2 << 20)"), "ToolOutputError", "runtime"),
    "print flood": (_body("print('y' * (1 << 22))\nreturn 1"), "ToolOutputError", "runtime"),
    "non-JSON output": (_body("return {1, 2}"), "ToolOutputError", "runtime"),
    "unhandled API error": (_body("return api.call('payments', 'list', direction='sent')"), "ToolApiError",
                            "runtime"),
}
GOOD = _body("api.call('auth', 'login', app='payments')\n"
             "r = api.call('payments', 'list', direction='sent', start_date='2025-03-01', end_date='2025-03-31')\n"
             "return len(r['items'])")
SMOKE_CASES = ("import os", "eval", "attribute assignment", "capability escalation", "huge output")


@dataclass(frozen=True)
class Setup:
    cases: tuple[str, ...] = tuple(CASES)
    wall_s: float = 2.0
    """The tool watchdog for this suite (the MetisConfig default is 5 s; the claim is "within limit + 1 s")."""
    repeats: int = 1


SETUPS = {"smoke": Setup(cases=SMOKE_CASES), "quick": Setup(), "full": Setup(repeats=3)}

CLAIMS = (
    Claim("E168-MT9", "Codified tools are contained: every hostile case raises its specific error within its limit "
          "+ 1 s, leaves the world unchanged and the parent unaffected (share of cases contained).",
          "[R] engineering claim, rule pre-registered", "—", "mt9_contained_share", ">=", 1.0, judge_on="exact",
          exact_why="a fixed suite of hostile cases, each pass/fail: one escape refutes containment"),
)


def _fds() -> int:
    return len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else -1


def run_case(name: str, sandbox, world, wall_s: float) -> dict[str, Any]:
    from agentmill.core.sandbox import SandboxError
    from agentmill.methods.metis.toolbox import run_tool

    source, expected, layer = CASES[name]
    limit = 0.0 if layer == "static" else wall_s
    digest0, cwd0, fds0 = world.state_digest(), os.getcwd(), _fds()
    world.begin_task()
    t0 = time.perf_counter()
    got = "no error"
    msg = ""
    try:
        run_tool(sandbox, source, CAPS, {}, world, budget=20, wall_s=wall_s)
    except SandboxError as e:
        got, msg = type(e).__name__, str(e)[:200]
    elapsed = time.perf_counter() - t0
    world.begin_task()
    try:
        good, _ = run_tool(sandbox, GOOD, CAPS, {}, world, budget=20, wall_s=wall_s)
        good_ok = isinstance(good, int) and good > 0
    except SandboxError:
        good_ok = False
    ok = {"specific error": got == expected, "within limit + 1 s": elapsed <= limit + 1.0,
          "world unchanged": world.state_digest() == digest0,
          "parent unaffected": os.getcwd() == cwd0 and _fds() == fds0 and good_ok}
    return {"case": name, "layer": layer, "expected": expected, "got": got, "message": msg, "elapsed_s": elapsed,
            "limit_s": limit, "checks": ok, "contained": all(ok.values())}


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    from agentmill.envs.appsim import AppSim
    from agentmill.methods.metis.toolbox import make_sandbox, run_tool

    unknown = [c for c in s.cases if c not in CASES]
    if unknown:
        raise ValueError(f"unknown MT-9 case(s) {unknown}; known: {', '.join(CASES)}")
    world = AppSim(0)
    rows = []
    with make_sandbox(s.wall_s) as sb:
        world.begin_task()  # warm the persistent child first, so the parent's fd count is the steady one
        run_tool(sb, GOOD, CAPS, {}, world, budget=20, wall_s=s.wall_s)
        for r in range(s.repeats):
            for i, name in enumerate(s.cases):
                rows.append(run_case(name, sb, world, s.wall_s))
                ctx.progress("hostile tools", r * len(s.cases) + i + 1, s.repeats * len(s.cases))
        layers = dict(sb.last_layers)
        children = sb.children_started
    contained = sum(r["contained"] for r in rows)
    ctx.data.update({"cases": rows, "layers": layers, "children_started": children,
                     "note": "audit hooks are not a security boundary (PEP 578); the kernel layers are bubblewrap "
                             "(when installed) and seccomp"})
    return {"mt9_contained_share": Estimate.exact(contained / len(rows), n=len(rows))}


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    plt = pyplot()
    rows = data["cases"]
    fig, ax = plt.subplots(figsize=(7, 0.3 * len(rows) + 1.2))
    ax.barh(range(len(rows)), [r["elapsed_s"] for r in rows],
            color=["tab:green" if r["contained"] else "tab:red" for r in rows])
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"{r['case']} → {r['got']}" for r in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("seconds to the error (green = contained)")
    lay = data.get("layers", {})
    ax.set_title(f"MT-9 hostile tools; isolation {lay.get('isolation', '?')}, seccomp {lay.get('seccomp', False)}",
                 fontsize=9)
    fig.tight_layout()
    p = out / "mt9_sandbox.png"
    save(fig, p, dpi=110)
    return [p]


EXPERIMENT = Experiment(
    id="e168.sandbox",
    quick_budget_s=15,
    parallel_safe=False,
    title="E168 Metis: codified tools are contained",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    scale_note="18 hostile or broken tools through the Metis tool path (static policy, persistent sandbox child, "
               "capability broker) against a live AppSim world; timings per case. Contains LLM mistakes and casual "
               "misuse, not a determined attacker.",
)
