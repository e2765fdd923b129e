"""E176 AC-8: the audit trail is complete and a run killed at any point resumes to the same result (an
engineering claim [R]).

One uninterrupted reference run (``agentmill autocog run``, programmatic roles, GT TTB, ε_gt .25) fixes the ledger
length n, the head hash and ``state.json``. Then K kill points are drawn uniformly (without replacement) from the
ledger events 1 … n−1 with the setup's seed; for each, a fresh run is SIGKILLed (whole process group) once its
ledger holds that many events, and ``agentmill autocog resume`` finishes it. A kill point passes when the audit
finds nothing, the head hash and ``state.json`` are byte-identical to the reference, and the ledger holds exactly n
distinct steps (no loss, no duplication). A kill that lands after the run finished counts as a failure of the
harness (it tests nothing), not a pass.

The second arm [R], a Scripted-LM run, does the same with ``--roles llm`` and the model
``openai:autocog-scripted@…`` served by the loopback stub (``methods.autocog.agents.loopback``, a thread in this
process; its replies are a pure function of the prompt). Every LM call is an ``lm_call`` ledger event recorded
before use, so besides the checks above the resumed ledger must hold exactly the reference's ``lm_call`` events
(same head hash implies it) and the audit requires one before every LM-driven step. The stub counts HTTP requests:
requests beyond the reference run's are LM calls made again after the kill — only a call in flight at the kill
(asked, not yet recorded) can be, and it is reported, not judged. The loop is small (2 rounds, 8 designs per
proposal, 24 reviser candidates) so that 20 + 20 kills fit the full profile; quick (2 + 2) only checks the harness.
"""

from __future__ import annotations

import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate, proportion_estimate
from agentmill.experiments.e176_autocog import PAPER
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, Experiment, RunContext


@dataclass(frozen=True)
class Setup:
    kills: int = 20
    """Kill points (5 quick / 20 full [R])."""
    rounds: int = 2
    """Loop rounds (+ validation round) of the run being killed."""
    n_designs: int = 8
    """SearchAdvocate designs per proposal (small: the claim is about the ledger, not recovery)."""
    max_candidates: int = 24
    """Reviser budget."""
    gt: str = "ttb"
    """Ground truth (GT TTB [R])."""
    eps: float = 0.25
    """Action noise ε_gt (.25 [R])."""
    seed: int = 0
    """Seed of the run and of the kill-point draw."""
    lm_kills: int = 20
    """Kill points of the Scripted-LM arm (0 = arm off)."""


SETUPS = {"smoke": Setup(kills=1, rounds=1, n_designs=4, max_candidates=8, lm_kills=1), "quick": Setup(kills=2, lm_kills=2),
          "full": Setup()}

CLAIMS = (
    Claim("E176-AC8", "A run SIGKILLed at any ledger event resumes to a complete audit trail with the head hash and "
          "state.json byte-identical to the uninterrupted run (share of kill points).",
          "[R] engineering claim, rule pre-registered", "—", "ac8_kill_points_passing", ">=", 1.0, judge_on="exact",
          exact_why="a counterexample search: every drawn kill point must resume byte-identically, and one failure "
                    "refutes 'any ledger event'; the points drawn are in the record"),
    Claim("E176-AC8-LM", "The same for a run with LLM roles over a scripted model (loopback stub): resumed "
          "byte-identical, audit clean with an lm_call before every LM-driven step, and the same lm_call events "
          "as the uninterrupted run (share of kill points).",
          "[R] engineering claim", "—", "ac8_lm_kill_points_passing", ">=", 1.0, judge_on="exact",
          exact_why="a counterexample search: every drawn kill point must resume byte-identically, and one failure "
                    "refutes 'any ledger event'; the points drawn are in the record"),
)


def _cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "agentmill.cli.main", "autocog", *args]


def _run_args(s: Setup, run_dir: Path, lm: str | None = None) -> list[str]:
    roles = ["--roles", "llm", "--lm", lm] if lm else []
    return _cmd("run", "--run-dir", str(run_dir), "--rounds", str(s.rounds), "--n-designs", str(s.n_designs),
                "--max-candidates", str(s.max_candidates), "--gt", s.gt, "--eps", str(s.eps), "--seed", str(s.seed),
                *roles)


def kill_points(n_events: int, k: int, seed: int) -> list[int]:
    """K ledger event counts drawn uniformly without replacement from 1 … n_events−1, sorted."""
    if n_events < 2:
        raise ValueError(f"a run with {n_events} ledger events cannot be killed mid-run")
    rng = np.random.default_rng(seed)
    return sorted(int(x) for x in rng.choice(np.arange(1, n_events), size=min(k, n_events - 1), replace=False))


def _arm(s: Setup, base: Path, kills: int, ctx: RunContext, *, server=None) -> dict:
    """Reference run + ``kills`` kill-and-resume points; ``server``: the loopback stub for the Scripted-LM arm."""
    import subprocess

    from agentmill.core.ledger import Ledger
    from agentmill.methods.autocog.audit import audit
    from agentmill.methods.autocog.killresume import kill_and_resume, ledger_lines, ledger_steps

    lm = server.lm_spec if server is not None else None
    label = "AC-8 LM kills" if server is not None else "AC-8 kills"
    requests = (lambda: server.requests) if server is not None else (lambda: 0)
    ref = base / "ref"
    t0, r0 = time.monotonic(), requests()
    r = subprocess.run(_run_args(s, ref, lm), capture_output=True, text=True, timeout=600)
    ref_s, ref_requests = time.monotonic() - t0, requests() - r0
    if r.returncode != 0:
        raise RuntimeError(f"reference run failed: {r.stderr[-800:]}")
    n_events, head, state = ledger_lines(ref), Ledger(ref).head, (ref / "state.json").read_bytes()
    ref_problems = audit(ref)
    kinds = [e["kind"] for e in Ledger(ref).events]
    points = kill_points(n_events, kills, s.seed)
    rows = []
    for i, at in enumerate(points):
        d = base / f"kill{i:02d}"
        r0 = requests()
        kr = kill_and_resume(_run_args(s, d, lm), _cmd("resume", str(d)), d, at)
        problems = audit(d) if kr.resume_rc == 0 else [f"resume exit {kr.resume_rc}: {kr.resume_stderr}"]
        steps = ledger_steps(d) if (d / "ledger.jsonl").exists() else []
        same_head = (d / "ledger.jsonl").exists() and Ledger(d).head == head
        same_state = (d / "state.json").exists() and (d / "state.json").read_bytes() == state
        complete = len(steps) == len(set(steps)) == n_events
        landed = kr.killed_at >= 0
        rows.append({"target": at, "killed_at": kr.killed_at, "kind_at_kill": kinds[max(kr.killed_at, 1) - 1],
                     "landed": landed, "audit_problems": problems, "same_head": same_head,
                     "same_state": same_state, "complete": complete, "resume_s": round(kr.resume_s, 2),
                     "lm_calls": sum(x == "lm_call" for x in (e["kind"] for e in Ledger(d).events))
                     if (d / "ledger.jsonl").exists() else 0,
                     "lm_requests_repeated": requests() - r0 - ref_requests,
                     "passed": landed and not problems and same_head and same_state and complete})
        ctx.progress(label, i + 1, len(points))
    return {"kills": rows, "n_events": n_events, "kinds": kinds, "reference_s": round(ref_s, 2),
            "reference_audit": ref_problems, "reference_lm_calls": kinds.count("lm_call"),
            "reference_requests": ref_requests}


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    from agentmill.methods.autocog.theory import sha256

    base = Path(ctx.work_dir) / sha256(repr(s))[:10]
    if base.exists():
        shutil.rmtree(base)  # kill points need fresh runs; a half-finished earlier attempt would resume instead
    arm = _arm(s, base / "search", s.kills, ctx)
    ctx.data.update(arm)
    rows = arm["kills"]
    n_ok = sum(x["passed"] for x in rows) if not arm["reference_audit"] else 0
    out = {"ac8_kill_points_passing": proportion_estimate(n_ok, len(rows)),
           "ac8_kills_landed": Estimate.exact(sum(x["landed"] for x in rows), n=len(rows)),
           "ac8_reference_audit_ok": Estimate.exact(float(not arm["reference_audit"])),
           "ac8_ledger_events": Estimate.exact(arm["n_events"]),
           "p6_resume_s_mean": Estimate.exact(float(np.mean([x["resume_s"] for x in rows])), n=len(rows)),
           "p6_reference_run_s": Estimate.exact(arm["reference_s"])}
    if s.lm_kills:
        from agentmill.methods.autocog.agents.loopback import scripted_server

        with scripted_server() as srv:
            lm_arm = _arm(s, base / "lm", s.lm_kills, ctx, server=srv)
        ctx.data["lm_arm"] = lm_arm
        lrows = lm_arm["kills"]
        ok = [x["passed"] and x["lm_calls"] == lm_arm["reference_lm_calls"] for x in lrows]
        n_ok = sum(ok) if not lm_arm["reference_audit"] and lm_arm["reference_lm_calls"] else 0
        out.update({"ac8_lm_kill_points_passing": proportion_estimate(n_ok, len(lrows)),
                    "ac8_lm_reference_lm_calls": Estimate.exact(lm_arm["reference_lm_calls"]),
                    "ac8_lm_ledger_events": Estimate.exact(lm_arm["n_events"]),
                    "ac8_lm_requests_repeated": Estimate.exact(sum(max(x["lm_requests_repeated"], 0)
                                                                   for x in lrows), n=len(lrows))})
    return out


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    plt = pyplot()

    kinds = data["kinds"]
    names = sorted(set(kinds), key=kinds.index)
    fig, ax = plt.subplots(figsize=(8, 0.25 * len(names) + 1.6))
    ax.scatter(range(1, len(kinds) + 1), [names.index(k) for k in kinds], s=6, c="gray")
    for x in data["kills"]:
        ax.axvline(x["target"], color="tab:green" if x["passed"] else "tab:red", lw=1.5, alpha=0.8)
    ax.set_yticks(range(len(names)), names, fontsize=7)
    ax.set_xlabel(f"ledger event (n = {data['n_events']}); vertical lines: SIGKILL points, green = resumed "
                  "byte-identical + audit ok")
    ax.set_title("AC-8: kill points over the reference run's ledger", fontsize=9)
    fig.tight_layout()
    p = out / "kill_points.png"
    save(fig, p, dpi=110)
    return [p]


EXPERIMENT = Experiment(
    id="e176.resume",
    quick_budget_s=105,
    quick_check="quick is a pipeline check (2 + 2 kill points): AC-8 is judged at full (20 + 20 kill points; "
                "results/full)",
    parallel_safe=True,
    title="E176 AutoCog: a killed run resumes byte-identically with a complete audit trail",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    scale_note="Engineering claim, no model: a small programmatic run (2 rounds + validation, 8 designs per "
               "proposal) killed with SIGKILL at 2 (quick, not judged) / 20 (full) uniformly drawn ledger events; the Scripted-LM "
               "arm does the same with LLM roles over a scripted model served on loopback HTTP (no real LM).",
)
