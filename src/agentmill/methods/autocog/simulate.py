"""Simulated participants ([C] with [R] fixes): per-subject parameter draws, per-subject shuffled schedules, policy,
optional ground-truth action noise. Vectorised over subjects; history-dependent theories loop over trials.

Common random numbers: schedules, parameter draws and choice uniforms come from separate streams keyed by
``seed``, so two theories simulated with the same seed see the same schedules and uniforms.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from agentmill.core.seeding import rng_for
from agentmill.methods.autocog.design import Design


@dataclass
class Data:
    """Choice data of S subjects × T trials. ``resp`` 0 = A, 1 = B; ``pair_idx`` indexes the design's pairs."""

    design: Design
    pair_idx: np.ndarray  # (S, T) int
    resp: np.ndarray  # (S, T) int
    prob_a: np.ndarray | None = None  # (S, T) the model's P(A) (simulation only)

    @property
    def n_subjects(self) -> int:
        return self.resp.shape[0]

    def stimuli(self) -> tuple[np.ndarray, np.ndarray]:
        a, b = self.design.arrays()
        return a[self.pair_idx], b[self.pair_idx]

    def to_json(self) -> dict:
        return {"design": self.design.to_json(), "pair_idx": self.pair_idx.tolist(), "resp": self.resp.tolist()}

    @classmethod
    def from_json(cls, d: dict) -> Data:
        return cls(Design.from_json(d["design"]), np.asarray(d["pair_idx"], int), np.asarray(d["resp"], int))

    def to_rows(self) -> list[dict]:
        """Tidy rows in the repository's format [C] plus trial_idx and pair_idx."""
        A, B = self.stimuli()
        rows = []
        for s in range(self.n_subjects):
            for t in range(self.resp.shape[1]):
                rows.append({"subject_id": s, "trial_idx": t, "pair_idx": int(self.pair_idx[s, t]),
                             "option_a_ratings": A[s, t].astype(int).tolist(),
                             "option_b_ratings": B[s, t].astype(int).tolist(), "response": int(self.resp[s, t])})
        return rows


def choose(prob_a: np.ndarray, u: np.ndarray, policy: str) -> np.ndarray:
    """Policy: 'sample' draws Bernoulli(P(A)); 'argmax' picks the larger, fair coin on exact ties [R]."""
    if policy == "sample":
        return (u >= prob_a).astype(int)
    return np.where(prob_a > 0.5, 0, np.where(prob_a < 0.5, 1, (u >= 0.5).astype(int)))


class _Streams(NamedTuple):
    """The theory-independent random numbers of one simulation: schedules, stimuli and choice uniforms."""

    pair_idx: np.ndarray
    A: np.ndarray
    B: np.ndarray
    u: np.ndarray


_STREAMS: OrderedDict[tuple, _Streams] = OrderedDict()
_STREAMS_MAX = 32  # LRU entries; the reviser cycles over at most ~12 observations per candidate


def _draw_streams(key: tuple, design: Design, n_subjects: int) -> _Streams:
    pair_idx = design.schedules(rng_for(*key, "sched"), n_subjects)
    a, b = design.arrays()
    out = _Streams(pair_idx, a[pair_idx], b[pair_idx], rng_for(*key, "choice").random(pair_idx.shape))
    for arr in out:
        arr.setflags(write=False)  # shared between calls: a write would corrupt every later simulation
    return out


def _streams(key: tuple, design: Design, n_subjects: int) -> _Streams:
    """:func:`_draw_streams`, remembered (LRU). The streams do not depend on the theory (common random numbers), so
    the reviser scoring hundreds of candidates on one observation, and the advocate simulating both slot theories
    on one design, draw them once. Every ``rng_for`` is a fresh generator, so a hit returns exactly the numbers a
    fresh draw gives. Keyed by the seed keys' reprs (what ``derive_seed`` hashes: 1, 1.0 and True differ) and the
    design (equal designs have equal pairs and trial counts)."""
    ck = ("\x1f".join(repr(k) for k in key), n_subjects, design)
    got = _STREAMS.get(ck)
    if got is not None:
        _STREAMS.move_to_end(ck)
        return got
    got = _STREAMS[ck] = _draw_streams(key, design, n_subjects)
    if len(_STREAMS) > _STREAMS_MAX:
        _STREAMS.popitem(last=False)
    return got


def _noise_draws(key: tuple, shape: tuple) -> tuple[np.ndarray, np.ndarray]:
    """Action-noise uniforms and coins. Drawn only when ε > 0: with ε <= 0 no trial flips (a uniform in [0, 1) is
    never < ε), and each stream is its own generator, so skipping them leaves every other draw unchanged."""
    return rng_for(*key, "noise").random(shape), rng_for(*key, "coin").random(shape) < 0.5


def simulate(theory, design: Design, n_subjects: int, seed: int | tuple, *, action_noise: float = 0.0,
             params: dict | None = None) -> Data:
    """Simulate ``n_subjects`` participants of ``theory`` on ``design``."""
    key = seed if isinstance(seed, tuple) else (seed,)
    ctx = design.context()
    pair_idx, A, B, u = _streams(key, design, n_subjects)
    if params is None:
        params = theory.params.sample(rng_for(*key, "params", theory.content_id), ctx, n_subjects)
    noisy = action_noise > 0
    if noisy:
        noise_u, coin = _noise_draws(key, pair_idx.shape)
    if hasattr(theory, "simulate_in_sandbox"):  # code theories: the whole batch in one sandboxed child
        p, resp = theory.simulate_in_sandbox(params, A, B, u)
        if noisy:
            resp = np.where(noise_u < action_noise, coin.astype(int), resp)
    elif not theory.history_dependent:
        p = theory.prob_batch(params, A, B, ctx)
        resp = choose(p, u, theory.policy)
        if noisy:
            resp = np.where(noise_u < action_noise, coin.astype(int), resp)
    else:
        S, T = pair_idx.shape
        p = np.empty((S, T))
        resp = np.empty((S, T), int)
        prev = np.full((S, 1), -1)
        for t in range(T):
            pt = theory.prob_batch(params, A[:, t:t + 1], B[:, t:t + 1], ctx, prev)[:, 0]
            rt = choose(pt, u[:, t], theory.policy)
            if noisy:
                rt = np.where(noise_u[:, t] < action_noise, coin[:, t].astype(int), rt)
            p[:, t], resp[:, t] = pt, rt
            prev = rt[:, None]
    return Data(design, pair_idx, resp.astype(int), p)


def expected_choice_props(theory, pairs_a: np.ndarray, pairs_b: np.ndarray, context: dict, *, n_draws: int = 2000,
                          seed: int = 0, action_noise: float = 0.0) -> np.ndarray:
    """P(A) per pair, marginalised over the prior (``n_draws`` parameter draws), with optional action noise mixed
    as a uniform pick. History-dependent theories are evaluated on their first trial (no history)."""
    params = theory.params.sample(rng_for(seed, "ecp", theory.content_id), context, n_draws)
    A = np.broadcast_to(np.asarray(pairs_a, float)[None], (n_draws,) + np.shape(pairs_a))
    B = np.broadcast_to(np.asarray(pairs_b, float)[None], (n_draws,) + np.shape(pairs_b))
    prev = np.full((n_draws, 1), -1)
    p = theory.prob_batch(params, A, B, context, prev if theory.history_dependent else None)
    if theory.policy == "argmax":
        p = np.where(p > 0.5, 1.0, np.where(p < 0.5, 0.0, 0.5))
    p = p.mean(0)
    return (1 - action_noise) * p + action_noise / 2
