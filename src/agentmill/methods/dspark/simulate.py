"""A trace-driven simulator of closed-loop serving (claim L2, docs/methods/dspark.md).

Real rounds recorded under full verification (``fixed:γ``) give, per round, the confidences the scheduler would see
and how many drafted tokens the target accepted. Because acceptance is decided position by position with the
same draws whatever ℓ is, a round verified to ℓ commits ``min(m, ℓ) + 1`` tokens. The simulator replays such
rounds for C virtual users against the SPS(B) table (plus the measured drafter time per request), so the
scheduler can be evaluated at loads the 2-core machine cannot run for long (e.g. C = 64) — once its predictions
have been checked against the real engine at loads it can run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class TraceSet:
    """Full-verification rounds: calibrated step confidences ``conf [n, γ]`` and accepted counts ``accepted [n]``;
    ``draft_s_per_request``: measured drafter time per request-round; ``prompt_tokens``: prompt lengths seen."""

    conf: np.ndarray
    accepted: np.ndarray
    draft_s_per_request: float
    prompt_tokens: list[int]

    @classmethod
    def from_rounds(cls, rounds: Sequence[Any], temps: np.ndarray | None, draft_s_per_request: float,
                    prompt_tokens: list[int]) -> TraceSet:
        g = max(len(r.conf_logits) for r in rounds)
        full = [r for r in rounds if r.verified == g and len(r.conf_logits) == g]
        z = np.array([r.conf_logits for r in full], dtype=np.float64)
        t = np.ones(g) if temps is None else np.asarray(temps, dtype=np.float64)[:g]
        return cls(1 / (1 + np.exp(-z / t)), np.array([r.accepted for r in full]), draft_s_per_request,
                   list(prompt_tokens))


@dataclass
class SimPoint:
    policy: str
    concurrency: int
    throughput: float
    per_user_tps: float
    tau: float


def simulate(traces: TraceSet, policy: Any, sps: Any, *, concurrency: int, max_tokens: int, n_requests: int,
             seed: int = 0, ctx: int = 256, drafting: bool = True) -> SimPoint:
    """Closed loop with ``concurrency`` users until ``n_requests`` have finished; each step costs the table's step
    time at B = Σ(1 + ℓ_r) + prefill tokens, plus the drafter's time for the decoding requests."""
    rng = np.random.default_rng(seed)
    g = traces.conf.shape[1]
    n_rounds = len(traces.accepted)
    users = []

    def new_user() -> dict[str, Any]:
        return {"left": max_tokens, "prefill": int(rng.choice(traces.prompt_tokens)), "t_first": None,
                "n": 0}

    users = [new_user() for _ in range(concurrency)]
    t, done, tokens, tps, committed_total, rounds_total = 0.0, 0, 0, [], 0, 0
    while done < n_requests:
        dec = [u for u in users if u["prefill"] == 0]
        pre = [u for u in users if u["prefill"] > 0]
        E = sum(u["prefill"] for u in pre)
        R = len(dec)
        ell = np.zeros(R, dtype=np.int64)
        picks = rng.integers(0, n_rounds, R)
        if R and drafting and getattr(policy, "name", "off") != "off":
            conf = traces.conf[picks]
            avail = np.array([min(g, u["left"] - 1) for u in dec], dtype=np.int64).clip(0)
            ell = np.asarray(policy.lengths(conf, avail, np.arange(R), E), dtype=np.int64)
            policy.observe(np.arange(R), np.cumprod(conf, 1))
        B = int(R + ell.sum() + E)
        dt = sps.step_time(min(max(B, 1), sps.max_B), max(R, 1), ctx)
        if R and drafting and getattr(policy, "name", "off") != "off":
            dt += traces.draft_s_per_request * R
        t += dt
        for u in pre:                                  # prefill commits the first token
            u["prefill"] = 0
            u["left"] -= 1
            u["n"] += 1
            u["t_first"] = t
            tokens += 1
        for j, u in enumerate(dec):
            m = int(min(traces.accepted[picks[j]], ell[j])) + 1
            m = min(m, u["left"])
            u["left"] -= m
            u["n"] += m
            tokens += m
            committed_total += m
            rounds_total += 1
        for i, u in enumerate(users):
            if u["left"] <= 0:
                if u["n"] > 1 and t > u["t_first"]:
                    tps.append((u["n"] - 1) / (t - u["t_first"]))
                done += 1
                users[i] = new_user()
    return SimPoint(getattr(policy, "name", "off"), concurrency, tokens / t, float(np.mean(tps)) if tps else
                    float("nan"), committed_total / rounds_total if rounds_total else 1.0)
