"""Scoring on all data so far (spec autocog §2.9 [C `src/observation.py`, `src/feedback.py`]).

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
            continue  # pitfall 16: a metric that failed on real data would score everyone 1
        n = normalized_distances(real, {t: preds.get(t) for t in theories})
        for t in theories:
            sq[t] += n[t] ** 2
    norms = {t: math.sqrt(v) for t, v in sq.items()}
    mx = max(norms.values(), default=0.0)
    scores = {t: 1.0 if mx == 0 else 1 - norms[t] / mx for t in theories}
    return sorted(scores.items(), key=lambda kv: -kv[1])


def aggregate_loss(cand: Sequence[float | None],
                   observations: Sequence[tuple[float | None, Mapping[str, float | None]]]) -> float:
    """L(C) = mean_o |p_{o,C} - r_o| / spread_o, spread over {r_o, p_{o,C}} ∪ registered predictions (§2.9)."""
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
    """Mean |p - r| per theory (pitfall 3: report magnitude next to the relative score)."""
    out = {}
    for t in theories:
        e = [abs(p[t] - r) for r, p in observations if r is not None and p.get(t) is not None]
        out[t] = sum(e) / len(e) if e else math.nan
    return out
