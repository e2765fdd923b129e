"""E168 MT-3 … MT-7: Metis against its baselines on a recurring task stream with an API change mid-stream.

LLM-free mode: every arm is the same ``ScriptedPolicy`` (frozen defaults, printed in the record) with a different
memory policy. The policy *assumes* the paper's injection asymmetry — it accepts a tool's answer unchecked with
probability ``p_trust_tool`` — so "unvalidated code below no memory" here tests the machinery given that assumption,
not the paper's empirical finding (pitfall A1); MT-3's assumption check sweeps ``p_trust_tool``.

Arms (same task sequence per seed, so rows pair by (seed, task)): ``none``, ``text_only``, ``code_naive`` at
``p_trust_tool`` 1.0 / 0.5 / 0.0, ``eager`` (k = 1), ``metis`` (k = 3). Full adds the k sweep (k = 2, 5), ``metis``
with ``feedback="none"`` (reported), and the ``disjoint`` stream for none / eager / metis (reported, no threshold).

Setup decided from timing only, before any claim was looked at: one 150-task stream takes 1–3 s per arm on one
core, so quick runs the spec's 7 arms × 3 seeds × 150 tasks (shift at 75); full runs 300 tasks (shift at 150) ×
10 seeds with the extra arms. Intervals: paired two-stage bootstrap, seeds then tasks (:mod:`.bootstrap`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate, cluster_bootstrap
from agentmill.experiments.e168_metis import PAPER
from agentmill.experiments.e168_metis.bootstrap import masked_mean, paired_two_stage
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, Experiment, RunContext

BASE_ARMS = ("none", "text_only", "code_naive", "code_naive@0.5", "code_naive@0.0", "eager", "metis")
FULL_ARMS = ("metis@k2", "metis@k5", "metis@fb_none", "disjoint:none", "disjoint:eager", "disjoint:metis")


@dataclass(frozen=True)
class Setup:
    n_tasks: int = 300
    shift_at: int = 150
    seeds: int = 10
    arms: tuple[str, ...] = BASE_ARMS + FULL_ARMS
    late_after: int = 50
    """MT-7's accuracy window starts this many tasks after the shift."""
    n_boot: int = 2000
    seed: int = 0


SETUPS = {"smoke": Setup(n_tasks=30, shift_at=15, seeds=1, arms=("none", "text_only", "code_naive", "metis"),
                         late_after=5, n_boot=200),
          "quick": Setup(n_tasks=150, shift_at=75, seeds=3, arms=BASE_ARMS),
          "full": Setup()}

CLAIMS = (
    Claim("E168-MT3-naive", "Unvalidated code memory falls below no memory after the API change (given the trust "
          "assumption): accuracy code_naive − none on post-shift affected tasks.",
          "[S] review/podcast: code memory below no memory in streaming (22-point vs 10-point gap, sources disagree)",
          "−22 or −10 points [S]", "mt3_naive_minus_none_psa", "<=", -0.05, ci_bound=0.0),
    Claim("E168-MT3-metis", "Metis does not fall below no memory after the change: accuracy metis − none on "
          "post-shift affected tasks.", "[S]; [R] threshold", "—", "mt3_metis_minus_none_psa", ">=", 0.0),
    Claim("E168-MT3-assumption", "The code_naive deficit depends on trusting tools: deficit at p_trust 0 minus half "
          "the deficit at p_trust 1 (≤ 0 means the deficit at least halves).", "[R] assumption check", "—",
          "mt3_assumption_gap", "<=", 0.0),
    Claim("E168-MT4-none", "Metis is far more accurate than no memory: stream accuracy metis − none.",
          "[A] up to +20.6% task accuracy vs ReAct on AppWorld", "+20.6% (best case)", "mt4_metis_minus_none", ">=",
          0.10, ci_bound=0.0),
    Claim("E168-MT4-text", "Metis is as accurate as text memory: stream accuracy metis − text_only.",
          "[S] 66.1 vs 65.5 against the strongest memory baseline", "+0.6 points [S]", "mt4_metis_minus_text", ">=",
          -0.01, ci_bound=-0.03),
    Claim("E168-MT5-total", "Earned code cuts execution cost: total LLM calls metis / none.",
          "[A] up to −22.8% execution cost vs ReAct", "0.772 (best case)", "mt5_calls_metis_over_none", "<=", 0.8),
    Claim("E168-MT5-recurring", "On recurring tasks Metis is cheaper than text memory: LLM calls per task metis / "
          "text_only on the recurring slice.", "[A] code executes more cheaply; [R] threshold", "—",
          "mt5_recurring_calls_metis_over_text", "<=", 0.8),
    Claim("E168-MT6-build", "Eager codification costs more to build: build cost (codifier calls + validation "
          "replays) eager / metis.", "[S] eager cost 47% more to build; ≈ 2.2× expected here [D]", "1.47 [S]",
          "mt6_build_eager_over_metis", ">=", 1.4),
    Claim("E168-MT6-never", "Eager codification leaves more tools never invoked: count eager / metis.",
          "[S] over half of eager's tools never invoked; ≈ 1.5× expected here [D]", "> 0.5 share [S]",
          "mt6_never_invoked_eager_over_metis", ">=", 1.3),
    Claim("E168-MT6-acc", "Eager is not more accurate than Metis: accuracy eager − metis.", "[S] eager scored worse",
          "< 0 [S]", "mt6_eager_minus_metis", "<=", 0.01),
    Claim("E168-MT7-uses", "Demotion recovers from the API change: median uses until a stale tool is demoted.",
          "[R] demotion rule (2 failures in 5 uses)", "—", "mt7_median_uses_to_demotion", "<=", 3.0),
    Claim("E168-MT7-late", "After the change settles, Metis is as accurate as text memory: accuracy metis − "
          "text_only over [shift + 50, end].", "[R]", "—", "mt7_late_metis_minus_text", ">=", -0.03),
)


def arm_config(arm: str):
    """arm name → (MetisConfig, ScriptedPolicyConfig, stream kind)."""
    from agentmill.methods.metis.config import MetisConfig, ScriptedPolicyConfig

    kind = "zipf"
    if arm.startswith("disjoint:"):
        kind, arm = "disjoint", arm.split(":", 1)[1]
    pol = ScriptedPolicyConfig()
    if arm.startswith("code_naive@"):
        return MetisConfig(mode="code_naive"), dataclasses.replace(pol, p_trust_tool=float(arm.split("@")[1])), kind
    if arm.startswith("metis@k"):
        return MetisConfig(mode="metis", k=int(arm[len("metis@k"):])), pol, kind
    if arm == "metis@fb_none":
        return MetisConfig(mode="metis", feedback="none"), pol, kind
    return MetisConfig(mode=arm), pol, kind


ROW_KEYS = ("success", "llm_calls", "prompt_tokens", "api_calls", "codifier_calls", "codifier_tokens",
            "validation_replays", "recurring", "novel", "post_shift_affected", "t", "collateral")


def _unit(args: tuple[str, int, Setup]) -> dict[str, Any]:
    from agentmill.envs.appsim import PATTERN_BY_ID, TaskStream, affected
    from agentmill.methods.metis.stream import run_stream

    arm, seed, s = args
    cfg, pol, kind = arm_config(arm)
    stream = TaskStream(kind=kind, n_tasks=s.n_tasks, shift_at=s.shift_at, seed=s.seed + seed)
    r = run_stream(cfg, stream, seed=s.seed + seed, policy_config=pol)
    rows = r.rows
    cols = {k: [float(x[k]) for x in rows] for k in ROW_KEYS}
    # stale tools: admitted before the shift, failed after it; uses after the shift until demoted
    uses: dict[str, int] = {}
    stale: dict[str, dict] = {}
    for x in rows:
        tid = x["tool_id"]
        if tid is None or x["t"] < s.shift_at:
            continue
        built = int(tid.rsplit("@v", 1)[1]) if "@v" in tid else 0  # noqa: F841 (version, informative)
        uses[tid] = uses.get(tid, 0) + 1
        failed = not (x["tool_error"] is None and x["tool_accepted"] and x["success"])
        info = stale.setdefault(tid, {"failed": False, "demoted_after": None, "affected":
                                      affected(PATTERN_BY_ID[x["pattern_id"]])})
        info["failed"] |= failed
        if x["demoted"] == tid and info["demoted_after"] is None:
            info["demoted_after"] = uses[tid]
    tools_pre = {t["tool_id"] for t in r.tools if t["built_at"] < s.shift_at and t["admitted"]}
    stale_list = [dict(tool_id=k, **v) for k, v in stale.items() if k in tools_pre and v["failed"]]
    return {"arm": arm, "seed": seed, "cols": cols, "admitted": r.admitted(), "never_invoked": r.never_invoked(),
            "stale": stale_list, "layers": r.layers, "n_tools": len(r.tools)}


def _arrays(units: list[dict], arms: tuple[str, ...], seeds: int) -> dict[str, dict[str, np.ndarray]]:
    out: dict[str, dict[str, np.ndarray]] = {}
    for arm in arms:
        us = sorted((u for u in units if u["arm"] == arm), key=lambda u: u["seed"])
        out[arm] = {k: np.array([u["cols"][k] for u in us]) for k in ROW_KEYS}
    return out


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    from agentmill.methods.metis.config import ScriptedPolicyConfig

    units_in = [(arm, k, s) for arm in s.arms for k in range(s.seeds)]
    done = [0]

    def tick(_i: int, _r: Any) -> None:
        done[0] += 1
        ctx.progress("streams", done[0], len(units_in))

    units = ctx.executor.map(_unit, units_in, on_result=tick)
    A = _arrays(units, s.arms, s.seeds)
    B, sd = s.n_boot, s.seed

    def diff(a: str, b: str, mask: str | None = None, late: bool = False) -> Estimate:
        arrs = {"a": A[a]["success"], "b": A[b]["success"]}
        m = np.ones_like(arrs["a"])
        if mask:
            m = m * A[a][mask]
        if late:
            m = m * (A[a]["t"] >= s.shift_at + s.late_after)
        arrs["m"] = m
        return paired_two_stage(arrs, lambda g: masked_mean(g["a"], g["m"]) - masked_mean(g["b"], g["m"]),
                                n_boot=B, seed=sd)

    def ratio(a: str, b: str, key: str, mask: str | None = None) -> Estimate:
        arrs = {"a": A[a][key], "b": A[b][key], "m": A[a][mask] if mask else np.ones_like(A[a][key])}
        return paired_two_stage(arrs, lambda g: (g["a"] * g["m"]).sum(axis=(-1, -2)) /
                                (g["b"] * g["m"]).sum(axis=(-1, -2)), n_boot=B, seed=sd)

    def acc(a: str, mask: str | None = None) -> Estimate:
        arrs = {"a": A[a]["success"], "m": A[a][mask] if mask else np.ones_like(A[a]["success"])}
        return paired_two_stage(arrs, lambda g: masked_mean(g["a"], g["m"]), n_boot=B, seed=sd)

    m: dict[str, Estimate] = {}
    have = set(s.arms)
    for a in s.arms:
        m[f"acc_{a}"] = acc(a)
        m[f"acc_psa_{a}"] = acc(a, "post_shift_affected")
        m[f"llm_calls_per_task_{a}"] = Estimate.exact(float(A[a]["llm_calls"].mean()), n=A[a]["llm_calls"].size)
    if {"code_naive", "none"} <= have:
        m["mt3_naive_minus_none_psa"] = diff("code_naive", "none", "post_shift_affected")
    if {"metis", "none"} <= have:
        m["mt3_metis_minus_none_psa"] = diff("metis", "none", "post_shift_affected")
        m["mt4_metis_minus_none"] = diff("metis", "none")
        m["mt5_calls_metis_over_none"] = ratio("metis", "none", "llm_calls")
    if {"code_naive", "code_naive@0.0", "none"} <= have:
        arrs = {"n1": A["code_naive"]["success"], "n0": A["code_naive@0.0"]["success"], "z": A["none"]["success"],
                "m": A["none"]["post_shift_affected"]}
        m["mt3_assumption_gap"] = paired_two_stage(
            arrs, lambda g: (masked_mean(g["z"], g["m"]) - masked_mean(g["n0"], g["m"]))
            - 0.5 * (masked_mean(g["z"], g["m"]) - masked_mean(g["n1"], g["m"])), n_boot=B, seed=sd)
    if {"code_naive@0.5", "none"} <= have:
        m["mt3_naive05_minus_none_psa"] = diff("code_naive@0.5", "none", "post_shift_affected")
    if {"code_naive@0.0", "none"} <= have:
        m["mt3_naive00_minus_none_psa"] = diff("code_naive@0.0", "none", "post_shift_affected")
    if {"metis", "text_only"} <= have:
        m["mt4_metis_minus_text"] = diff("metis", "text_only")
        m["mt5_recurring_calls_metis_over_text"] = ratio("metis", "text_only", "llm_calls", "recurring")
        m["mt7_late_metis_minus_text"] = diff("metis", "text_only", late=True)
    if {"metis", "eager"} <= have:
        build = {a: A[a]["codifier_calls"] + A[a]["validation_replays"] for a in ("eager", "metis")}
        m["mt6_build_eager_over_metis"] = paired_two_stage(
            {"e": build["eager"], "m": build["metis"]},
            lambda g: g["e"].sum(axis=(-1, -2)) / g["m"].sum(axis=(-1, -2)), n_boot=B, seed=sd)
        m["mt6_eager_minus_metis"] = diff("eager", "metis")
        ne = np.array([u["never_invoked"] for u in sorted(units, key=lambda u: u["seed"]) if u["arm"] == "eager"],
                      float)
        nm = np.array([u["never_invoked"] for u in sorted(units, key=lambda u: u["seed"]) if u["arm"] == "metis"],
                      float)
        m["mt6_never_invoked_eager_over_metis"] = cluster_bootstrap(
            lambda idx: ne[idx].sum() / nm[idx].sum() if nm[idx].sum() > 0 else math.nan, np.arange(len(ne)),
            n_boot=B, seed=sd)
        for a in ("eager", "metis"):
            us = [u for u in units if u["arm"] == a]
            adm = sum(u["admitted"] for u in us)
            m[f"mt6_never_invoked_share_{a}"] = Estimate.exact(sum(u["never_invoked"] for u in us) / adm
                                                               if adm else math.nan, n=adm)
            m[f"mt6_build_cost_{a}"] = Estimate.exact(float(build[a].sum()) / s.seeds, n=s.seeds)
    if "metis" in have:
        st = [(u["seed"], x["demoted_after"]) for u in units if u["arm"] == "metis" for x in u["stale"]]
        dem = [(sd_, d) for sd_, d in st if d is not None]
        m["mt7_stale_tools"] = Estimate.exact(len(st), n=s.seeds)
        m["mt7_stale_not_demoted"] = Estimate.exact(len(st) - len(dem), n=s.seeds)
        if dem:
            seeds_arr = np.array([d[0] for d in dem])
            vals = np.array([d[1] for d in dem], float)
            m["mt7_median_uses_to_demotion"] = cluster_bootstrap(lambda idx: float(np.median(vals[idx])), seeds_arr,
                                                                 n_boot=B, seed=sd)
        else:
            m["mt7_median_uses_to_demotion"] = Estimate.exact(math.nan)
    for extra in ("metis@k2", "metis@k5", "metis@fb_none"):
        if extra in have:
            b = A[extra]["codifier_calls"] + A[extra]["validation_replays"]
            m[f"build_cost_{extra}"] = Estimate.exact(float(b.sum()) / s.seeds, n=s.seeds)
            m[f"never_invoked_{extra}"] = Estimate.exact(float(sum(u["never_invoked"] for u in units
                                                                   if u["arm"] == extra)) / s.seeds, n=s.seeds)
    # curves for the plots: per arm, per task index, mean over seeds
    curves = {a: {"success": A[a]["success"].mean(axis=0).tolist(),
                  "llm_calls": A[a]["llm_calls"].mean(axis=0).tolist(),
                  "build": (A[a]["codifier_calls"] + A[a]["validation_replays"]).mean(axis=0).tolist()}
              for a in s.arms}
    layers = next((u["layers"] for u in units if u["layers"]), {})
    ctx.data["collateral_damage_tasks"] = {a: int(A[a]["collateral"].sum()) for a in s.arms}
    ctx.data["prompt_tokens_per_task"] = {a: float(A[a]["prompt_tokens"].mean()) for a in s.arms}
    ctx.data.update({"curves": curves, "shift_at": s.shift_at, "arms": list(s.arms),
                     "policy_config": dataclasses.asdict(ScriptedPolicyConfig()),
                     "stale_tools": {u["arm"] + f"#{u['seed']}": u["stale"] for u in units if u["arm"] == "metis"},
                     "tools_admitted": {u["arm"] + f"#{u['seed']}": u["admitted"] for u in units},
                     "sandbox_layers": layers, "mode": "LLM-free (ScriptedPolicy)"})
    return m


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    plt = pyplot()
    curves, shift = data["curves"], data["shift_at"]
    arms = [a for a in data["arms"] if not a.startswith("disjoint:")]
    paths = []
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    for a in arms:
        y = np.array(curves[a]["success"])
        w = max(1, min(20, len(y) // 5))
        roll = np.convolve(y, np.ones(w) / w, mode="valid")
        axes[0].plot(np.arange(len(roll)) + w - 1, roll, label=a, lw=2 if a in ("metis", "none") else 1)
        axes[1].plot(np.cumsum(curves[a]["llm_calls"]), label=a, lw=2 if a in ("metis", "none") else 1)
    for ax in axes:
        ax.axvline(shift, color="k", ls="--", lw=1)
        ax.set_xlabel("task index (dashed: API change)")
    axes[0].set_ylabel(f"success (rolling mean over {w} tasks, mean over seeds)")
    axes[1].set_ylabel("cumulative LLM calls (mean over seeds)")
    axes[0].legend(fontsize=7)
    fig.suptitle("Metis vs baselines across the API change (LLM-free ScriptedPolicy)")
    fig.tight_layout()
    p = out / "stream_success_cost.png"
    save(fig, p, dpi=110)
    paths.append(p)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    code_arms = [a for a in arms if not a.startswith(("none", "text_only"))]
    ax.bar(range(len(code_arms)), [sum(curves[a]["build"]) for a in code_arms])
    ax.set_xticks(range(len(code_arms)))
    ax.set_xticklabels(code_arms, rotation=30, fontsize=7)
    ax.set_ylabel("build cost per stream (codifier calls + validation replays)")
    fig.tight_layout()
    p = out / "stream_build_cost.png"
    save(fig, p, dpi=110)
    paths.append(p)
    return paths


EXPERIMENT = Experiment(
    id="e168.stream",
    quick_budget_s=45,
    parallel_safe=True,
    title="E168 Metis: text first, code when earned — accuracy and cost across an API change",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    scale_note="LLM-free ScriptedPolicy on AppSim (6 apps, 17 endpoints, 48 patterns, one user), not AppWorld; "
               "Zipf stream of 150 (quick) / 300 (full) tasks with the API change at the midpoint; 3 / 10 seeds. "
               "The policy assumes the injection asymmetry (p_trust_tool = 1): MT-3 tests the machinery given that "
               "assumption. Oracle feedback (full also reports feedback='none').",
)
