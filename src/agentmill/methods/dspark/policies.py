"""Verify-length policies and the load-aware scheduler (arXiv:2607.05147 Algorithm 1, §5.2, App. A [A]).

Each step the engine drafts up to γ tokens for each of R decoding requests and asks the policy how many of them
the target should verify. Verifying more tokens costs step time, SPS(B) falls as the step's token count B grows, and
the expected gain of position j of request r is its prefix survival ``a_{r,j} = ∏_{i≤j} c_{r,i}``. The scheduler
maximises ``Θ = (Σ_r 1 + Σ_{j≤ℓ_r} a_{r,j}) · SPS(B)``.

Losslessness (non-anticipation; paper App. A [A]): whether position k of request r is verified may depend on x_{r,<k}
(hence on c_{r,≤k}), on other requests and on the past, never on x_{r,k} or later. Algorithm 1's *early stop* keeps the
greedy walk causal; the ``retrospective`` search (same walk, no break, best prefix) violates it and is kept only as
the negative control of the App.-A counterexample. The stale-capacity variant picks the number of admitted tokens
K* from survivals recorded ``s ≥ 1`` steps ago and admits the top-K* fresh candidates under the value-independent
order (−a, position, request id); with s = 0 it would be the retrospective search, so s = 0 is refused.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Protocol

import numpy as np


class VerifyPolicy(Protocol):
    name: str

    def lengths(self, conf: np.ndarray | None, avail: np.ndarray, req_ids: np.ndarray,
                extra_tokens: int) -> np.ndarray: ...

    def observe(self, req_ids: np.ndarray, survival: np.ndarray) -> None: ...


def survival_of(conf: np.ndarray) -> np.ndarray:
    """Prefix survivals from step confidences, clamped to [0, 1]; a cumulative product keeps them non-increasing."""
    return np.cumprod(np.clip(np.asarray(conf, dtype=np.float64), 0.0, 1.0), axis=1)


def _candidates(a: np.ndarray, avail: np.ndarray, req_ids: np.ndarray) -> list[tuple[float, int, int, int]]:
    """(−a, position j (1-based), request id, row) for every draftable position, in admission order."""
    out = []
    for r in range(a.shape[0]):
        for j in range(1, int(avail[r]) + 1):
            out.append((-float(a[r, j - 1]), j, int(req_ids[r]), r))
    out.sort()
    return out


def schedule(conf: np.ndarray, avail: np.ndarray, sps: Any, policy: str, *, req_ids: np.ndarray | None = None,
             extra_tokens: int = 0, ctx: int = 512, stale_survival: np.ndarray | None = None) -> np.ndarray:
    """Pure scheduling function (the conformance entry point [R]): verify lengths for ``policy`` in ``dspark``,
    ``retrospective`` (negative control) or ``dspark-async`` (needs ``stale_survival``, one row per request)."""
    conf = np.asarray(conf, dtype=np.float64)
    avail = np.minimum(np.asarray(avail, dtype=np.int64), conf.shape[1])
    R = conf.shape[0]
    ids = np.arange(R) if req_ids is None else np.asarray(req_ids)
    a = survival_of(conf)
    ell = np.zeros(R, dtype=np.int64)
    B, tau = R + extra_tokens, float(R)
    if R == 0:
        return ell

    if B >= sps.max_B:
        return ell      # the step is already at or past the profiled range (a long prefill chunk): verify nothing extra

    def theta(t: float, b: int) -> float:
        return t * sps.sps(b, R, ctx)

    if policy in ("dspark", "retrospective"):
        best, best_ell = theta(tau, B), ell.copy()
        for neg_a, j, _, r in _candidates(a, avail, ids):
            if -neg_a <= 0:
                break
            if B + 1 > sps.max_B:
                break
            t_new = theta(tau - neg_a, B + 1)
            if policy == "dspark":
                if t_new > best:
                    ell[r], B, tau, best = j, B + 1, tau - neg_a, t_new
                else:
                    break                       # the early stop: what keeps the walk causal
            else:
                ell[r], B, tau = j, B + 1, tau - neg_a
                if t_new > best:
                    best, best_ell = t_new, ell.copy()
        return ell if policy == "dspark" else best_ell
    if policy == "dspark-async":
        if stale_survival is None:
            raise ValueError("dspark-async needs the stale survival vectors")
        st = np.asarray(stale_survival, dtype=np.float64)
        stale_vals = np.sort(np.concatenate([st[r, : int(avail[r])] for r in range(R)]))[::-1]
        best_k, best = 0, theta(tau, B)
        cum = 0.0
        for k, v in enumerate(stale_vals, start=1):
            if B + k > sps.max_B:
                break
            cum += float(v)
            t = theta(tau + cum, B + k)
            if t > best:
                best_k, best = k, t
        for _, j, _, r in _candidates(a, avail, ids)[:best_k]:
            ell[r] = max(ell[r], j)
        return ell
    raise ValueError(f"schedule: unknown policy {policy!r}")


class Off:
    name = "off"

    def lengths(self, conf, avail, req_ids, extra_tokens):
        return np.zeros(len(avail), dtype=np.int64)

    def observe(self, req_ids, survival):
        pass


class Fixed:
    """``fixed:k``: verify min(k, avail) drafted tokens; ``fixed:1`` is the MTP-1-like baseline."""

    def __init__(self, k: int):
        if k < 0:
            raise ValueError("fixed:k needs k >= 0")
        self.k, self.name = k, f"fixed:{k}"

    def lengths(self, conf, avail, req_ids, extra_tokens):
        return np.minimum(np.asarray(avail, dtype=np.int64), self.k)

    def observe(self, req_ids, survival):
        pass


class Threshold:
    """``threshold:t``: cut at the first position whose step confidence is below t (DeepSpec's rule)."""

    def __init__(self, t: float):
        if not 0 <= t <= 1:
            raise ValueError("threshold:t needs t in [0, 1]")
        self.t, self.name = t, f"threshold:{t:g}"

    def lengths(self, conf, avail, req_ids, extra_tokens):
        avail = np.asarray(avail, dtype=np.int64)
        if conf is None:
            return avail
        below = np.asarray(conf) < self.t
        first = np.where(below.any(1), below.argmax(1), conf.shape[1])
        return np.minimum(first, avail)

    def observe(self, req_ids, survival):
        pass


class _Adaptive:
    def __init__(self, sps: Any, ctx: int = 512):
        if sps is None:
            raise ValueError(f"policy {self.name!r} needs an SPS(B) cost table (adaptive policies never "
                             "run without one)")
        self.sps, self.ctx = sps, ctx

    def observe(self, req_ids, survival):
        pass


class DSpark(_Adaptive):
    """Algorithm 1: greedy walk over candidates by survival, stopping at the first step that lowers Θ."""

    name = "dspark"

    def lengths(self, conf, avail, req_ids, extra_tokens):
        if conf is None:
            return np.asarray(avail, dtype=np.int64)
        return schedule(conf, avail, self.sps, "dspark", req_ids=req_ids, extra_tokens=extra_tokens, ctx=self.ctx)


class Retrospective(_Adaptive):
    """NEGATIVE CONTROL ONLY — not lossless: the walk without the break, keeping the best prefix (App. A)."""

    name = "retrospective"

    def lengths(self, conf, avail, req_ids, extra_tokens):
        if conf is None:
            return np.asarray(avail, dtype=np.int64)
        return schedule(conf, avail, self.sps, "retrospective", req_ids=req_ids, extra_tokens=extra_tokens,
                        ctx=self.ctx)


class DSparkAsync(_Adaptive):
    """Stale capacity (paper §5.2): K* from survivals recorded ``s`` steps ago (per request; a request without a
    snapshot gets the mean survival vector of the last 64 rounds), then the top-K* fresh candidates."""

    def __init__(self, sps: Any, s: int = 2, ctx: int = 512, prior_rounds: int = 64):
        if s < 1:
            raise ValueError("dspark-async needs s >= 1: with s = 0 the capacity would read this step's drafts "
                             "(the retrospective search), which is not lossless")
        super().__init__(sps, ctx)
        self.s, self.name = s, f"dspark-async:{s}" if s != 2 else "dspark-async"
        self._hist: dict[int, deque] = {}
        self._recent: deque = deque(maxlen=prior_rounds)
        self._pending: list[tuple[np.ndarray, np.ndarray]] = []

    def _stale(self, rid: int, g: int) -> np.ndarray:
        h = self._hist.get(rid)
        if h is not None and len(h) >= self.s:
            v = h[-self.s]
        elif self._recent:
            v = np.mean(np.stack([x[:g] for x in self._recent if len(x) >= g]), 0) if any(
                len(x) >= g for x in self._recent) else np.full(g, 0.5)
        else:
            v = np.full(g, 0.5)
        out = np.zeros(g)
        out[: min(g, len(v))] = v[:g]
        return out

    def lengths(self, conf, avail, req_ids, extra_tokens):
        if conf is None:
            return np.asarray(avail, dtype=np.int64)
        g = conf.shape[1]
        stale = np.stack([self._stale(int(r), g) for r in req_ids]) if len(req_ids) else np.zeros((0, g))
        return schedule(conf, avail, self.sps, "dspark-async", req_ids=req_ids, extra_tokens=extra_tokens,
                        ctx=self.ctx, stale_survival=stale)

    def observe(self, req_ids, survival):
        for rid, a in zip(req_ids, survival):
            h = self._hist.setdefault(int(rid), deque(maxlen=max(self.s, 1) + 1))
            h.append(np.asarray(a, dtype=np.float64))
            self._recent.append(np.asarray(a, dtype=np.float64))


class DSD(_Adaptive):
    """Static table R → k (``k*(R) = argmax_k R·(1 + Σ_{j≤k} ā_j)·SPS(R(1+k))`` from mean calib survivals ā)."""

    name = "dsd"

    def __init__(self, sps: Any, mean_survival: np.ndarray | None = None, ctx: int = 512, max_r: int = 64):
        super().__init__(sps, ctx)
        self.abar = None if mean_survival is None else np.asarray(mean_survival, dtype=np.float64)
        self._table: dict[int, int] = {}

    def k_for(self, R: int, g: int) -> int:
        if R not in self._table:
            abar = self.abar if self.abar is not None else 0.6 ** np.arange(1, g + 1)
            best_k, best = 0, -1.0
            for k in range(0, min(g, len(abar)) + 1):
                B = R * (1 + k)
                if B > self.sps.max_B:
                    break
                t = R * (1 + abar[:k].sum()) * self.sps.sps(B, R, self.ctx)
                if t > best:
                    best_k, best = k, t
            self._table[R] = best_k
        return self._table[R]

    def lengths(self, conf, avail, req_ids, extra_tokens):
        avail = np.asarray(avail, dtype=np.int64)
        g = int(avail.max()) if len(avail) else 0
        return np.minimum(avail, self.k_for(len(avail), g if conf is None else conf.shape[1]))


def make_policy(spec: str, sps: Any = None, **kw: Any) -> VerifyPolicy:
    """``off`` | ``fixed:K`` | ``threshold:T`` | ``dsd`` | ``dspark`` | ``dspark-async[:s]`` | ``retrospective``."""
    if spec == "off":
        return Off()
    head, _, arg = spec.partition(":")
    try:
        if head == "fixed":
            return Fixed(int(arg))
        if head == "threshold":
            return Threshold(float(arg))
        if head == "dsd":
            return DSD(sps, kw.get("mean_survival"))
        if head == "dspark" and not arg:
            return DSpark(sps)
        if head == "dspark-async":
            return DSparkAsync(sps, int(arg) if arg else 2)
        if head == "retrospective":
            return Retrospective(sps)
    except ValueError as e:
        if "needs" in str(e):
            raise
        raise ValueError(f"bad policy spec {spec!r}: {e}") from None
    raise ValueError(f"unknown policy {spec!r}; use off, fixed:K, threshold:T, dsd, dspark, dspark-async[:s]")
