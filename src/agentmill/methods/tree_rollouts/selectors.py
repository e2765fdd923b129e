"""Which candidate prefix to expand next: the six selectors of E162 behind one protocol [R].

A selector scores a :class:`CandidateView` (per-candidate arrays built by the sampler, including the virtual
updates of the current wave); the sampler takes the argmax and breaks ties with the expansion's own RNG stream,
never by list order.

UUCB (the paper states the three terms [P], every constant and form here is [R]):

    mu_x   hierarchical posterior mean: root Beta(a0 + k, b0 + n - k); a prefix x with parent candidate pi has
           prior Beta(m * mu_pi, m * (1 - mu_pi)) updated with (k_x, n_x - k_x)
    u_x    = c * sqrt(ln(1 + N) / (1 + n_x)),   p+ = min(1, mu_x + u_x),   p- = max(0, mu_x - u_x)
    VU(x)  = sum over groups a containing x of w_a * [F_a * p+ + S_a * (1 - p-)]      (marginal gain, UCB on p_x)
    D(x)   = 1 - exp(-H_x)                      (H_x: entropy of the sampling distribution at the branch token)
    UUCB   = VU(x) + lam * D(x)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from agentmill.methods.tree_rollouts.config import UUCBConfig


@dataclass
class CandidateView:
    """Per-candidate statistics (arrays of length C) for one scoring round."""

    n: np.ndarray            # scorable leaves under the prefix (+ pending virtual leaves, for exploration)
    n_real: np.ndarray       # scorable leaves under the prefix
    k: np.ndarray            # their successes
    mu: np.ndarray           # hierarchical posterior mean
    entropy: np.ndarray      # branch-token entropy H_x in nats (0 where unknown)
    depth: np.ndarray        # prefix length t
    N: float                 # scorable leaves in the tree (+ pending)
    anc_groups: list[list[int]]     # per candidate: indices into group_w/F/S of the groups containing it
    group_w: np.ndarray      # weights w_a (root 1, others beta)
    group_F: np.ndarray      # all-fail flags (fractional after virtual updates)
    group_S: np.ndarray      # all-success flags
    oracle_p: np.ndarray | None = None   # true success probability of an expansion (synthetic only)


class Selector(Protocol):
    name: str
    root_only: bool

    def scores(self, view: CandidateView) -> np.ndarray: ...


def entropy_term(h: np.ndarray, transform: str = "exp") -> np.ndarray:
    """D(x). By Renyi-2 <= Shannon, 1 - e^-H >= 1 - sum p^2 = P(two fresh samples differ at the branch)."""
    h = np.asarray(h, dtype=np.float64)
    # nan_to_num leaves finite values as they are (and copies): only pay for it when something is not finite
    if not np.isfinite(h).all():
        h = np.nan_to_num(h, nan=0.0)
    elif transform == "raw":
        h = h.copy()  # never hand back the caller's array
    if transform == "raw":
        return h
    return 1.0 - np.exp(-h)


def value_term(view: CandidateView, p_hi: np.ndarray, p_lo: np.ndarray) -> np.ndarray:
    """sum_{a containing x} w_a [F_a p_hi + S_a (1 - p_lo)] for every candidate.

    Candidates with the same number of groups are scored as one (candidates x groups) array and summed along its
    contiguous last axis, which numpy sums row by row exactly as it sums each row alone (same pairwise order),
    so the values are the per-candidate loop's bit for bit; with beta = 0 every candidate has the root group only
    and the whole view is one array expression (the loop was the largest cost of a synthetic run)."""
    groups = view.anc_groups
    out = np.zeros(len(view.n))
    if len(groups) == len(out) and len(out):
        hi, lo = np.asarray(p_hi), np.asarray(p_lo)
        if all(len(g) == len(groups[0]) for g in groups):  # one size (beta = 0: the root group only)
            if not groups[0]:
                return out
            g = np.asarray(groups, dtype=int)
            terms = view.group_w[g] * (view.group_F[g] * hi[:, None] + view.group_S[g] * (1.0 - lo[:, None]))
            out[:] = terms.sum(axis=1)
            return out
        by_len: dict[int, list[int]] = {}
        for i, g in enumerate(groups):
            by_len.setdefault(len(g), []).append(i)
        for size, idx in by_len.items():
            if size == 0:
                continue  # the sum of no term: 0
            rows = np.asarray(idx, dtype=int)
            g = np.asarray([groups[i] for i in idx], dtype=int)
            terms = view.group_w[g] * (view.group_F[g] * hi[rows, None] + view.group_S[g] * (1.0 - lo[rows, None]))
            out[rows] = terms.sum(axis=1)
        return out
    for i, chain in enumerate(view.anc_groups):
        g = np.asarray(chain, dtype=int)
        out[i] = float((view.group_w[g] * (view.group_F[g] * p_hi[i] + view.group_S[g] * (1.0 - p_lo[i]))).sum())
    return out


@dataclass
class UUCB:
    cfg: UUCBConfig = UUCBConfig()
    name: str = "uucb"
    root_only: bool = False
    use_entropy: bool = True

    def terms(self, view: CandidateView) -> dict[str, np.ndarray]:
        u = self.cfg.c * np.sqrt(math.log(1.0 + view.N) / (1.0 + view.n))
        p_hi, p_lo = np.minimum(1.0, view.mu + u), np.maximum(0.0, view.mu - u)
        mu_only = value_term(view, view.mu, view.mu)
        vu = value_term(view, p_hi, p_lo)
        d = entropy_term(view.entropy, self.cfg.entropy_transform) if self.use_entropy else np.zeros(len(u))
        return {"value": mu_only, "explore": vu - mu_only, "entropy": self.cfg.lam * d}

    @staticmethod
    def combine(terms: dict[str, np.ndarray]) -> np.ndarray:
        """The score from :meth:`terms` (so a caller that also logs the terms computes them once)."""
        return terms["value"] + terms["explore"] + terms["entropy"]

    def scores(self, view: CandidateView) -> np.ndarray:
        return self.combine(self.terms(view))


@dataclass
class RandomSelector:
    """Uniform over candidates: all scores equal, the tie-break stream decides (Tree-GRPO, arXiv:2509.21240)."""

    name: str = "random"
    root_only: bool = False

    def scores(self, view: CandidateView) -> np.ndarray:
        return np.zeros(len(view.n))


@dataclass
class IndependentSelector:
    """Only the root is a candidate: plain i.i.d. sampling through the tree code path (the baseline)."""

    name: str = "independent"
    root_only: bool = True

    def scores(self, view: CandidateView) -> np.ndarray:
        return np.zeros(len(view.n))


@dataclass
class EntropySelector:
    """D(x) / (1 + n_x): entropy forking as in TreeRL EPTree (arXiv:2506.11902) and TreeAdv (arXiv:2601.03703)."""

    transform: str = "exp"
    name: str = "entropy"
    root_only: bool = False

    def scores(self, view: CandidateView) -> np.ndarray:
        return entropy_term(view.entropy, self.transform) / (1.0 + view.n)


@dataclass
class GreedyOracle:
    """Exact marginal gain with the true p (synthetic only): sum_a w_a [F_a p + S_a (1 - p)]."""

    name: str = "greedy"
    root_only: bool = False

    def scores(self, view: CandidateView) -> np.ndarray:
        if view.oracle_p is None:
            raise ValueError("the greedy selector needs oracle success probabilities (synthetic backend only)")
        return value_term(view, view.oracle_p, view.oracle_p)


SELECTORS = ("uucb", "ucb", "random", "entropy", "independent", "greedy")


def make_selector(name: str, **kw) -> Selector:
    """``make_selector("uucb", c=0.5, beta=0.25)``; unknown names and keywords fail loudly."""
    if name in ("uucb", "ucb"):
        cfg = kw.pop("cfg", None) or UUCBConfig(**{k: kw.pop(k) for k in list(kw) if k in UUCBConfig.__dataclass_fields__})
        if kw:
            raise TypeError(f"make_selector({name!r}): unknown options {sorted(kw)}")
        if name == "ucb":
            return UUCB(cfg, name="ucb", use_entropy=False)
        return UUCB(cfg)
    table = {"random": RandomSelector, "independent": IndependentSelector, "entropy": EntropySelector,
             "greedy": GreedyOracle}
    if name not in table:
        raise ValueError(f"unknown selector {name!r}; choose one of {', '.join(SELECTORS)}")
    return table[name](**kw)
