"""E169 S-2: the localization loop runs end to end on real repositories (plumbing) [R].

Every instance goes through the same ``localize`` loop: snapshot of the buggy commit from git objects, the four
tools, the recovery rules, the case-file parser and validator. The claim is about plumbing: no crash, every exit
labelled. Protocol compliance (share of model turns that parsed as a tool call or a final answer) is reported
without a threshold, and so are the localization scores — SmolLM2-135M is not a coding agent, so its scores say
nothing about SHERLOC's localization quality. Quick runs the scripted localizer (a pipeline check; the claim is
judged at full, with ``hf:smollm2``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate, proportion_estimate
from agentmill.experiments.e169_sherloc import PAPER
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, Experiment, RunContext

SCRIPTED = "scripted:sherloc-localizer"


@dataclass(frozen=True)
class Setup:
    corpus: str = "cachetools==8.0.1"
    """``fixture`` or comma-separated cached pyrepo packages."""
    n_per_package: int = 4
    """Seeded instances per package."""
    lm: str = SCRIPTED
    """The localizer: ``scripted:sherloc-localizer`` or an LM spec (``hf:smollm2``)."""
    total_steps: int = 8
    """Loop turns (the paper's 20; 8 for the embedded model)."""
    max_new_tokens: int = 192
    """Generation cap per step."""
    max_tool_output_tokens: int = 1500
    """Tool output cap (SmolLM2's 8k context)."""
    seed: int = 0


SETUPS = {"smoke": Setup(corpus="fixture", n_per_package=2), "quick": Setup(),
          "full": Setup(corpus="cachetools==8.0.1,toolz==1.2.0", n_per_package=1, lm="hf:smollm2", total_steps=3,
                        max_new_tokens=96)}

CLAIMS = (
    Claim("E169-S2a", "The loop runs end to end on real repositories with the embedded model: no crash "
          "(crashed runs).", "[R] plumbing claim", "—", "s2_crashes", "<=", 0.0, judge_on="exact",
          exact_why="a count over a fixed instance set: one crash refutes it"),
    Claim("E169-S2b", "Every run ends with a labelled exit (success/failed + reason) (share of runs).", "[R]", "—",
          "s2_labelled_exit_share", ">=", 1.0, judge_on="exact",
          exact_why="a count over a fixed instance set: one unlabelled exit refutes it"),
)
EXIT_LABELS = {"final_answer", "context_length_exceeded", "max_steps_exceeded", "response_truncated",
               "no_parsable_action"}


def make_localizer(spec: str, ctx: RunContext) -> Any:
    from agentmill.methods.sherloc import ScriptedLocalizer

    return ScriptedLocalizer() if spec == SCRIPTED else ctx.load_lm(spec)


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    from agentmill.experiments.e169_sherloc.instances import load, snapshot_of
    from agentmill.methods.sherloc import Location, SherlocConfig, gold_locations, localize, score
    from agentmill.methods.sherloc.casefile import locations_of

    pairs = load(s.corpus, s.n_per_package, s.seed, ctx.work_dir, ctx.progress)
    lm = make_localizer(s.lm, ctx)
    window = 8192 if s.lm.startswith("hf:") else 262144
    tok = (lambda t: len(lm.encode(t))) if hasattr(lm, "encode") else None
    cfg = SherlocConfig(total_steps=s.total_steps, max_new_tokens=s.max_new_tokens,
                        max_tool_output_tokens=s.max_tool_output_tokens, max_seq_length=window, seed=s.seed)
    rows = []
    for i, (repo, task) in enumerate(pairs):
        t0 = time.perf_counter()
        row: dict[str, Any] = {"instance": task.instance_id}
        try:
            snap = snapshot_of(repo, task)
            kw = {"tokenizer": tok} if tok else {}
            res = localize(task.issue, snap, lm, cfg, instance_id=task.instance_id, repo_name=repo.key,
                           seed=s.seed + i, one_shot=s.lm != SCRIPTED, **kw)
            gold = gold_locations(task.gold_patch)
            pred = [Location(*x) for x in locations_of(res.case_file or {})]
            sc = score(gold, pred, res.status)
            compliant = res.turns - res.interventions["no_parse"] - res.interventions["length_retries"]
            row.update(crashed=False, status=res.status, reason=res.reason, turns=res.turns,
                       compliance=max(0, compliant) / max(1, res.turns), tool_calls=dict(res.tool_calls),
                       interventions=dict(res.interventions), file_recall=sc.file_recall,
                       coverage=sc.coverage_recall, tightness=sc.avg_prediction_tightness,
                       tokens_in=res.tokens_in, tokens_out=res.tokens_out,
                       last_reply=res.messages[-1].content[:300] if res.messages else "")
        except Exception as e:  # noqa: BLE001 - a crash is what S-2 counts
            row.update(crashed=True, status="crash", reason=f"{type(e).__name__}: {str(e)[:300]}")
        row["wall_s"] = time.perf_counter() - t0
        rows.append(row)
        ctx.progress("localize", i + 1, len(pairs))
    n = len(rows)
    crashes = sum(r["crashed"] for r in rows)
    labelled = sum((not r["crashed"]) and r["reason"] in EXIT_LABELS or r["reason"].startswith("lm_error")
                   for r in rows)
    ok = [r for r in rows if not r["crashed"]]
    ctx.data.update({"rows": rows, "arm": s.lm, "corpus": s.corpus,
                     "note": "plumbing only: localization scores of this arm are not SHERLOC's quality"})
    out = {"s2_crashes": Estimate.exact(crashes, n=n),
           "s2_labelled_exit_share": Estimate.exact(labelled / n, n=n),
           "success_rate": proportion_estimate(sum(r["status"] == "success" for r in ok), n),
           "compliance_mean": Estimate.exact(float(np.mean([r["compliance"] for r in ok])) if ok else float("nan"),
                                             n=len(ok)),
           "acc1_this_arm": proportion_estimate(int(sum(r.get("file_recall", 0) == 1 for r in ok)), n)}
    return out


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    plt = pyplot()
    rows = data["rows"]
    fig, ax = plt.subplots(figsize=(6.5, 0.28 * len(rows) + 1.4))
    ax.barh(range(len(rows)), [r.get("turns", 0) for r in rows],
            color=["tab:green" if r["status"] == "success" else "tab:red" for r in rows])
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"{r['instance'][-20:]}: {r['reason'][:28]}" for r in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("turns (green = success)")
    ax.set_title(f"S-2 loop exits, arm {data['arm']}", fontsize=9)
    fig.tight_layout()
    p = out / "s2_exits.png"
    save(fig, p, dpi=110)
    return [p]


EXPERIMENT = Experiment(
    id="e169.sherloc_loop",
    title="E169 SHERLOC: the localization loop runs end to end (plumbing)",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    quick_budget_s=10,
    quick_check="quick runs the scripted localizer over 4 cachetools instances; S-2 is judged at full with "
                "hf:smollm2",
    scale_note="Seeded bugs in real PyPI packages (quick: 4 cachetools 8.0.1, scripted localizer; full: 1 cachetools + "
               "1 toolz 1.2.0 with hf:smollm2 and one worked example, 3 steps × 96 new tokens, tool outputs capped at "
               "1,500 tokens), issue style (a) (paper: a ~30B reasoning model, 20 steps, 81,920 tokens per step).",
)
