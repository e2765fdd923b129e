"""E176 AC-9 (NC-6): the participant task survives a real browser (an engineering claim [R]).

A headless Chromium participant (Selenium + Debian chromedriver, loopback, ``--test-mode``) clicks consent → quiz →
the 96 trials of a U = 8 design + 4 catch trials, choosing by TTB's deterministic core from the server's schedule,
with 3 injected 503s at trial 10, a page refresh at trial 40 and a double key press at 41. A second participant,
a bot pressing left every time at 100 ms, goes through HTTP. Six pre-registered checks [R]:

1. exactly one stored row per trial index (0 lost, 0 duplicated), holding the option the script chose;
2. the metric (share of option-A choices over non-catch trials) on the exported data equals it on the script's
   choices;
3. the completion code is shown;
4. the bot is excluded with reasons ⊇ {single_side, fast_rt} (NC-6);
5. CSV and JSONL exports re-import equal to the database rows;
6. no browser console error other than the injected/retried 503/429/422 responses.

The claim metric is the share of checks passed (needs 1). Screenshots of the consent and trial screens are kept as
artifacts (returned by ``plots``). P5 (≤ 90 s per 100-trial session) is reported, not judged here. Without
chromium/chromedriver (or selenium) nothing is measured and the claim is ``not_judged`` with the reason
(:data:`CHROMIUM_MISSING`, ``protocol.withhold``), not a NaN judged inconclusive. ``make reproduce`` installs
Chromium (``make browser-deps``).
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate
from agentmill.experiments.e176_autocog import PAPER
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, Experiment, RunContext, withhold

CHROMIUM_MISSING = "skipped: Chromium not installed (`make browser-deps`)"
CHECKS = ("rows_exact", "metric_equal", "code_shown", "bot_excluded", "export_roundtrip", "no_console_errors")


@dataclass(frozen=True)
class Setup:
    max_trials: int = 96
    """Non-catch trials of the U = 8 design (96 + 4 catch, as the repository's U = 8 session [C])."""
    faults_at: int = 10
    """Trial before which 3 PUTs are answered 503."""
    refresh_at: int = 40
    """Trial at which the page is reloaded (40 [R])."""
    double_at: int = 41
    """Trial answered with a double key press (41 [R])."""


SETUPS = {"smoke": Setup(max_trials=16, faults_at=3, refresh_at=8, double_at=9), "quick": Setup(), "full": Setup()}

CLAIMS = (
    Claim("E176-AC9", "The web task survives a real browser: one stored row per trial through a refresh, a double "
          "key press and injected 503s; exported metric = the script's; completion code shown; an always-left "
          "100 ms bot is excluded; CSV/JSON round-trip (share of the 6 checks passed).",
          "[R] engineering claim of this project; rule pre-registered", "—",
          "ac9_checks_passed", ">=", 1.0, judge_on="exact",
          exact_why="six pass/fail checks of the web task in a real browser: each must pass"),
)


def ttb_choice(a: list, b: list) -> int:
    """The ground-truth participant: TTB's deterministic core on v = (.9, .8, .7, .6) (ties -> A)."""
    from agentmill.methods.autocog import library as L

    ctx = {"validities": np.array([0.9, 0.8, 0.7, 0.6]), "n_features": 4, "rating_max": 1}
    s = L.ttb().core_sign(np.array([[a]], float), np.array([[b]], float), ctx)[0, 0]
    return 1 if s < 0 else 0


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    import httpx

    from agentmill.methods.autocog.web.browserbot import (BrowserMissing, always_left_bot, chromium_installed,
                                                          run_participant)
    from agentmill.methods.autocog.web.exclusion import drop_reasons
    from agentmill.methods.autocog.web.export import export, read_csv_trials, rows
    from agentmill.methods.autocog.web.loadtest import U8_DESIGN, free_port, start_server
    from agentmill.methods.autocog.web.store import Store

    if not chromium_installed():
        return _skipped(CHROMIUM_MISSING, ctx)
    art = Path(ctx.work_dir) / "artifacts"
    art.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ac9-", dir=ctx.work_dir) as d:
        st = Store(Path(d) / "study.sqlite")
        st.add_observation("o1", {**U8_DESIGN, "max_trials": s.max_trials})
        port = free_port()
        proc = start_server(st.path, port)
        base = f"http://127.0.0.1:{port}"
        try:
            tok, bot_tok = st.create_sessions("o1", 2)
            sched = httpx.get(f"{base}/api/s/{tok}").json()["schedule"]
            try:
                run = run_participant(base, tok, sched, ttb_choice, faults_at=s.faults_at, refresh_at=s.refresh_at,
                                      double_at=s.double_at, screenshot_dir=art)
            except BrowserMissing as e:
                return _skipped(f"skipped: {e}", ctx)
            ctx.progress("AC-9 browser session", 1, 2)
            bot_status = always_left_bot(base, bot_tok, len(sched))
            ctx.progress("AC-9 bot", 2, 2)
        finally:
            proc.kill()
            proc.wait()
        sess = st.session(tok)
        trials = st.trials(sess["session_id"])
        stored = {t["trial_idx"]: t["response_option"] for t in trials}
        exp_rows, _ = rows(st, include_excluded=True)
        mine = [r for r in exp_rows if r["participant"] == "p001" and not r["is_catch"]]
        catch = {t["trial_idx"] for t in trials if t["is_catch"]}
        script = [o for i, o in run.expected.items() if i not in catch]
        bs = st.session(bot_tok)
        bot_reasons = drop_reasons(bs, st.trials(bs["session_id"]))
        csv_paths = export(st, Path(d) / "csv", fmt="csv", include_excluded=True)
        jl_paths = export(st, Path(d) / "jsonl", fmt="jsonl", include_excluded=True)
        roundtrip = (read_csv_trials(csv_paths[0]) == exp_rows
                     and [json.loads(x) for x in jl_paths[0].read_text().splitlines()] == exp_rows)
        exported_metric = float(np.mean([r["response"] == 0 for r in mine])) if mine else float("nan")
        script_metric = float(np.mean([x == 0 for x in script])) if script else float("nan")
        checks = {
            "rows_exact": [t["trial_idx"] for t in trials] == list(range(len(sched))) and stored == run.expected,
            "metric_equal": exported_metric == script_metric,
            "code_shown": run.code.strip() != "",
            "bot_excluded": bot_status == 200 and {"single_side", "fast_rt"} <= set(bot_reasons),
            "export_roundtrip": roundtrip,
            "no_console_errors": not run.severe_logs,
        }
    ctx.data.update({"checks": checks, "n_trials": len(sched), "wall_s": run.wall_s, "bot_reasons": bot_reasons,
                     "exported_metric": exported_metric, "script_metric": script_metric,
                     "refresh_count": sess["refresh_count"], "severe_logs": [str(x)[:200] for x in run.severe_logs],
                     "screenshots": run.screenshots, "setup_marks": [s.faults_at, s.refresh_at, s.double_at],
                     "trials": [{"i": i, "script": run.expected.get(i), "stored": stored.get(i),
                                 "catch": i in catch} for i in range(len(sched))]})
    return {"ac9_checks_passed": Estimate.exact(sum(checks.values()) / len(checks), n=len(checks)),
            "ac9_rows_stored": Estimate.exact(len(trials), n=len(sched)),
            "ac9_exported_metric": Estimate.exact(exported_metric),
            "ac9_script_metric": Estimate.exact(script_metric),
            "p5_browser_session_s": Estimate.exact(run.wall_s)}


def _skipped(reason: str, ctx: RunContext) -> dict[str, Estimate]:
    """No browser, nothing measured: the claim is not judged, with ``reason`` (not a NaN judged inconclusive)."""
    ctx.data.update({"skipped": reason, "checks": {}, "trials": []})
    withhold(ctx.data, {"ac9_checks_passed"}, reason)
    return {}


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    plt = pyplot()

    paths = []
    for shot in data.get("screenshots", []):
        if Path(shot).exists():
            dst = out / f"ac9_{Path(shot).name}"
            shutil.copyfile(shot, dst)
            paths.append(dst)
    if not data.get("trials"):
        return paths
    tr = data["trials"]
    fig, ax = plt.subplots(figsize=(8, 2.8))
    ax.plot([t["i"] for t in tr], [t["script"] for t in tr], "o", ms=6, mfc="none", c="tab:blue",
            label="script's choice")
    ax.plot([t["i"] for t in tr], [-0.1 if t["stored"] is None else t["stored"] for t in tr], "x", ms=4,
            c="tab:orange", label="stored (−0.1 = missing)")
    for x, lab in zip(data["setup_marks"], ("3× 503", "refresh", "double press")):
        ax.axvline(x, color="gray", ls=":", lw=1)
        ax.text(x, 1.15, lab, fontsize=7, ha="center")
    ax.set_yticks([0, 1], ["A", "B"])
    ax.set_ylim(-0.3, 1.3)
    ax.set_xlabel("trial index")
    checks = ", ".join(f"{k} {'✓' if v else '✗'}" for k, v in data["checks"].items())
    ax.set_title(f"AC-9 browser session ({data['wall_s']:.0f} s): {checks}", fontsize=7)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    p = out / "browser_session.png"
    save(fig, p, dpi=110)
    return [p, *paths]


EXPERIMENT = Experiment(
    id="e176.browser",
    quick_budget_s=20,
    title="E176 AutoCog: the participant task survives a real headless browser",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    requires=frozenset({"autocog-e2e"}),
    scale_note="Engineering claim, no model: one scripted headless-Chromium participant (100 trials, refresh, "
               "double press, 3 injected 503s) and one HTTP bot on loopback; smoke uses a 16-trial schedule.",
)
