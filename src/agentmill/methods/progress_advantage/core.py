"""The progress advantage (E173, arXiv 2606.26080) on plain arrays: step scores from token log-probs,
aggregations, and the three uses — best-of-N selection, success / step-error AUROC, failure attribution.

Read top to bottom it is the paper's pipeline after the two forward passes (README deviations 1-7):

1. per action, token log-ratios ρ_j = lp_θ − lp_ref → a step score A_t = β·agg_tok(ρ)   (:func:`step_scores`)
2. steps → a trajectory score agg_step(A_1..A_T)                                         (:func:`aggregate_steps`)
3. uses: :func:`best_of_n`, :func:`success_auroc`, :func:`step_error_auroc`, :func:`attribute_failure`.

Under KL-regularised RL the step score is exact: β·log(π*(a|s)/π_ref(a|s)) = A*(s,a) **[P]**, stochastic
transitions included; :func:`tabular_progress_advantage` is that quantity on a tabular policy pair. Missing data
is NaN, never 0.0 (the official code's 0.0 silently wins or loses under min/max — README deviation 1).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from agentmill.core.seeding import derive_seed
from agentmill.core.stats import Estimate, auroc, cluster_bootstrap, spearman
from agentmill.core.tabular_mdp import log_ratio_advantage
from agentmill.methods.progress_advantage.config import STEP_AGGS, TOKEN_AGGS

# ------------------------------------------------------------------------------------------ 1-2. aggregation


def aggregate_tokens(x: Sequence[float] | np.ndarray, how: str = "sum") -> float:
    """One action's token values → one number: sum|mean|min|max|last.

    Strict about missing data: an empty span or any NaN token gives NaN (a partial sum over a truncated span is
    not the action's score). Shapes: (n,) → scalar.
    """
    if how not in TOKEN_AGGS:
        raise ValueError(f"token aggregation must be one of {TOKEN_AGGS}, got {how!r}")
    a = np.asarray(x, dtype=np.float64)
    if a.size == 0 or np.isnan(a).any():
        return math.nan
    return aggregate_steps(a, how)      # same reductions; only the NaN rule differs (one NaN token → NaN step)


def aggregate_steps(x: Sequence[float] | np.ndarray, how: str = "sum") -> float:
    """Step scores → a trajectory score: sum|mean|min|max|last|bottom10, skipping NaN steps.

    bottom10 is the mean of the lowest ⌈0.1·T⌉ scored steps (official `pa/aggregations.py`). No scored step → NaN
    (the trajectory is then excluded from selection and AUROCs, with a count). Shapes: (T,) → scalar.
    """
    if how not in STEP_AGGS:
        raise ValueError(f"step aggregation must be one of {STEP_AGGS}, got {how!r}")
    a = np.asarray(x, dtype=np.float64)
    a = a[~np.isnan(a)]
    if a.size == 0:
        return math.nan
    if how == "sum":
        return float(a.sum())
    if how == "mean":
        return float(a.mean())
    if how == "min":
        return float(a.min())
    if how == "max":
        return float(a.max())
    if how == "last":
        return float(a[-1])
    k = max(1, math.ceil(0.1 * a.size))
    return float(np.sort(a)[:k].mean())


def step_score(lp_policy: np.ndarray, lp_ref: np.ndarray, *, beta: float = 1.0, token_agg: str = "sum",
               ratio_mode: str = "per_token") -> float:
    """A_t for one action from its token log-probs under the policy and the reference (same tokens, (n,) each).

    ``per_token``: β·agg(lp_θ − lp_ref). ``separate``: β·(agg(lp_θ) − agg(lp_ref)) (official `pa/scoring.py`); the
    two agree for sum, mean and last and differ for min and max. NaN when the span is empty or has a NaN token.
    """
    p = np.asarray(lp_policy, dtype=np.float64)
    r = np.asarray(lp_ref, dtype=np.float64)
    if p.shape != r.shape:
        raise ValueError(f"policy and reference spans differ in length ({p.size} vs {r.size}); with different "
                         "tokenizers use token_agg='sum' and allow_cross_tokenizer=True")
    if ratio_mode == "per_token":
        return beta * aggregate_tokens(p - r, token_agg)
    if ratio_mode == "separate":
        return beta * (aggregate_tokens(p, token_agg) - aggregate_tokens(r, token_agg))
    raise ValueError(f"ratio_mode must be 'per_token' or 'separate', got {ratio_mode!r}")


def candidate_step_score(ell_policy: np.ndarray, ell_ref: np.ndarray, chosen: int, *, beta: float = 1.0) -> float:
    """A_t over an admissible set: β·[(ℓ_θ(a) − LSE_θ(C)) − (ℓ_ref(a) − LSE_ref(C))] (README deviation 5).

    ``ell_*`` (K,) are the summed log-likelihoods of each candidate (end-of-turn token included, so "go north" is
    not a free prefix of "go north east"); ``chosen`` indexes the realised action. NaN if any candidate is NaN.
    """
    lp = np.asarray(ell_policy, dtype=np.float64)
    lr = np.asarray(ell_ref, dtype=np.float64)
    if lp.shape != lr.shape or lp.ndim != 1 or not 0 <= chosen < lp.size:
        raise ValueError(f"candidate scores must be (K,) each with 0 <= chosen < K; got {lp.shape}, {lr.shape}, "
                         f"{chosen}")
    if np.isnan(lp).any() or np.isnan(lr).any():
        return math.nan

    def log_softmax_at(v: np.ndarray) -> float:
        m = v.max()
        return float(v[chosen] - m - np.log(np.exp(v - m).sum()))

    return beta * (log_softmax_at(lp) - log_softmax_at(lr))


# ------------------------------------------------------------------------------------------ 3a. best-of-N


@dataclass(frozen=True)
class BoNResult:
    """Best-of-N over tasks. Per-task arrays are aligned with ``tasks`` (tasks with no scored candidate excluded).

    ``picked_success`` (n,) success of the pick; ``mean_success`` (n,) pass@1 of the group (the random-pick
    baseline's expectation); ``oracle_success`` (n,) pass@N (any success). ``picks`` maps task → chosen index.
    """

    tasks: tuple[str, ...]
    picks: dict[str, int]
    picked_success: np.ndarray
    mean_success: np.ndarray
    oracle_success: np.ndarray
    n_ties: int
    n_excluded_tasks: int

    @property
    def success(self) -> float:
        return float(self.picked_success.mean()) if self.picked_success.size else math.nan

    @property
    def pass_at_1(self) -> float:
        return float(self.mean_success.mean()) if self.mean_success.size else math.nan

    @property
    def pass_at_n(self) -> float:
        return float(self.oracle_success.mean()) if self.oracle_success.size else math.nan


def best_of_n(scores_by_task: Mapping[str, Sequence[float]], successes: Mapping[str, Sequence[bool]],
              seed: int = 0) -> BoNResult:
    """Pick the highest-scoring trajectory of each task (the paper's best-of-N use [A]).

    Ties are broken uniformly at random by a stream keyed by (seed, task), so the pick of a task does not depend
    on which other tasks are present or their order. NaN scores are never picked; a task whose scores are all NaN
    is excluded and counted (never a silent random pick).
    """
    tasks, picks, ps, ms, os_ = [], {}, [], [], []
    n_ties = n_excl = 0
    for task in scores_by_task:
        s = np.asarray(scores_by_task[task], dtype=np.float64)
        y = np.asarray(successes[task], dtype=bool)
        if s.shape != y.shape or s.ndim != 1 or s.size == 0:
            raise ValueError(f"best_of_n: task {task!r} needs equal-length non-empty scores and successes, got "
                             f"{s.shape} and {y.shape}")
        ok = ~np.isnan(s)
        if not ok.any():
            n_excl += 1
            continue
        best = np.flatnonzero(ok & (s == np.max(s[ok])))
        if best.size > 1:
            n_ties += 1
            pick = int(np.random.default_rng(derive_seed(seed, "best_of_n", str(task))).choice(best))
        else:
            pick = int(best[0])
        tasks.append(str(task))
        picks[str(task)] = pick
        ps.append(float(y[pick]))
        ms.append(float(y.mean()))
        os_.append(float(y.any()))
    return BoNResult(tuple(tasks), picks, np.asarray(ps), np.asarray(ms), np.asarray(os_), n_ties, n_excl)


# ------------------------------------------------------------------------------------------ 3b. AUROCs


def _flatten(step_scores: Sequence[Sequence[float]] | np.ndarray, labels: Sequence[Sequence[int]] | np.ndarray,
             traj: Sequence[int] | np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if traj is None:
        s_list = [np.asarray(x, dtype=np.float64).ravel() for x in step_scores]
        l_list = [np.asarray(x).ravel() for x in labels]
        if len(s_list) != len(l_list) or any(a.size != b.size for a, b in zip(s_list, l_list)):
            raise ValueError("step_error_auroc: scores and labels must have the same trajectories and lengths")
        t = np.concatenate([np.full(a.size, i) for i, a in enumerate(s_list)]) if s_list else np.zeros(0, int)
        return (np.concatenate(s_list) if s_list else np.zeros(0)), \
            (np.concatenate(l_list) if l_list else np.zeros(0)), t
    s, lab, t = (np.asarray(step_scores, dtype=np.float64), np.asarray(labels), np.asarray(traj))
    if not s.shape == lab.shape == t.shape or s.ndim != 1:
        raise ValueError("step_error_auroc: flat scores, labels and traj must be 1-D of equal length")
    return s, lab, t


class StepErrorAUROC(NamedTuple):
    """AUROC of −A_t against error_t = 1 − progress_t with a cluster-bootstrap CI, and what was left out."""

    estimate: Estimate
    n_steps: int
    n_errors: int
    n_unknown_label: int
    n_missing_score: int


def step_error_auroc(step_scores: Sequence[Sequence[float]] | np.ndarray,
                     labels: Sequence[Sequence[int]] | np.ndarray, *, traj: Sequence[int] | np.ndarray | None = None,
                     n_boot: int = 2000, seed: int = 0) -> StepErrorAUROC:
    """Does a low step score flag a step that made no progress? (README deviation 7: steps within a trajectory are
    dependent, so CIs resample trajectories)

    ``step_scores``/``labels``: one array per trajectory (A_t and progress_t ∈ {1, 0, −1 unknown}), or flat arrays
    with ``traj`` naming each row's trajectory. Steps with unknown labels or NaN scores are excluded and counted.
    The CI resamples whole trajectories (steps within one are dependent). 0.5 = no signal.
    """
    s, lab, t = _flatten(step_scores, labels, traj)
    known = lab >= 0
    scored = ~np.isnan(s)
    keep = known & scored
    err = (lab[keep] == 0)
    neg = -s[keep]
    clusters = t[keep]
    if keep.sum() == 0 or err.all() or not err.any():
        raise ValueError(f"step_error_auroc needs both error and progress steps among the {int(keep.sum())} usable "
                         f"steps ({int(err.sum())} errors)")
    est = cluster_bootstrap(lambda rows: auroc(neg[rows], err[rows]), clusters, n_boot=n_boot, seed=seed)
    return StepErrorAUROC(est, int(keep.sum()), int(err.sum()), int((~known).sum()), int((known & ~scored).sum()))


def success_auroc(traj_scores: Sequence[float] | np.ndarray, successes: Sequence[bool] | np.ndarray, *,
                  n_boot: int = 2000, seed: int = 0) -> tuple[Estimate, int]:
    """AUROC of the trajectory score against success (uncertainty quantification), bootstrap CI over trajectories;
    returns (estimate, number of trajectories excluded for a NaN score)."""
    s = np.asarray(traj_scores, dtype=np.float64)
    y = np.asarray(successes, dtype=bool)
    if s.shape != y.shape or s.ndim != 1:
        raise ValueError("success_auroc: scores and successes must be 1-D of equal length")
    ok = ~np.isnan(s)
    s, y = s[ok], y[ok]
    est = cluster_bootstrap(lambda rows: auroc(s[rows], y[rows]), np.arange(s.size), n_boot=n_boot, seed=seed)
    return est, int((~ok).sum())


def return_spearman(traj_scores: Sequence[float] | np.ndarray, returns: Sequence[float] | np.ndarray, *,
                    n_boot: int = 2000, seed: int = 0) -> tuple[Estimate, int]:
    """Spearman correlation of the trajectory score with the episode return (the graded counterpart of
    :func:`success_auroc`), bootstrap CI over trajectories; returns (estimate, number excluded for a NaN score).
    A constant resample has no rank correlation: :func:`~agentmill.core.stats.spearman` gives NaN and the
    bootstrap drops and counts it."""
    s = np.asarray(traj_scores, dtype=np.float64)
    r = np.asarray(returns, dtype=np.float64)
    if s.shape != r.shape or s.ndim != 1:
        raise ValueError("return_spearman: scores and returns must be 1-D of equal length")
    ok = ~np.isnan(s)
    s, r = s[ok], r[ok]
    rho = cluster_bootstrap(lambda rows: spearman(s[rows], r[rows]), np.arange(s.size), n_boot=n_boot, seed=seed)
    return rho, int((~ok).sum())


# ------------------------------------------------------------------------------------------ 3c. attribution

ATTRIBUTION_METHODS = ("min_cumulative", "sharpest_drop", "sharpest_abs_drop")


class Attribution(NamedTuple):
    """The step blamed for a failure (an index over action steps) and whether a fallback rule chose it."""

    index: int
    fallback: bool


def attribute_failure(A: Sequence[float] | np.ndarray, method: str = "min_cumulative") -> Attribution:
    """Blame one step of a failed trajectory from its step scores (semantics of the official `runners/fa.py`).

    - ``min_cumulative``: argmin_t Σ_{k≤t} A_k (the lowest point of the running total).
    - ``sharpest_drop``: argmin_t A_t; if every A_t ≥ 0, the first step (fallback).
    - ``sharpest_abs_drop``: the step ending the most negative A_t − A_{t−1}; if no difference is ≤ 0 (or fewer
      than two steps), the first step (fallback).

    NaN steps cannot be blamed and add 0 to running sums; with no scored step the first step is returned as a
    fallback. Ties go to the earliest step. Fallbacks can look like skill when errors come early: report their rate
    and a first-step baseline (README, Caveats).
    """
    if method not in ATTRIBUTION_METHODS:
        raise ValueError(f"attribution method must be one of {ATTRIBUTION_METHODS}, got {method!r}")
    a = np.asarray(A, dtype=np.float64)
    if a.ndim != 1 or a.size == 0:
        raise ValueError("attribute_failure needs a non-empty 1-D array of step scores")
    valid = np.flatnonzero(~np.isnan(a))
    if valid.size == 0:
        return Attribution(0, True)
    first = int(valid[0])
    if method == "min_cumulative":
        cum = np.cumsum(np.nan_to_num(a, nan=0.0))
        return Attribution(int(valid[np.argmin(cum[valid])]), False)
    if method == "sharpest_drop":
        if np.all(a[valid] >= 0):
            return Attribution(first, True)
        return Attribution(int(valid[np.argmin(a[valid])]), False)
    if valid.size < 2:
        return Attribution(first, True)
    delta = np.diff(a[valid])
    if not np.any(delta <= 0):
        return Attribution(first, True)
    return Attribution(int(valid[1:][np.argmin(delta)]), False)


class AttributionMetrics(NamedTuple):
    """Exact-step accuracy, mean absolute error in steps and fallback rate over failed trajectories."""

    accuracy: float
    mae: float
    fallback_rate: float
    n: int


def attribution_metrics(step_scores: Sequence[Sequence[float]], true_steps: Sequence[int],
                        method: str = "min_cumulative") -> AttributionMetrics:
    """Score :func:`attribute_failure` against known decisive steps (e.g. KeyDoor's "throw the key in the well").
    Warns when more than half the picks were fallbacks [R]."""
    if len(step_scores) != len(true_steps) or not step_scores:
        raise ValueError("attribution_metrics needs one true step per trajectory (and at least one trajectory)")
    picks = [attribute_failure(s, method) for s in step_scores]
    d = np.abs(np.array([p.index for p in picks]) - np.asarray(true_steps))
    fb = float(np.mean([p.fallback for p in picks]))
    if fb > 0.5:
        warnings.warn(f"attribution fallback rate {fb:.0%} > 50%: most picks are the first step by rule, not by "
                      "score", stacklevel=2)
    return AttributionMetrics(float((d == 0).mean()), float(d.mean()), fb, len(picks))


# ------------------------------------------------------------------------------------------ tabular pair


def tabular_progress_advantage(pi: np.ndarray, pi_ref: np.ndarray, beta: float,
                               valid: np.ndarray | None = None) -> np.ndarray:
    """β·log(π(a|s)/π_ref(a|s)) on (S, A), NaN on invalid or zero-probability actions.

    At the KL-regularised optimum π = π* this equals the soft-optimal advantage A*(s, a) = Q*(s, a) − V*(s)
    exactly **[P]** (arXiv:2606.26080); :mod:`.exactness` checks it on random stochastic MDPs.
    """
    return log_ratio_advantage(pi, pi_ref, beta, valid)
