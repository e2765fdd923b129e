"""E177 K-9, K-10 (endpoint arm), K-11: the LLM generator's claims (docs/methods/kernelpro.md, LLM arm).

K-9: diagnoses in the prompt beat no profiling data (final re-measured speedup per arm none / raw / diagnoses /
both; paired one-sided Wilcoxon over (task, seed), p < 0.05). K-10: share of runs stuck at ≤ 1.05× with vs without
diagnoses. K-11: proactive orchestration (every affinity tool each iteration) ≥ on-demand (the LLM names one tool a
turn). These need a capable model: an ``openai:`` endpoint (setup ``endpoint``) or a recorded replay (setup
``replay``); SmolLM2-135M cannot write kernels. Without either the run records "precondition not met". Every run
also drives the generator over a scripted stub with four replies (a correct kernel, a compile error, a wall-violating
kernel, a reply without a code block) to check the plumbing; that never judges a claim."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate
from agentmill.experiments.e177_kernelpro import PAPER
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, Experiment, RunContext

PRECONDITION = "precondition not met: needs an openai: endpoint or a replay: file"
ARMS = ("none", "raw", "diagnoses", "both")


@dataclass(frozen=True)
class Setup:
    endpoint: str = ""
    """``openai:<model>@<base_url>`` (key from OPENAI_API_KEY); every reply is recorded before it is compiled."""
    replay: str = ""
    """A RecordReplayLM file recorded from an endpoint (0 requests)."""
    tasks: tuple[str, ...] = ("sum", "softmax_rows", "layernorm", "transpose", "vadd")
    seeds: int = 3
    budget: int = 20


SETUPS = {"smoke": Setup(budget=2, seeds=1, tasks=("sum",)), "quick": Setup(budget=3, seeds=1, tasks=("sum",)),
          "full": Setup()}
EXACT_P = "a test's p-value over the fixed (task, seed) runs; its noise is inside the test"
CLAIMS = (
    Claim("E177-K9", "Diagnoses in the prompt beat no profiling data (paired one-sided Wilcoxon p < 0.05).",
          "[P] micro-tools vs raw metrics p < 0.0001; [S] raw 1.8× vs none 3.3×", "p < 0.0001", "k9_wilcoxon_p",
          "<=", 0.05, judge_on="exact", exact_why=EXACT_P),
    Claim("E177-K10-llm", "With diagnoses, runs stuck at ≤ 1.05× are no more common than without (share "
          "difference ≤ 0).", "[S] 0 % vs 10 %", "0 % vs 10 %", "k10_llm_plateau_diff", "<=", 0.0),
    Claim("E177-K11", "Proactive orchestration (all affinity tools each turn) ≥ on-demand tool calls (geomean "
          "final speedup ratio ≥ 1).", "[P] +23 % (p = 0.035)", "+23 %", "k11_proactive_over_ondemand", ">=", 1.0),
)

GOOD = ("```c\n#include <stdint.h>\nvoid kernel(const float* restrict x, float* restrict out, int64_t n) {\n"
        "    float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;\n    int64_t i = 0;\n"
        "    for (; i + 4 <= n; i += 4) { s0 += x[i]; s1 += x[i + 1]; s2 += x[i + 2]; s3 += x[i + 3]; }\n"
        "    for (; i < n; i++) s0 += x[i];\n    out[0] = (s0 + s1) + (s2 + s3);\n}\n```")
STUB_REPLIES = (GOOD, "```c\nvoid kernel(const float* x, float* out, long n) { out[0] = x[0] +; }\n```",
                "```c\n#include <stdint.h>\nvoid kernel(const float* restrict x, float* restrict out, int64_t n) "
                "{ (void)x; (void)n; out[0] = 0.0f; }\n```", "I would vectorise the loop.")


def llm_search(task_name: str, lm: Any, arm: str, budget: int, *, ceilings: Any, on_demand: bool = False
               ) -> dict[str, Any]:
    """A greedy LLM loop: from the naive kernel, ask for a rewrite with the arm's feedback, keep the best correct.
    ``on_demand``: the prompt carries only the one tool the previous reply asked for (``TOOL: <name>``)."""
    from agentmill.methods.kernelpro import library, roofline, wall
    from agentmill.methods.kernelpro.feedback import render_feedback
    from agentmill.methods.kernelpro.llm_generator import LLMGenerator
    from agentmill.methods.kernelpro.tables import profile_candidate
    from agentmill.methods.kernelpro.tasks import get_task, shape_for
    from agentmill.methods.kernelpro.tools import diagnose

    task = get_task(task_name)
    gen = LLMGenerator(lm, feedback=arm)
    src, flags = library.render(task_name, library.root(task_name, "quick"))
    ev = wall.evaluate(task, src, flags, ceilings=ceilings)
    report = roofline.classify_time(task, shape_for(task, "search"), ev.t_ref, ceilings) if ev.t_ref == ev.t_ref \
        else None
    best = {"source": src, "speedup": ev.speedup, "so": ev.so_path, "t": ev.t_cand}
    root_speedup = ev.speedup
    memory: list[dict[str, Any]] = []
    last_error, asked = "", ""
    outcomes = []
    for _ in range(budget):
        fs: list = []
        if best["so"] and report is not None:
            prof = profile_candidate(task_name, best["so"], flags, best["t"], ceilings)
            fs, _ = diagnose(prof, report, tools=(asked,) if on_demand and asked else None)
            if on_demand and not asked:
                fs = []
        text = render_feedback(fs, report, mode=arm if arm != "none" else "none")
        code, reply = gen.propose(task, best["source"], text, memory, last_error, shape=shape_for(task, "search"))
        asked = next((w.split(":", 1)[1].strip() for w in reply.splitlines() if w.startswith("TOOL:")), "")
        if code is None:
            outcomes.append("no code block")
            last_error = "your reply had no ```c code block"
            continue
        e = wall.evaluate(task, code, flags, ceilings=ceilings)
        outcomes.append(e.status if e.status != "incorrect" else f"wall: {e.wall.failed_check}")
        last_error = "" if e.status == "correct" else f"{e.status}: {e.wall.failed_check}: {e.wall.evidence[:1500]}"
        memory.append({"lesson": f"attempt -> {outcomes[-1]}", "speedup": e.speedup})
        if e.status == "correct" and e.speedup > best["speedup"]:
            best = {"source": code, "speedup": e.speedup, "so": e.so_path, "t": e.t_cand}
    return {"task": task_name, "arm": arm, "best_speedup": best["speedup"], "root_speedup": root_speedup,
            "outcomes": outcomes, "calls": len(gen.calls)}


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    from agentmill.lm.scripted import ScriptedLM
    from agentmill.methods.kernelpro import roofline

    c = roofline.calibrate(threads=(1,), processes=3, which="smoke")
    stub = ScriptedLM(list(STUB_REPLIES) * 4, spec="scripted:kernelpro-stub")
    plumb = llm_search("sum", stub, "diagnoses", min(4, max(s.budget, 1)), ceilings=c)
    ctx.data["stub"] = plumb
    ctx.data["arm_note"] = "scripted stub: plumbing only, never judged"
    if not s.endpoint and not s.replay:
        ctx.data["precondition"] = PRECONDITION
        return {"stub_calls": Estimate.exact(plumb["calls"])}
    from agentmill.lm import load_lm
    from agentmill.lm.replay import RecordReplayLM

    if s.replay:
        lm = RecordReplayLM(None, s.replay, "replay", spec=s.endpoint or "openai:recorded")
    else:
        lm = RecordReplayLM(load_lm(s.endpoint), ctx.work_dir / "kernelpro_llm_calls.jsonl", "record-missing")
    rows = []
    for t in s.tasks:
        for sd in range(s.seeds):
            for arm in ARMS:
                rows.append({**llm_search(t, lm, arm, s.budget, ceilings=c), "seed": sd})
            rows.append({**llm_search(t, lm, "diagnoses", s.budget, ceilings=c, on_demand=True), "seed": sd,
                         "arm": "on_demand"})
            ctx.progress("llm runs", len(rows), len(s.tasks) * s.seeds * 5)
    ctx.data["runs"] = rows
    from scipy.stats import wilcoxon

    def arm(a: str) -> np.ndarray:
        return np.array([r["best_speedup"] for r in rows if r["arm"] == a], float)

    d, n0 = arm("diagnoses"), arm("none")
    p = float(wilcoxon(d, n0, alternative="greater").pvalue) if not np.allclose(d, n0) else 1.0
    plateau = np.array([[r["best_speedup"] <= 1.05 * r["root_speedup"] for r in rows if r["arm"] == a]
                        for a in ("diagnoses", "none")], float)
    from agentmill.core.stats import bootstrap_ci

    diff = plateau[0] - plateau[1]
    ratio = np.log(arm("diagnoses")) - np.log(arm("on_demand"))
    g = bootstrap_ci(ratio, np.mean) if len(ratio) > 1 else Estimate.exact(float(ratio.mean()))
    return {"k9_wilcoxon_p": Estimate.exact(p, n=len(d)),
            "k10_llm_plateau_diff": bootstrap_ci(diff, np.mean) if len(diff) > 1 else Estimate.exact(diff.mean()),
            "k11_proactive_over_ondemand": Estimate(math.exp(g.value), math.exp(g.lo), math.exp(g.hi), n=g.n,
                                                    method="bootstrap of mean log ratio, exp"),
            "k9_raw_over_none_geomean": Estimate.exact(float(np.exp(np.mean(np.log(arm("raw")) - np.log(n0)))))}


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 2.6))
    outs = data["stub"]["outcomes"]
    ax.barh(range(len(outs)), [1] * len(outs))
    ax.set_yticks(range(len(outs)), [f"reply {i + 1}: {o}" for i, o in enumerate(outs)], fontsize=7)
    ax.set_xticks([])
    ax.set_title("LLM generator over the scripted stub: outcome per reply (plumbing check)", fontsize=8)
    fig.tight_layout()
    p = out / "kernelpro_llm_stub.png"
    save(fig, p)
    return [p]


EXPERIMENT = Experiment(
    id="e177.kernelpro_llm",
    quick_budget_s=6,
    parallel_safe=False,
    title="E177 KernelPro: the LLM generator's feedback ablations (endpoint only)",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    scale_note="Needs an OpenAI-compatible endpoint or a recorded replay (none reachable here); the paper used "
               "frontier LLMs writing CUDA. The scripted stub checks the plumbing only.",
)
