"""E176 AC-11: the sandbox contains bad theory code (an engineering claim [R]).

A suite of hostile or broken ``predict`` sources (network, DNS, file write/create/delete, subprocess/fork, ``os`` and
``ctypes`` imports, a ``__subclasses__`` walk, ``np.load``/``np.save``, an infinite loop, a memory bomb, a recursion
bomb, huge printed output, NaN / negative / wrong-shape output) is run through ``sandbox.run_batch``. A case is
*contained* when (1) it raises its specific error class, (2) within its limit + 1 s, (3) no file is left anywhere
(sentinel paths absent, no ``autocog-sbx-*`` temp dir left) and (4) the parent is
unaffected (same cwd and open-fd count, and a good theory still runs and returns the right probabilities).

Limits, fixed before any run: a case stopped by the static AST policy never starts a process, so its limit is 0 s
(must answer within 1 s); every case that starts a child is bounded by the parent's wall-clock watchdog
(``sandbox.WALL`` = 20 s), so its limit is 20 s (must answer within 21 s). The elapsed time of each case is recorded
and plotted, so a reader also sees how far inside the bound it was.

What is not covered here: DNS, socket, fork and file delete are reachable only through imports the static policy
rejects, so these cases are judged at the static layer; the run-time layers are exercised by the numpy file-I/O
cases. The operating-system boundary (bubblewrap namespaces, seccomp) is tested against an attacker who already got
past the Python layers in ``tests/core/test_sandbox_escapes.py``; the record says which layers were active.
"""

from __future__ import annotations

import glob
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentmill.core.stats import Estimate, proportion_estimate
from agentmill.experiments.e176_autocog import PAPER
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, Experiment, RunContext

SENTINEL = "/tmp/autocog-ac11-sentinel"
HEAD = "import numpy as np\ndef predict(params, stimulus, history):\n"
HEAD_IMPORT = "import numpy as np\nimport {mod}\ndef predict(params, stimulus, history):\n"


def _body(lines: str, head: str = HEAD) -> str:
    return head + "\n".join("    " + x for x in lines.splitlines()) + "\n"


# name -> (source, expected error class name, layer): "static" cases never start a child.
CASES: dict[str, tuple[str, str, str]] = {
    "socket open": (_body("socket.socket().connect(('127.0.0.1', 9))\nreturn [0.5, 0.5]",
                          HEAD_IMPORT.format(mod="socket")), "TheoryRejected", "static"),
    "DNS lookup": (_body("socket.getaddrinfo('example.org', 80)\nreturn [0.5, 0.5]",
                         HEAD_IMPORT.format(mod="socket")), "TheoryRejected", "static"),
    "file write (open)": (_body(f"open('{SENTINEL}', 'w').write('x')\nreturn [0.5, 0.5]"), "TheoryRejected",
                          "static"),
    "file create (np.save)": (_body(f"np.save('{SENTINEL}', np.zeros(2))\nreturn [0.5, 0.5]"), "TheoryRejected",
                              "static"),
    "file delete (os.remove)": (_body(f"os.remove('{SENTINEL}')\nreturn [0.5, 0.5]", HEAD_IMPORT.format(mod="os")),
                                "TheoryRejected", "static"),
    "subprocess": (_body("subprocess.run(['true'])\nreturn [0.5, 0.5]", HEAD_IMPORT.format(mod="subprocess")),
                   "TheoryRejected", "static"),
    "fork": (_body("os.fork()\nreturn [0.5, 0.5]", HEAD_IMPORT.format(mod="os")), "TheoryRejected", "static"),
    "ctypes import": (_body("ctypes.CDLL(None)\nreturn [0.5, 0.5]", HEAD_IMPORT.format(mod="ctypes")),
                      "TheoryRejected", "static"),
    "__subclasses__ walk": (_body("k = [].__class__.__mro__[-1].__subclasses__()\nreturn [0.5, 0.5]"),
                            "TheoryRejected", "static"),
    "np.load": (_body(f"x = np.load('{SENTINEL}.npy')\nreturn [0.5, 0.5]"), "TheoryRejected", "static"),
    "file write (ndarray.dump)": (_body(f"np.ones(3).dump('{SENTINEL}')\nreturn [0.5, 0.5]"), "SandboxViolation",
                                  "runtime"),
    "file read (np.fromregex)": (_body("np.fromregex('/etc/hostname', 'x', dtype=[('a', 'S1')])\nreturn [0.5, 0.5]"),
                                 "SandboxViolation", "runtime"),
    "infinite loop": (_body("k = 0\nwhile True:\n    k += 1"), "SandboxTimeout", "runtime"),
    "memory bomb": (_body("x = np.zeros((1 << 32,))\nreturn [0.5, 0.5]"), "SandboxMemory", "runtime"),
    "recursion bomb": ("import numpy as np\ndef g(k):\n    return g(k + 1)\n"
                       "def predict(params, stimulus, history):\n    return g(0)\n", "TheoryOutputError", "runtime"),
    "huge output": (_body("print('y' * (1 << 22))\nreturn [0.5, 0.5]"), "TheoryOutputError", "runtime"),
    "NaN output": (_body("return np.array([np.nan, 1.0])"), "TheoryOutputError", "runtime"),
    "negative output": (_body("return np.array([1.5, -0.5])"), "TheoryOutputError", "runtime"),
    "wrong-shape output": (_body("return np.ones(7) / 7"), "TheoryOutputError", "runtime"),
}
GOOD = _body("d = float(stimulus[0].sum() - stimulus[1].sum())\nreturn np.array([0.8, 0.2]) if d > 0 "
             "else np.array([0.2, 0.8])")
A, B = [[[1, 1, 0, 0], [0, 0, 0, 1]]], [[[0, 0, 0, 1], [1, 1, 0, 0]]]
SMOKE_CASES = tuple(k for k, v in CASES.items() if v[2] == "static") + ("NaN output", "huge output")


@dataclass(frozen=True)
class Setup:
    cases: tuple[str, ...] = tuple(CASES)
    """Suite cases to run (the pre-registered AC-11 suite [R])."""
    repeats: int = 1
    """Times each case is run (full: 3, to catch flaky containment)."""
    static_limit_s: float = 0.0
    """Limit of a case the AST policy stops (no process starts); it must answer within limit + 1 s."""


SETUPS = {"smoke": Setup(cases=SMOKE_CASES), "quick": Setup(), "full": Setup(repeats=3)}

CLAIMS = (
    Claim("E176-AC11", "The sandbox contains bad theory code: every suite case gives its specific error within its "
          "limit + 1 s, leaves no file anywhere and leaves the parent unaffected (share of cases contained).",
          "[R] engineering claim, rule pre-registered", "—", "ac11_contained_share", ">=", 1.0, judge_on="exact",
          exact_why="a fixed suite of hostile cases, each pass/fail: one escape refutes containment"),
)


def _fds() -> int:
    return len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else -1


def _sentinels() -> list[str]:
    return glob.glob(SENTINEL + "*")


def run_case(name: str, static_limit_s: float = 0.0) -> dict[str, Any]:
    """Run one suite case and check all four containment conditions."""
    from agentmill.methods.autocog import sandbox

    if name not in CASES:
        raise ValueError(f"unknown AC-11 case {name!r}; known: {', '.join(CASES)}")
    source, expected, layer = CASES[name]
    limit = static_limit_s if layer == "static" else float(sandbox.WALL)
    cwd, fds = os.getcwd(), _fds()
    # The sandbox's temp cwd is made under a private root for this case, so another process's sandboxes in /tmp
    # (a parallel experiment, a test run) can neither hide nor fake a leftover.
    root, saved = tempfile.mkdtemp(prefix="ac11-case-"), tempfile.tempdir
    tempfile.tempdir = root
    try:
        t0 = time.monotonic()
        try:
            sandbox.run_batch(source, A, B, {})
            got, msg = "no error", ""
        except Exception as e:  # noqa: BLE001 - the class is the measurement
            got, msg = type(e).__name__, str(e)[:160]
        elapsed = time.monotonic() - t0
    finally:
        tempfile.tempdir = saved
    left = sorted(glob.glob(os.path.join(root, "*"))) + _sentinels()
    shutil.rmtree(root, ignore_errors=True)
    probs = sandbox.run_batch(GOOD, A, B, {})["probs"]
    parent_ok = os.getcwd() == cwd and _fds() == fds and probs == [[0.8, 0.2]]
    ok = got == expected and elapsed <= limit + 1.0 and not left and parent_ok
    return {"case": name, "layer": layer, "expected": expected, "got": got, "message": msg,
            "elapsed_s": round(elapsed, 3), "limit_s": limit, "files_left": left, "parent_ok": parent_ok,
            "contained": ok}


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    from agentmill.methods.autocog.sandbox import layers

    for p in _sentinels():
        os.remove(p)  # a stale sentinel from an earlier (broken) run would fail every case
    rows = []
    total = len(s.cases) * s.repeats
    for rep in range(s.repeats):
        for name in s.cases:
            rows.append(dict(run_case(name, s.static_limit_s), repeat=rep))
            ctx.progress("AC-11 cases", len(rows), total)
    lay = layers()
    ctx.data.update({"cases": rows, "layers": lay})
    n_ok = sum(r["contained"] for r in rows)
    return {"ac11_contained_share": proportion_estimate(n_ok, len(rows)),
            "ac11_cases_failed": Estimate.exact(len(rows) - n_ok, n=len(rows)),
            "ac11_max_runtime_case_s": Estimate.exact(max((r["elapsed_s"] for r in rows if r["layer"] == "runtime"),
                                                          default=0.0)),
            "ac11_unshare_net_active": Estimate.exact(float(bool(lay["unshare_user_net_namespace"]))),
            "ac11_audit_hook_active": Estimate.exact(float(bool(lay["audit_hook"]))),
            "ac11_bubblewrap_active": Estimate.exact(float(bool(lay["bubblewrap_namespaces"]))),
            "ac11_seccomp_active": Estimate.exact(float(bool(lay["seccomp_filter"])))}


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    plt = pyplot()

    rows = [r for r in data["cases"] if r["repeat"] == 0]
    fig, ax = plt.subplots(figsize=(7, 0.28 * len(rows) + 1.2))
    ys = range(len(rows))
    ax.barh(list(ys), [max(r["elapsed_s"], 1e-3) for r in rows],
            color=["tab:green" if r["contained"] else "tab:red" for r in rows])
    for y, r in zip(ys, rows):
        ax.plot([r["limit_s"] + 1] * 2, [y - 0.4, y + 0.4], "k-", lw=1)
        ax.text(max(r["elapsed_s"], 1e-3) * 1.1, y, r["got"], va="center", fontsize=6)
    ax.set_yticks(list(ys), [f"{r['case']} ({r['layer']})" for r in rows], fontsize=7)
    ax.set_xscale("log")
    ax.set_xlabel("seconds to the error (black tick: limit + 1 s); green = contained")
    lay = data["layers"]
    ax.set_title(f"AC-11 sandbox suite; layers: isolation {lay.get('isolation', 'python-only')}, seccomp "
                 f"{lay.get('seccomp_filter', False)}, audit hook {lay['audit_hook']}", fontsize=8)
    ax.invert_yaxis()
    fig.tight_layout()
    p = out / "sandbox_suite.png"
    save(fig, p, dpi=110)
    return [p]


EXPERIMENT = Experiment(
    id="e176.sandbox",
    quick_budget_s=20,
    title="E176 AutoCog: the sandbox contains bad theory code",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    scale_note="Engineering claim, no model: 19 hostile/broken predict() sources through the subprocess sandbox "
               "(AST policy, python -I child with rlimits, bubblewrap namespaces, seccomp, audit hook). Network, "
               "DNS, fork and delete are stopped at the static layer here; the kernel layers are tested against an "
               "attacker past the Python layers in the test suite.",
)
