"""The discrimination gate (spec autocog §2.8): a Welch t-test at the *real* sample size on two simulated metric
estimates. Accept iff p < α (α = 0.01, the code's function default [C `AutoCog.propose_round`])."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats

from agentmill.methods.autocog.metrics import Estimate

ALPHA = 0.01  # [C] function default (a stale comment says 0.05)
N_REAL = 25  # REAL_N_SUBJECTS [C src/run_config.py]


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

    def to_json(self) -> dict:
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in asdict(self).items()}


def welch_gate(a: Estimate, b: Estimate, *, n_real: int = N_REAL, alpha: float = ALPHA) -> GateResult:
    nan = float("nan")
    if a.value is None or b.value is None or a.variance is None or b.variance is None \
            or not np.isfinite([a.value, b.value, a.variance, b.variance]).all():
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
