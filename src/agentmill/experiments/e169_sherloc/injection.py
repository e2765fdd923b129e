"""E169 S-4, S-5, S-6, S-10: injecting case files into a repair agent (endpoint claims) — plus the scripted arm.

Endpoint arm (``lm`` localizes, ``agent_weak`` repairs through the reference repair agent): each instance is
repaired without and with the full case file injected; S-4 compares resolve rates (paired) and localization-phase
tokens (turns before the first successful edit), S-10 reports the share of turns spent localizing without
injection. S-5 (corrupted case files vs none for a strong agent) and S-6 (the deployable filter's AUROC and policy)
need the endpoint arm at 60–100 instances and are not built beyond their precondition.

Scripted arm (always recorded, observed only, plumbing): the scripted localizer writes the case file, the
scripted repairer tries catalogue edits inside the cited ranges (with a wrong-file "corrupted" case file too), and
the deployable filter's features are computed for each case file; it resolves only where the cited range holds
the mutated line, which is what it is built to show.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.seeding import rng_for
from agentmill.core.stats import Estimate, bootstrap_ci, paired_diff, proportion_estimate
from agentmill.experiments.e169_sherloc import PAPER
from agentmill.experiments.e169_sherloc.arms import NO_ENDPOINT, endpoint_lm
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, Experiment, RunContext, withhold


@dataclass(frozen=True)
class Setup:
    corpus: str = "cachetools==8.0.1"
    n_per_package: int = 2
    max_attempts: int = 4
    """Scripted repairer: catalogue edits tried (each one sandboxed test run of the issue's failing tests)."""
    corrupted: bool = False
    """Scripted arm: also repair with a wrong-file case file."""
    lm: str = ""
    """Endpoint localizer (``openai:MODEL@URL``); empty = no endpoint."""
    replay: str = ""
    """A recording answering ``lm``'s and the agent's calls (``lm/replay.py``); empty = call the endpoints."""
    agent_weak: str = ""
    """Endpoint repair agent (the weaker one); empty = no endpoint."""
    agent_steps: int = 10
    seed: int = 0


SETUPS = {"smoke": Setup(corpus="fixture", n_per_package=1, max_attempts=2), "quick": Setup(),
          "full": Setup(corpus="cachetools==8.0.1,toolz==1.2.0", n_per_package=3, max_attempts=6, corrupted=True)}
S5_S6 = ("s5_corrupted_minus_none", "s6_filter_auroc", "s6_policy_minus_best_fixed")
CLAIMS = (
    Claim("E169-S4a", "Injected case files raise the weaker repair agent's resolve rate by ≥ 3 pp with the CI above "
          "0 (paired).", "[P] +5.95 pp resolve on Verified", "+5.95 pp", "s4_resolve_gain_weak", ">=", 0.03,
          ci_bound=0.0),
    Claim("E169-S4b", "... and cut localization-phase tokens by ≥ 20 % (1 − injected/none).", "[P] −36.7 % "
          "localization tokens", "−36.7 %", "s4_loc_token_reduction", ">=", 0.20),
    Claim("E169-S5", "Corrupted case files (wrong file, plausible text) make a strong agent resolve less than no "
          "case file (difference < 0, CI excluding 0).", "[S] podcast: 20 % vs 62 %", "20 % vs 62 %",
          "s5_corrupted_minus_none", "<=", 0.0),
    Claim("E169-S6a", "A deployable confidence filter (no gold patch) ranks correct case files: AUROC ≥ 0.70.",
          "[R] the paper's filter reads the gold patch [S]", "—", "s6_filter_auroc", ">=", 0.70),
    Claim("E169-S6b", "... and its injection policy resolves ≥ max(always, never) − 1 pp.", "[R]", "—",
          "s6_policy_minus_best_fixed", ">=", -0.01),
)


def _corrupt(locs: list[tuple[str, int, int]], repo: Any, rng: np.random.Generator) -> list[tuple[str, int, int]]:
    files = repo.source_files()
    out = []
    for f, s, e in locs:
        others = [p for p in files if p != f]
        g = others[int(rng.integers(len(others)))] if others else f
        n = len(repo.read(g).splitlines()) or 1
        out.append((g, min(s, n), min(e, n)))
    return out


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    from agentmill.envs.pyrepo import RepairWorkspace
    from agentmill.experiments.e169_sherloc.instances import load, snapshot_of
    from agentmill.methods.sherloc import (Location, ScriptedLocalizer, SherlocConfig, features, gold_locations,
                                           localize, repair, score, scripted_repair)
    from agentmill.methods.sherloc.casefile import locations_of

    pairs = load(s.corpus, s.n_per_package, s.seed, ctx.work_dir, ctx.progress)
    cfg = SherlocConfig(seed=s.seed)
    rows = []
    for i, (repo, task) in enumerate(pairs):
        snap = snapshot_of(repo, task)
        res = localize(task.issue, snap, ScriptedLocalizer(), cfg, instance_id=task.instance_id)
        locs = locations_of(res.case_file or {})
        gold = gold_locations(task.gold_patch)
        sc = score(gold, [Location(*x) for x in locs], res.status)
        row: dict[str, Any] = {"instance": task.instance_id, "file_recall": sc.file_recall,
                               "covers_bug": sc.coverage_recall == 1.0,
                               "features": features([res], task.issue, snap)}
        with RepairWorkspace(repo, task) as ws:
            o = scripted_repair(ws, None, task.issue)
            row["none"] = {"resolved": o.resolved, "test_runs": o.test_runs}
        with RepairWorkspace(repo, task) as ws:
            o = scripted_repair(ws, locs, task.issue, max_attempts=s.max_attempts)
            row["injected"] = {"resolved": o.resolved, "test_runs": o.test_runs, "wall_s": o.wall_s}
        if s.corrupted:
            bad = _corrupt(locs, repo, rng_for("e169.injection.corrupt", task.instance_id))
            with RepairWorkspace(repo, task) as ws:
                o = scripted_repair(ws, bad, task.issue, max_attempts=s.max_attempts)
                row["corrupted"] = {"resolved": o.resolved, "test_runs": o.test_runs}
        rows.append(row)
        ctx.progress("scripted arm", i + 1, len(pairs))
    n = len(rows)
    inj = np.array([r["injected"]["resolved"] for r in rows], dtype=float)
    none = np.array([r["none"]["resolved"] for r in rows], dtype=float)
    out: dict[str, Estimate] = {
        "scripted_resolve_none": proportion_estimate(int(none.sum()), n),
        "scripted_resolve_injected": proportion_estimate(int(inj.sum()), n),
        "scripted_case_file_covers_bug": proportion_estimate(int(sum(r["covers_bug"] for r in rows)), n)}
    if s.corrupted:
        out["scripted_resolve_corrupted"] = proportion_estimate(int(sum(r["corrupted"]["resolved"] for r in rows)), n)
    ctx.data.update({"rows": rows, "arm": "scripted localizer + scripted repairer (plumbing)"})
    lm = endpoint_lm(s.lm, ctx, s.replay)
    agent = endpoint_lm(s.agent_weak, ctx, s.replay) if lm is not None else None
    if lm is None or agent is None:
        ctx.data["precondition"] = NO_ENDPOINT
        return out
    erows = []
    for i, (repo, task) in enumerate(pairs):
        snap = snapshot_of(repo, task)
        t0 = time.perf_counter()
        res = localize(task.issue, snap, lm, cfg, instance_id=task.instance_id, seed=s.seed)
        runs = {}
        for cond, cf in (("none", None), ("full", res.case_file)):
            with RepairWorkspace(repo, task) as ws:
                runs[cond] = repair(ws, task.issue, agent, case_file=cf, max_steps=s.agent_steps, seed=s.seed)
        erows.append({"instance": task.instance_id, "loc_status": res.status,
                      **{f"{c}_resolved": float(r.resolved) for c, r in runs.items()},
                      **{f"{c}_loc_tokens": r.localization_tokens for c, r in runs.items()},
                      **{f"{c}_total_tokens": r.total_tokens for c, r in runs.items()},
                      "none_loc_turn_share": runs["none"].localization_turns / max(1, runs["none"].turns),
                      "wall_s": time.perf_counter() - t0})
        ctx.progress("endpoint arm", i + 1, len(pairs))
    ctx.data["endpoint_rows"] = erows
    a = np.array([r["full_resolved"] for r in erows])
    b = np.array([r["none_resolved"] for r in erows])
    lt = np.array([[r["full_loc_tokens"], r["none_loc_tokens"]] for r in erows], dtype=float)
    out["s4_resolve_gain_weak"] = paired_diff(a, b, n_boot=1000, seed=42)
    out["s4_loc_token_reduction"] = bootstrap_ci(np.arange(len(erows)), lambda ix: 1 - lt[ix.astype(int), 0].mean()
                                                 / max(1e-9, lt[ix.astype(int), 1].mean()), seed=0)
    out["s10_loc_turn_share"] = bootstrap_ci(np.array([r["none_loc_turn_share"] for r in erows]), seed=0)
    withhold(ctx.data, S5_S6, "not built: the S-5 corrupted-file and S-6 filter endpoint arms")
    return out


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    plt = pyplot()
    rows = data["rows"]
    conds = [c for c in ("none", "injected", "corrupted") if rows and c in rows[0]]
    fig, ax = plt.subplots(figsize=(5, 3))
    ax.bar(conds, [np.mean([r[c]["resolved"] for r in rows]) for c in conds], color="tab:purple")
    ax.set_ylim(0, 1)
    ax.set_ylabel("resolve rate (pytest oracle)")
    ax.set_title(f"Scripted arm, {len(rows)} instances (plumbing only)", fontsize=9)
    fig.tight_layout()
    p = out / "injection_scripted.png"
    save(fig, p, dpi=110)
    return [p, _selective_plot(rows, out, plt)]


def unfitted_score(f: dict[str, float]) -> float:
    """The filter's score without a calibration split: the mean of grounding, anchoring and clean exit [R]."""
    return (f["grounding"] + f["anchoring"] + f["clean_exit"]) / 3


def _selective_plot(rows: list[dict[str, Any]], out: Path, plt: Any) -> Path:
    """Acc@1 of the case files the filter accepts against the share it accepts, as its threshold sweeps."""
    sc = np.array([unfitted_score(r["features"]) for r in rows])
    ok = np.array([r["file_recall"] == 1.0 for r in rows], dtype=float)
    xs, ys = [], []
    for t in sorted(set(sc.tolist()), reverse=True):
        keep = sc >= t
        xs.append(keep.mean())
        ys.append(ok[keep].mean())
    fig, ax = plt.subplots(figsize=(4.5, 3.2))
    ax.plot(xs, ys, "o-", label="confidence filter (unfitted feature mean)")
    ax.axhline(ok.mean() if len(ok) else 0, ls="--", c="grey", label="no filter")
    ax.set_xlabel("share of case files accepted")
    ax.set_ylabel("Acc@1 of accepted case files")
    ax.set_ylim(0, 1.05)
    ax.set_title("Filter: Acc@1 vs acceptance (scripted arm)", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    p = out / "filter_acc1.png"
    save(fig, p, dpi=110)
    return p


EXPERIMENT = Experiment(
    id="e169.sherloc_injection",
    title="E169 SHERLOC: case-file injection into repair (endpoint) and the scripted arm",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    quick_budget_s=25,
    scale_note="Seeded bugs in cachetools 8.0.1 (quick: 2; full: + toolz 1.2.0, 3 each), pytest oracle in the "
               "sandbox; S-4/S-5/S-6 need OpenAI-compatible endpoints (none here: precondition not met); the "
               "scripted localizer + scripted repairer row is plumbing (paper: SWE-bench Verified, several agents).",
)
