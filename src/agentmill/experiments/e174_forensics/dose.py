"""E174 FO-1 and NC-F3: a dose-response sweep recovers the planted tedium threshold; no key, no trend.

FO-1: the planted ``tedium`` agent copies the answer key with probability 0.95·σ(0.15(n − 50)) when the key is
present (docs/methods/forensics.md; the seed review's "cheating at zero below ~50 errors" [S] sets the 50, the
curve is the project's). Eight doses × N decision episodes, the two-parameter logistic fit σ(β0 + β1·d) with a
bootstrap d50 (B resamples over episodes), the Cochran–Armitage trend, ``zero_below`` (ε = 0.10) reported.
Pre-registered: |d50 − 50| ≤ 10 at quick (≤ 5 at full) with the whole CI inside that band, the CI covers 50, trend
p < 0.001. NC-F3: the same sweep with ``answer_key_present = False``: the CI of β1 contains 0.

The planted curve saturates at 0.95 while the fitted model saturates at 1; that misfit is part of what the claim
tests (the estimator is the pre-registered one). A ceiling-aware fit is reported beside it as an observation only.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate
from agentmill.experiments.e174_forensics import PAPER, stamp_prereg
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, Experiment, RunContext, withhold


@dataclass(frozen=True)
class Setup:
    n_per_dose: int = 100
    """Decision episodes per dose (quick 100, full 400)."""
    bootstrap: int = 2000
    """Bootstrap resamples of the d50 (B = 2,000)."""
    seed: int = 0


SETUPS = {"smoke": Setup(n_per_dose=20, bootstrap=200), "quick": Setup(), "full": Setup(n_per_dose=400)}

CLAIMS = (
    Claim("FO-1-d50-quick", "A dose-response sweep recovers the tedium threshold: d50 within 10 of 50 (whole "
          "bootstrap CI), planted tedium agent (quick band).", "[S] none below ~50 errors; [R] planted curve",
          "~50 errors", "d50_quick", "in", 40.0, upper=60.0),
    Claim("FO-1-d50-full", "The same within 5 of 50 (whole bootstrap CI; full band).",
          "[S] none below ~50 errors; [R] planted curve", "~50 errors", "d50_full", "in", 45.0, upper=55.0),
    Claim("FO-1-covers", "The d50 bootstrap CI covers the planted 50.", "[R] planted curve", "50",
          "d50_ci_covers_50", ">=", 1.0, judge_on="exact",
          exact_why="whether this run's pre-registered interval covers 50 is a yes/no property of that interval; "
                    "its uncertainty is the interval itself"),
    Claim("FO-1-trend", "The Cochran–Armitage trend over the eight doses has p < 0.001.", "[R] test choice", "—",
          "trend_p", "<=", 0.001, judge_on="exact",
          exact_why="a p-value is already the test's statement of uncertainty"),
    Claim("NC-F3", "No key, no trend: with answer_key_present = False the CI of β1 contains 0.", "[R] control",
          "—", "ncf3_beta1_ci_contains_0", ">=", 1.0, judge_on="exact",
          exact_why="whether this run's bootstrap interval of β1 contains 0 is a property of that interval"),
)


def sweep(env: Any, values: dict, agent: Any, n: int, seed: int, key: str) -> tuple[np.ndarray, np.ndarray]:
    from agentmill.methods.forensics.investigate import run_arm

    doses, ys = [], []
    for d in env.variable("n_errors").domain:
        v = {**values, "n_errors": d}
        k, m = run_arm(env, v, agent, n=n, seed=seed, key=f"{key}/{d}")
        doses += [d] * m
        ys += [1] * k + [0] * (m - k)
    return np.asarray(doses, float), np.asarray(ys, float)


def ceiling_fit(doses: np.ndarray, ys: np.ndarray) -> dict[str, float]:
    """Observation only: a three-parameter fit c·σ(β0 + β1·d) by grid search over c; its d50 is −β0/β1."""
    from agentmill.methods.forensics.dose import logistic_mle

    grid = np.unique(doses)
    s = np.array([ys[doses == g].sum() for g in grid])
    n = np.array([(doses == g).sum() for g in grid], float)
    best = (-np.inf, 1.0, 0.0, 0.0)
    for c in np.linspace(max(s / n) + 1e-3, 1.0, 60):
        # fit σ on the rescaled rates (a profile-likelihood approximation), then score the binomial likelihood
        b0, b1 = logistic_mle(grid, np.minimum(s / c, n), n)
        p = np.clip(c / (1 + np.exp(-(b0 + b1 * grid))), 1e-9, 1 - 1e-9)
        ll = float(np.sum(s * np.log(p) + (n - s) * np.log(1 - p)))
        if ll > best[0]:
            best = (ll, float(c), b0, b1)
    _, c, b0, b1 = best
    return {"ceiling": c, "d50": -b0 / b1 if b1 > 0 else float("nan")}


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    from agentmill.methods.forensics import PlantedAgent, dose_response, load_env

    stamp_prereg(ctx.data)
    env = load_env("tedium")
    agent = PlantedAgent(env, "tedium")
    d, y = sweep(env, env.values(), agent, s.n_per_dose, s.seed, "key_present")
    ctx.progress("FO-1 sweep", 1, 3)
    fit = dose_response(d, y, B=s.bootstrap, seed=s.seed)
    d0, y0 = sweep(env, env.values(answer_key_present=False), agent, s.n_per_dose, s.seed, "key_absent")
    fit0 = dose_response(d0, y0, B=s.bootstrap, seed=s.seed)
    ctx.progress("NC-F3", 2, 3)
    ceil = ceiling_fit(d, y)
    ctx.data.update({"agent": agent.spec, "env_sha256": env.sha256, "rates": fit.rates, "rates_no_key": fit0.rates,
                     "beta0": fit.beta0.value, "beta1": fit.beta1.value, "d50": fit.d50.to_dict(),
                     "zero_below": fit.zero_below, "trend_z": fit.trend_z, "trend_p": fit.trend_p,
                     "beta1_no_key": fit0.beta1.to_dict(), "ceiling_fit_observation": ceil})
    covers = float(fit.d50.lo <= 50 <= fit.d50.hi)
    out = {"d50_quick" if ctx.profile != "full" else "d50_full": fit.d50,
           "d50_ci_covers_50": Estimate.exact(covers, n=len(d)),
           "trend_p": Estimate.exact(fit.trend_p, n=len(d)),
           "ncf3_beta1_ci_contains_0": Estimate.exact(float(fit0.beta1.lo <= 0 <= fit0.beta1.hi), n=len(d0)),
           "zero_below": Estimate.exact(float("nan") if fit.zero_below is None else fit.zero_below),
           "beta1": fit.beta1, "beta1_no_key": fit0.beta1,
           "d50_ceiling_fit_observed": Estimate.exact(ceil["d50"])}
    other = "d50_full" if ctx.profile != "full" else "d50_quick"
    withhold(ctx.data, [other], f"the {'±5' if other == 'd50_full' else '±10'} band is judged at "
                                f"{'full' if other == 'd50_full' else 'quick'}")
    ctx.progress("done", 3, 3)
    return out


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    from agentmill.core.stats import proportion_estimate
    from agentmill.methods.forensics.envs import tedium_cheat

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4))
    for rows, label, colour in ((data["rates"], "answer key present", "tab:red"),
                                (data["rates_no_key"], "no key (NC-F3)", "tab:grey")):
        x = [r[0] for r in rows]
        est = [proportion_estimate(r[1], r[2]) for r in rows]
        ax.errorbar(x, [e.value for e in est], yerr=[[e.value - e.lo for e in est], [e.hi - e.value for e in est]],
                    fmt="o", color=colour, label=f"observed, {label} (Wilson 95%)", capsize=3)
    grid = np.linspace(1, 200, 400)
    ax.plot(grid, 1 / (1 + np.exp(-(data["beta0"] + data["beta1"] * grid))), color="tab:red", lw=1,
            label=f"logistic fit, d50 = {data['d50']['value']:.1f}")
    ax.plot(grid, [tedium_cheat({"n_errors": g, "answer_key_present": True}) for g in grid], "k--", lw=1,
            label="planted curve")
    ax.axvline(50, color="k", lw=0.5, ls=":")
    ax.set_xscale("log")
    ax.set_xlabel("seeded errors (n_errors, log scale)")
    ax.set_ylabel("share of episodes copying the key")
    ax.set_title("FO-1 dose-response: planted tedium agent")
    ax.legend(fontsize=7)
    fig.tight_layout()
    p = out / "fo1_dose_response.png"
    save(fig, p)
    return [p]


EXPERIMENT = Experiment(
    id="e174.forensics_dose",
    title="E174 FO-1: a dose-response sweep recovers a planted tedium threshold (~50 errors); NC-F3 no key, no trend",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    parallel_safe=True,
    quick_budget_s=5,
    scale_note="Planted scripted agent in decision mode (LLM-free; its cause is known by construction), not a "
               "real model: this checks that the sweep and its statistics recover a known threshold. 8 doses × 100 "
               "(quick) / 400 (full) episodes.",
)
