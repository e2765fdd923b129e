"""E168 MT-2: on identical experiences, code runs cheaper on seen patterns while text transfers better (the paper's
controlled diagnostic [A], rebuilt [R]).

One no-memory run over the stream's first half supplies the experiences. They are stored once as text
(``text_frozen``: plans, facts, pitfalls), once as code transcribed from the first successful trajectory per pattern
(``code_frozen``), and once as code compiled from the plan and validated (``code_frozen_validated``, reported — it
separates "code" from "unverified code", the ASI counterpoint). Each store is evaluated frozen on the second half,
with the API change in its middle (at 3/4 of the stream).

(a) LLM calls code/text on seen-pattern tasks before the change ≤ 0.7; (b) accuracy text − code on unseen patterns
≥ +5 points; (c) ≥ +10 points on post-change affected tasks. The build-cost ratio is reported: in LLM-free mode it is
an accounting identity (one virtual codifier call per stored pattern, validation replays for the validated arm).

Setup decided from timing only (≈ 5 s per 150-task seed on one core): quick 3 seeds × 150 tasks, full 10 × 300.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate
from agentmill.experiments.e168_metis import PAPER
from agentmill.experiments.e168_metis.bootstrap import masked_mean, paired_two_stage
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, Experiment, RunContext

ARMS = ("text_frozen", "code_frozen", "code_frozen_validated")


@dataclass(frozen=True)
class Setup:
    n_tasks: int = 300
    seeds: int = 10
    n_boot: int = 2000
    seed: int = 100
    """Stream seeds are seed, seed + 1, … (disjoint from the stream experiment's)."""


SETUPS = {"smoke": Setup(n_tasks=40, seeds=1, n_boot=200), "quick": Setup(n_tasks=150, seeds=3),
          "full": Setup()}

CLAIMS = (
    Claim("E168-MT2a", "On identical experiences, frozen code runs cheaper than frozen text on seen patterns "
          "before the change: LLM calls code / text.", "[A] code executes more cheaply", "—",
          "mt2_calls_code_over_text_seen", "<=", 0.7),
    Claim("E168-MT2b", "Frozen text transfers better to unseen patterns: accuracy text − code.",
          "[A] text transfers better", "—", "mt2_text_minus_code_unseen", ">=", 0.05),
    Claim("E168-MT2c", "Frozen text survives the API change better: accuracy text − code on post-change affected "
          "tasks.", "[A] code breaks on transfer", "—", "mt2_text_minus_code_psa", ">=", 0.10),
)


def _unit(args: tuple[int, Setup]) -> dict[str, Any]:
    from agentmill.envs.appsim import TaskStream
    from agentmill.methods.metis.stream import run_frozen_diagnostic

    k, s = args
    n = s.n_tasks
    out = run_frozen_diagnostic(TaskStream(n_tasks=n, shift_at=(3 * n) // 4, seed=s.seed + k), seed=s.seed + k)
    cols = {arm: {key: [float(r[key]) for r in out[arm]] for key in ("success", "llm_calls", "prompt_tokens",
                                                                      "seen", "post_shift", "post_shift_affected")}
            for arm in ARMS}
    return {"seed": k, "cols": cols, "build": out["build"][0]}


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    units = ctx.executor.map(_unit, [(k, s) for k in range(s.seeds)],
                             on_result=lambda i, r: ctx.progress("seeds", i + 1, s.seeds))
    units.sort(key=lambda u: u["seed"])
    A = {arm: {k: np.array([u["cols"][arm][k] for u in units]) for k in units[0]["cols"][arm]} for arm in ARMS}
    seen_pre = A["text_frozen"]["seen"] * (1 - A["text_frozen"]["post_shift"])
    unseen = 1 - A["text_frozen"]["seen"]
    psa = A["text_frozen"]["post_shift_affected"]

    def calls_ratio(code: str) -> Estimate:
        return paired_two_stage({"c": A[code]["llm_calls"], "t": A["text_frozen"]["llm_calls"], "m": seen_pre},
                                lambda g: (g["c"] * g["m"]).sum(axis=(-1, -2)) / (g["t"] * g["m"]).sum(axis=(-1, -2)),
                                n_boot=s.n_boot, seed=s.seed)

    def acc_diff(code: str, mask: np.ndarray) -> Estimate:
        return paired_two_stage({"t": A["text_frozen"]["success"], "c": A[code]["success"], "m": mask},
                                lambda g: masked_mean(g["t"], g["m"]) - masked_mean(g["c"], g["m"]),
                                n_boot=s.n_boot, seed=s.seed)

    m = {"mt2_calls_code_over_text_seen": calls_ratio("code_frozen"),
         "mt2_text_minus_code_unseen": acc_diff("code_frozen", unseen),
         "mt2_text_minus_code_psa": acc_diff("code_frozen", psa),
         "mt2_validated_calls_over_text_seen": calls_ratio("code_frozen_validated"),
         "mt2_text_minus_validated_unseen": acc_diff("code_frozen_validated", unseen),
         "mt2_text_minus_validated_psa": acc_diff("code_frozen_validated", psa)}
    for arm in ARMS:
        for name, mask in (("seen_pre", seen_pre), ("unseen", unseen), ("psa", psa)):
            m[f"acc_{name}_{arm}"] = paired_two_stage({"a": A[arm]["success"], "m": mask},
                                                      lambda g: masked_mean(g["a"], g["m"]), n_boot=s.n_boot,
                                                      seed=s.seed)
    build = {arm: {k: sum(u["build"][arm][k] for u in units) / len(units) for k in units[0]["build"][arm]}
             for arm in ARMS}
    cc = build["code_frozen"]["codifier_tokens"]
    m["mt2_build_tokens_validated_over_transcribed"] = Estimate.exact(
        build["code_frozen_validated"]["codifier_tokens"] / cc if cc else float("nan"), n=len(units))
    ctx.data["slice_acc"] = {arm: {name: m[f"acc_{name}_{arm}"].value for name in ("seen_pre", "unseen", "psa")}
                             for arm in ARMS}
    ctx.data["calls_seen_pre"] = {arm: float((A[arm]["llm_calls"] * seen_pre).sum() / max(1, seen_pre.sum()))
                                  for arm in ARMS}
    ctx.data.update({"build_per_seed_mean": build, "n_masked": {"seen_pre": int(seen_pre.sum()),
                                                                "unseen": int(unseen.sum()), "psa": int(psa.sum())},
                     "mode": "LLM-free (ScriptedPolicy)"})
    return m


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    plt = pyplot()
    acc, calls = data["slice_acc"], data["calls_seen_pre"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    names = ("seen_pre", "unseen", "psa")
    for j, arm in enumerate(ARMS):
        axes[0].bar(np.arange(3) + 0.27 * (j - 1), [acc[arm][n] for n in names], width=0.27, label=arm)
    axes[0].set_xticks(range(3))
    axes[0].set_xticklabels(["seen, before change", "unseen patterns", "after change, affected"])
    axes[0].set_ylabel("accuracy (frozen memory)")
    axes[0].legend(fontsize=7)
    axes[1].bar(range(3), [calls[a] for a in ARMS])
    axes[1].set_xticks(range(3))
    axes[1].set_xticklabels(ARMS, fontsize=8)
    axes[1].set_ylabel("LLM calls per task (seen, before change)")
    fig.suptitle("Same experiences, stored as text or as code (LLM-free)")
    fig.tight_layout()
    p = out / "diagnostic.png"
    save(fig, p, dpi=110)
    return [p]


EXPERIMENT = Experiment(
    id="e168.diagnostic",
    quick_budget_s=20,
    parallel_safe=True,
    title="E168 Metis diagnostic: the same experiences stored as text vs code",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    scale_note="LLM-free ScriptedPolicy on AppSim; experiences from one no-memory run over the first half of a "
               "150 (quick) / 300 (full) task Zipf stream, evaluated frozen on the second half (API change at 3/4); "
               "3 / 10 seeds. Code transcribed from trajectories (the failing arm as secondary sources describe "
               "it); the validated arm is reported.",
)
