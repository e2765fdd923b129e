"""Scoring on all data so far ([C `src/observation.py`, `src/feedback.py`]).

d_{o,T} = |p_{o,T} - r_o|; per observation min-max normalised across theories (all equal -> 0; missing -> 1);
score s_T = 1 - ||n_{.,T}||_2 / max_T' ||n_{.,T'}||_2 (all norms 0 -> all 1).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence


def normalized_distances(real: float | None, preds: Mapping[str, float | None]) -> dict[str, float]:
    ok = {k: abs(v - real) for k, v in preds.items() if v is not None and real is not None
          and math.isfinite(v)}
    out = {k: 1.0 for k in preds}
    if not ok:
        return out
    lo, hi = min(ok.values()), max(ok.values())
    for k, d in ok.items():
        out[k] = 0.0 if hi == lo else (d - lo) / (hi - lo)
    return out


def leaderboard(observations: Sequence[tuple[float | None, Mapping[str, float | None]]], theories: Sequence[str], *,
                on_missing_real: str = "exclude") -> list[tuple[str, float]]:
    """``observations``: (real value, {theory: prediction}) per observation. Sorted best first (stable by order)."""
    sq = {t: 0.0 for t in theories}
    for real, preds in observations:
        if real is None and on_missing_real == "exclude":
            continue  # [R] a metric that failed on real data would score everyone 1
        n = normalized_distances(real, {t: preds.get(t) for t in theories})
        for t in theories:
            sq[t] += n[t] ** 2
    norms = {t: math.sqrt(v) for t, v in sq.items()}
    mx = max(norms.values(), default=0.0)
    scores = {t: 1.0 if mx == 0 else 1 - norms[t] / mx for t in theories}
    return sorted(scores.items(), key=lambda kv: -kv[1])


def aggregate_loss(cand: Sequence[float | None],
                   observations: Sequence[tuple[float | None, Mapping[str, float | None]]]) -> float:
    """L(C) = mean_o |p_{o,C} - r_o| / spread_o, spread over {r_o, p_{o,C}} ∪ registered predictions [C]."""
    losses = []
    for c, (real, preds) in zip(cand, observations):
        if real is None:
            continue
        if c is None or not math.isfinite(c):
            losses.append(1.0)
            continue
        vals = [real, c] + [v for v in preds.values() if v is not None and math.isfinite(v)]
        spread = max(vals) - min(vals)
        losses.append(abs(c - real) / spread if spread > 0 else abs(c - real))
    return sum(losses) / len(losses) if losses else math.inf


def raw_errors(observations, theories) -> dict[str, float]:
    """Mean |p - r| per theory ([R] report magnitude next to the relative score)."""
    out = {}
    for t in theories:
        e = [abs(p[t] - r) for r, p in observations if r is not None and p.get(t) is not None]
        out[t] = sum(e) / len(e) if e else math.nan
    return out


def prospective_scores(observations: Sequence[tuple[int, float | None, Mapping[str, float | None]]],
                       admitted_round: Mapping[str, int], *, on_missing_real: str = "exclude"
                       ) -> dict[str, float | None]:
    """Each theory's leaderboard score on the observations collected *after* its admission only (post-admit scores
    are in-sample, because a revised theory was optimised on the very observations it is scored on [R]).

    ``observations``: (round collected, real value, {theory: prediction}); ``admitted_round``: theory → the round in
    which it was admitted (seeds: 0). A theory admitted in round r (after that round's data) is scored with the paper's
    rule on the observations of rounds > r, against every theory that has a prediction on all of them (after
    backfill: every registered theory, i.e. the leaderboard's own set restricted to those observations).
    None when no such observation exists (None if there are no post-admission data [R])."""
    out: dict[str, float | None] = {}
    for t, r_adm in admitted_round.items():
        later = [(real, preds) for rnd, real, preds in observations if rnd > r_adm
                 and not (real is None and on_missing_real == "exclude")]
        if not later:
            out[t] = None
            continue
        rivals = [u for u in admitted_round if u == t or all(u in preds for _, preds in later)]
        out[t] = dict(leaderboard(later, rivals, on_missing_real=on_missing_real))[t]
    return out
