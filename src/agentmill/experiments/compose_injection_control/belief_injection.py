"""C-injection-control X-1: the verify-or-ship controller's belief decides whether to inject SHERLOC's case file.

For each instance SHERLOC localizes, the repair agent is run without and with the case file (both measured), and
the confidence features of the case file are computed. Calibration and evaluation splits are disjoint instances;
on the evaluation split five policies choose per instance (``policies.py``): never, always, E169's deployable
filter (the S-6 policy), E170's belief controller over the binarised features, and the gold-patch oracle (ceiling,
not deployable). X-1 is reported, no threshold: resolve(belief) − resolve(filter) and tokens(belief) −
tokens(filter), paired over the evaluation instances.

Scripted arm (always run, LM-free, numbers named ``scripted_*``, plumbing): the scripted localizer writes the case
file (one run: it is deterministic, so the k-sample agreement features are 1), the scripted repairer tries catalogue
edits inside the cited ranges; its cost is ``attempts`` (test runs), where the endpoint arm counts tokens. It
resolves only where a cited range holds the mutated line, and never without a case file, so a wrong case file costs
it attempts but never a resolve (L = 0).

Endpoint arm (setup ``lm`` localizes ``k`` times, ``agent`` repairs through E169's reference repair agent,
``replay`` answers both from a recording): the X-1 rows. Without them the run records
``precondition not met: no endpoint`` and no claim metric.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate, bootstrap_ci, paired_diff, proportion_estimate
from agentmill.experiments.compose_injection_control import PAPER
from agentmill.experiments.compose_injection_control.policies import (POLICIES, choices, fit_belief, fit_filter,
                                                                       outcome, split)
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import PRECONDITION_NOT_MET, Claim, Experiment, RunContext, unjudged

FIXTURE = "fixture"
NO_ENDPOINT = (f"{PRECONDITION_NOT_MET}: no endpoint (set lm=openai:MODEL@URL and agent=openai:MODEL@URL, and "
               "replay=FILE for a recording)")
REPORTED = "reported only, no pre-registered threshold (X-1): 0 marks parity with the S-6 filter policy"


@dataclass(frozen=True)
class Setup:
    corpus: str = FIXTURE
    """``fixture`` (the in-code package) or comma-separated cached pyrepo specs ``name==version``."""
    n_per_package: int = 4
    """Seeded-bug instances per package (mined once into the pyrepo cache, then reused)."""
    calib_share: float = 0.5
    """Share of instances in the calibration split (the rest is the evaluation split; disjoint)."""
    max_attempts: int = 2
    """Scripted repairer: catalogue edits tried with a case file (each one sandboxed test run)."""
    lm: str = ""
    """Endpoint localizer (``openai:MODEL@URL``); empty = no endpoint."""
    agent: str = ""
    """Endpoint repair agent (``openai:MODEL@URL``); empty = no endpoint."""
    replay: str = ""
    """A recording answering ``lm``'s and ``agent``'s calls (``lm/replay.py``); empty = call the endpoints."""
    k: int = 3
    """Endpoint arm: localization runs per instance for the agreement features (E169's filter: k = 3)."""
    agent_steps: int = 10
    seed: int = 0


SETUPS = {"smoke": Setup(n_per_package=4, max_attempts=1), "quick": Setup(),
          "full": Setup(corpus="cachetools==8.0.1,toolz==1.2.0", n_per_package=12, max_attempts=6)}
CLAIMS = (
    Claim("X-1-resolve", "Belief-controlled injection (E170's controller over E169's binarised confidence features) "
          "resolves about as often as the S-6 filter policy: resolve(belief) − resolve(filter), paired (reported, "
          "no threshold; 0 marks parity).", "[R] composition; no paper reports it", "—",
          "x1_resolve_belief_minus_filter", ">=", 0.0),
    Claim("X-1-tokens", "... and its repair-agent tokens per instance against the filter policy's: tokens(belief) − "
          "tokens(filter), paired (reported, no threshold; 0 marks parity).", "[R] composition", "—",
          "x1_tokens_belief_minus_filter", "<=", 0.0),
)


def _instances(s: Setup, ctx: RunContext) -> list[tuple[Any, Any]]:
    """[(PyRepo, RepoTask)]: the fixture package's or cached packages' seeded bugs (never fetches)."""
    from agentmill.envs.pyrepo import fixture_dir, fixture_repo, open_repo, seed_bugs

    if s.corpus == FIXTURE:
        repo = fixture_repo(fixture_dir())
        return [(repo, t) for t in seed_bugs(repo, s.n_per_package, seed=s.seed)]
    out: list[tuple[Any, Any]] = []
    for spec in [x.strip() for x in s.corpus.split(",") if x.strip()]:
        repo = open_repo(spec)
        out += [(repo, t) for t in seed_bugs(repo, s.n_per_package, seed=s.seed,
                                             progress=lambda d, n, sp=spec: ctx.progress(f"mining {sp}", d, n))]
    return out


def _case_file(task: Any, repo: Any, lm: Any, runs: int, seed: int) -> tuple[Any, dict[str, float], bool, list]:
    """(first localization result, its features over ``runs`` runs, case file correct (file recall 1), locations)."""
    from agentmill.methods.sherloc import (Location, RepoSnapshot, SherlocConfig, features, gold_locations, localize,
                                           score)
    from agentmill.methods.sherloc.casefile import locations_of

    snap = RepoSnapshot.from_git(repo.root, task.bug_commit)
    res = [localize(task.issue, snap, lm, SherlocConfig(seed=seed), instance_id=task.instance_id, seed=seed + j)
           for j in range(runs)]
    locs = locations_of(res[0].case_file or {})
    sc = score(gold_locations(task.gold_patch), [Location(*x) for x in locs], res[0].status)
    return res[0], features(res, task.issue, snap), sc.file_recall == 1.0, locs


def scripted_rows(pairs: list[tuple[Any, Any]], s: Setup, ctx: RunContext) -> list[dict[str, Any]]:
    from agentmill.envs.pyrepo import RepairWorkspace
    from agentmill.methods.sherloc import ScriptedLocalizer, scripted_repair

    rows = []
    for i, (repo, task) in enumerate(pairs):
        _, feats, correct, locs = _case_file(task, repo, ScriptedLocalizer(), 1, s.seed)
        row: dict[str, Any] = {"instance": task.instance_id, "features": feats, "correct": correct}
        for cond, cf in (("none", None), ("injected", locs)):
            with RepairWorkspace(repo, task) as ws:
                o = scripted_repair(ws, cf, task.issue, max_attempts=s.max_attempts)
            row[f"resolved_{cond}"], row[f"attempts_{cond}"] = float(o.resolved), float(o.test_runs)
        rows.append(row)
        ctx.progress("scripted arm", i + 1, len(pairs))
    return rows


def endpoint_rows(pairs: list[tuple[Any, Any]], s: Setup, lm: Any, agent: Any, ctx: RunContext
                  ) -> list[dict[str, Any]]:
    from agentmill.envs.pyrepo import RepairWorkspace
    from agentmill.methods.sherloc import repair

    rows = []
    for i, (repo, task) in enumerate(pairs):
        t0 = time.perf_counter()
        res, feats, correct, _ = _case_file(task, repo, lm, s.k, s.seed)
        row: dict[str, Any] = {"instance": task.instance_id, "features": feats, "correct": correct,
                               "loc_status": res.status, "loc_tokens": res.tokens_in + res.tokens_out}
        for cond, cf in (("none", None), ("injected", res.case_file)):
            with RepairWorkspace(repo, task) as ws:
                r = repair(ws, task.issue, agent, case_file=cf, max_steps=s.agent_steps, seed=s.seed)
            row[f"resolved_{cond}"], row[f"tokens_{cond}"] = float(r.resolved), float(r.total_tokens)
        row["wall_s"] = time.perf_counter() - t0
        rows.append(row)
        ctx.progress("endpoint arm", i + 1, len(pairs))
    return rows


def evaluate(rows: list[dict[str, Any]], cal_ids: list[str], prefix: str, cost: str = "tokens"
             ) -> tuple[dict[str, Estimate], dict[str, Any]]:
    """Fit both deployable policies on the calibration rows; score every policy on the evaluation rows (resolve
    rate, and the mean of the rows' ``<cost>_none`` / ``<cost>_injected`` under each policy)."""
    from agentmill.methods.sherloc.confidence import FEATURES

    cal = [r for r in rows if r["instance"] in cal_ids]
    ev = [r for r in rows if r["instance"] not in cal_ids]
    belief, filt = fit_belief(cal, FEATURES), fit_filter(cal)
    pick = choices(ev, belief, filt)
    out: dict[str, Estimate] = {}
    res = {p: outcome(ev, pick[p]) for p in POLICIES}
    tok = {p: outcome(ev, pick[p], cost) for p in POLICIES}
    for p in POLICIES:
        out[f"{prefix}_resolve_{p}"] = proportion_estimate(int(res[p].sum()), len(ev))
        out[f"{prefix}_{cost}_{p}"] = bootstrap_ci(tok[p], seed=0)
    for p in ("filter", "belief"):
        out[f"{prefix}_inject_rate_{p}"] = proportion_estimate(int(pick[p].sum()), len(ev))
    out[f"{prefix}_case_file_correct"] = proportion_estimate(int(sum(r["correct"] for r in ev)), len(ev))
    out[f"{prefix}_resolve_belief_minus_filter"] = paired_diff(res["belief"], res["filter"], n_boot=1000, seed=42)
    out[f"{prefix}_{cost}_belief_minus_filter"] = paired_diff(tok["belief"], tok["filter"], n_boot=1000, seed=42)
    detail = {"calibration": sorted(cal_ids), "evaluation": sorted(r["instance"] for r in ev),
              "belief_policy": belief.summary(), "filter_tau": filt.tau,
              "per_instance": [{"instance": r["instance"], "correct": r["correct"],
                                "belief": belief.belief(r["features"]), "filter_p": filt.score(r["features"]),
                                **{f"inject_{p}": bool(pick[p][j]) for p in POLICIES}}
                               for j, r in enumerate(ev)],
              "resolve": {p: {"value": out[f"{prefix}_resolve_{p}"].value, "lo": out[f"{prefix}_resolve_{p}"].lo,
                              "hi": out[f"{prefix}_resolve_{p}"].hi} for p in POLICIES}}
    return out, detail


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    pairs = _instances(s, ctx)
    cal_ids, _ = split([t.instance_id for _, t in pairs], s.calib_share, s.seed)
    rows = scripted_rows(pairs, s, ctx)
    out, detail = evaluate(rows, cal_ids, "scripted", "attempts")
    ctx.data.update({"rows": rows, "scripted": detail,
                     "arm": "scripted localizer + scripted repairer (plumbing; attempts = test runs)",
                     "critic_costs": "0: the features are read off the case file and its episode (~ms of CPU)"})
    if not (s.lm and s.agent):
        ctx.data["precondition"] = NO_ENDPOINT
        return out
    lm, agent = _endpoint(s.lm, ctx, s.replay), _endpoint(s.agent, ctx, s.replay)
    erows = endpoint_rows(pairs, s, lm, agent, ctx)
    eout, edetail = evaluate(erows, cal_ids, "endpoint")
    ctx.data.update({"endpoint_rows": erows, "endpoint": edetail})
    eout["x1_resolve_belief_minus_filter"] = eout["endpoint_resolve_belief_minus_filter"]
    eout["x1_tokens_belief_minus_filter"] = eout["endpoint_tokens_belief_minus_filter"]
    out.update(eout)
    return unjudged(out, [c.metric for c in CLAIMS], REPORTED, ctx.data)


def _endpoint(spec: str, ctx: RunContext, replay: str) -> Any:
    if replay:
        from agentmill.lm.replay import RecordReplayLM

        return RecordReplayLM(None, replay, mode="replay", spec=spec)
    return ctx.load_lm(spec)


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    plt = pyplot()
    arms = [a for a in ("scripted", "endpoint") if a in data]
    fig, axes = plt.subplots(1, len(arms), figsize=(4.6 * len(arms), 3.2), squeeze=False)
    for ax, arm in zip(axes[0], arms):
        r = data[arm]["resolve"]
        v = np.array([r[p]["value"] for p in POLICIES])
        err = np.array([[r[p]["value"] - r[p]["lo"] for p in POLICIES], [r[p]["hi"] - r[p]["value"] for p in POLICIES]])
        colours = ["grey", "grey", "tab:blue", "tab:purple", "lightgrey"]
        ax.bar(POLICIES, v, yerr=err, capsize=3, color=colours)
        ax.set_ylim(0, 1)
        ax.set_ylabel("resolve rate, evaluation split (pytest)")
        n = len(data[arm]["evaluation"])
        ax.set_title(f"{arm} arm, {n} evaluation instances" + (" (plumbing)" if arm == "scripted" else ""),
                     fontsize=9)
        ax.tick_params(axis="x", labelsize=8)
    fig.suptitle("Inject the case file? Wilson 95 % CIs; oracle reads the gold patch (ceiling)", fontsize=8)
    fig.tight_layout()
    p = out / "injection_control_resolve.png"
    save(fig, p, dpi=110)
    return [p]


EXPERIMENT = Experiment(
    id="compose_injection_control.belief_injection",
    title="C-injection-control: belief-controlled case-file injection (E170 deciding on E169's features)",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    parallel_safe=True,
    quick_budget_s=8,
    scale_note="Seeded bugs of the in-code fixture package (quick: 4, split 2/2) and of cachetools 8.0.1 + toolz "
               "1.2.0 (full: 12 each, split half/half), pytest oracle in the sandbox; the scripted localizer + "
               "scripted repairer rows are plumbing; X-1 needs OpenAI-compatible endpoints or a recording (none "
               "here: precondition not met). The spec's split is 60 calibration / 100 evaluation instances.",
)
