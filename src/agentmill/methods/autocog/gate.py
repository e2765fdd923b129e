"""The discrimination gate [C `AutoCog.propose_round`]: a Welch t-test at the *real* sample size on two simulated metric
estimates. Accept iff p < α (α = 0.01, the code's function default [C `AutoCog.propose_round`]).

Alternatives [R]: ``power_gate`` (Monte Carlo power of the real
N = 25 experiment [I]: the plug-in Welch gate admits designs at about 50% power) and ``jsd_gate`` (JSD of the
pooled simulated choices above a calibrated threshold, [C `src/jsd.py`]); ``calibrate_jsd_threshold`` recomputes
that threshold.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats

from agentmill.methods.autocog.metrics import MetricValue

ALPHA = 0.01  # [C] function default (a stale comment says 0.05)
N_REAL = 25  # REAL_N_SUBJECTS [C src/run_config.py]
JSD_THRESHOLD = 0.0407  # median of 150 calibration JSDs [C `configs/jsd_threshold.json`]


@dataclass(frozen=True)
class GateResult:
    accepted: bool
    p: float
    t: float
    df: float
    mu_a: float
    mu_b: float
    sd_a: float
    sd_b: float
    n_real: int
    alpha: float
    kind: str
    reason: str
    stat: float | None = None
    """The alternative gates' statistic (power_gate: estimated power; jsd_gate: the JSD); None for Welch."""

    def to_json(self) -> dict:
        d = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in asdict(self).items()}
        if d["stat"] is None:  # Welch payloads stay byte-identical to ledgers written before ``stat`` existed
            del d["stat"]
        return d


def welch_gate(a: MetricValue, b: MetricValue, *, n_real: int = N_REAL, alpha: float = ALPHA) -> GateResult:
    nan = float("nan")
    if a.value is None or b.value is None or a.variance is None or b.variance is None \
            or not all(map(math.isfinite, (a.value, b.value, a.variance, b.variance))):
        return GateResult(False, 1.0, nan, nan, a.value if a.value is not None else nan,
                          b.value if b.value is not None else nan, nan, nan, n_real, alpha, "welch",
                          "missing value or variance")
    sa, sb = math.sqrt(a.variance), math.sqrt(b.variance)
    if sa == 0 and sb == 0:
        t, p, df = (0.0, 1.0, nan) if a.value == b.value else (math.copysign(math.inf, a.value - b.value), 0.0, nan)
    else:
        res = stats.ttest_ind_from_stats(a.value, sa, n_real, b.value, sb, n_real, equal_var=False)
        t, p = float(res.statistic), float(res.pvalue)
        p = 1.0 if math.isnan(p) else p  # both SDs 0 with equal means counts as 1 [C]
        va, vb = a.variance / n_real, b.variance / n_real
        df = (va + vb) ** 2 / (va ** 2 / (n_real - 1) + vb ** 2 / (n_real - 1))
    ok = p < alpha
    return GateResult(ok, p, t, df, a.value, b.value, sa, sb, n_real, alpha, "welch",
                      "accepted" if ok else f"p = {p:.3g} >= alpha = {alpha}")


def power_gate(a: MetricValue, b: MetricValue, *, n_real: int = N_REAL, alpha: float = ALPHA, target_power: float = 0.8,
               n_mc: int = 2000, rng: np.random.Generator) -> GateResult:
    """Accept iff the Monte Carlo power of a real ``n_real``-per-group Welch test at ``alpha`` is ≥ ``target_power``.

    [R] (a principled version of the gate; target power 0.8 is this project's default).
    Each replication draws ``n_real`` subjects per theory — resampled from the simulated per-subject values when the
    MetricValue carries them (shares are bounded, so no normal approximation), else from N(μ, σ²) — and runs Welch's
    test. ``p``, ``t``, ``df`` are the plug-in Welch values (as in ``welch_gate``); ``stat`` is the power.
    """
    if not 0 < target_power <= 1 or n_mc < 1:
        raise ValueError(f"power_gate: need 0 < target_power <= 1 and n_mc >= 1, got {target_power}, {n_mc}")
    w = welch_gate(a, b, n_real=n_real, alpha=alpha)
    if w.reason == "missing value or variance":
        return GateResult(**{**asdict(w), "kind": "power", "stat": 0.0})

    def draws(e: MetricValue) -> np.ndarray:
        if e.per_subject is not None and len(e.per_subject) > 0:
            return rng.choice(np.asarray(e.per_subject, float), size=(n_mc, n_real), replace=True)
        return rng.normal(e.value, math.sqrt(e.variance), size=(n_mc, n_real))

    xa, xb = draws(a), draws(b)
    ma, mb = xa.mean(1), xb.mean(1)
    va, vb = xa.var(1, ddof=1) / n_real, xb.var(1, ddof=1) / n_real
    se = np.sqrt(va + vb)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = (ma - mb) / se
        df = (va + vb) ** 2 / (va ** 2 / (n_real - 1) + vb ** 2 / (n_real - 1))
        p = 2 * stats.t.sf(np.abs(t), df)
    p = np.where(se == 0, np.where(ma == mb, 1.0, 0.0), p)  # both samples constant: equal → 1, else 0 (as Welch)
    power = float((p < alpha).mean())
    ok = power >= target_power
    return GateResult(ok, w.p, w.t, w.df, w.mu_a, w.mu_b, w.sd_a, w.sd_b, n_real, alpha, "power",
                      "accepted" if ok else f"power {power:.3f} < target {target_power}", power)


def jsd_gate(choices_a, choices_b, *, kind: str, threshold: float = JSD_THRESHOLD) -> GateResult:
    """Accept iff the static or sequence JSD of the two theories' pooled simulated choices exceeds ``threshold``
    (0.0407 [C `configs/jsd_threshold.json`]). ``choices_a``/``choices_b``: :class:`Data` on the same design."""
    from agentmill.methods.autocog.jsd import choice_jsd

    if threshold < 0:
        raise ValueError(f"jsd_gate: threshold must be >= 0, got {threshold}")
    d = choice_jsd(choices_a, choices_b, kind)
    nan = float("nan")
    pa, pb = float((choices_a.resp == 0).mean()), float((choices_b.resp == 0).mean())
    ok = d > threshold
    return GateResult(ok, nan, nan, nan, pa, pb, nan, nan, choices_a.n_subjects, nan, f"jsd_{kind}",
                      "accepted" if ok else f"JSD {d:.4f} <= threshold {threshold}", d)


def calibrate_jsd_threshold(pairs, *, n_designs: int = 50, n_runs: int = 300, seed: int = 0,
                            design_kwargs: dict | None = None) -> dict:
    """The repository's calibration [C `configs/jsd_threshold.json`]: median JSD over ``n_designs`` random designs ×
    ``pairs`` (theory, theory) (canonical: TTB–WADD, TTB–Tallying, WADD–Tallying), ``n_runs`` simulated subjects per
    theory and design (common random numbers). Returns both kinds' medians and every JSD."""
    from agentmill.core.seeding import rng_for
    from agentmill.methods.autocog.design import random_design
    from agentmill.methods.autocog.jsd import static_jsd, sequence_jsd
    from agentmill.methods.autocog.simulate import simulate

    if not pairs or n_designs < 1 or n_runs < 1:
        raise ValueError(f"calibrate_jsd_threshold: need pairs, n_designs >= 1, n_runs >= 1; got {len(pairs)} pairs, "
                         f"{n_designs}, {n_runs}")
    rng = rng_for(seed, "jsd-calibration")
    out: dict = {"static": [], "sequence": []}
    for k in range(n_designs):
        design = random_design(rng, **(design_kwargs or {}))
        for ta, tb in pairs:
            da, db = (simulate(t, design, n_runs, (seed, "jsd-cal", k)) for t in (ta, tb))
            out["static"].append(static_jsd(da, db))
            out["sequence"].append(sequence_jsd(da, db))
    return {"static_median": float(np.median(out["static"])), "sequence_median": float(np.median(out["sequence"])),
            "n": len(out["static"]), "jsds": out}
