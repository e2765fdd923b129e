"""Per-participant strategy classification ([R]: population scalars cannot tell a mixture of
strategies from one dial).

After Bröder & Schiffer (2003, J. Behav. Decis. Making 16:193) and Hilbig & Moshagen (2014, Psychon. Bull. Rev.
21:1431): every strategy k makes a deterministic prediction on each item (A, B, or a tie); a participant applying k
follows it except for a constant error rate e_k < ½, and guesses on ties. The log-likelihood of a participant's
n_k informative choices with m_k deviations is m_k·ln e + (n_k − m_k)·ln(1 − e) + t_k·ln ½ (t_k tie trials); the ML
error is ê = m_k / n_k, capped at ½ (at ½ a strategy is no better than guessing). Each participant is assigned the
strategy of highest likelihood; the strategies have one free parameter each, so likelihoods compare directly (ML with a
constant error, as planned [R]; a guessing baseline with no parameter is reported as "guess" when no
strategy beats it).

Why: AutoCog scores population scalars only, and a 50/50 mixture of TTB and WADD users can match one γ ≈ 3 dial on
every scalar metric [I]; classifying each person shows the mixture.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from agentmill.methods.autocog.simulate import Data

E_MAX = 0.5  # error rates at or above ½ are no better than guessing (Bröder & Schiffer 2003)


@dataclass(frozen=True)
class Classification:
    """One participant: the ML strategy, its error rate, and every strategy's log-likelihood and error rate."""

    subject: int
    strategy: str
    error: float
    loglik: dict[str, float]
    errors: dict[str, float]


def strategy_loglik(follows: np.ndarray, informative: np.ndarray) -> tuple[float, float]:
    """(log-likelihood, ML error) of one participant under one strategy.

    ``follows``: bool per trial, the choice equals the strategy's prediction; ``informative``: bool per trial, the
    strategy predicts A or B (not a tie). Tie trials count ln ½ each."""
    follows, informative = np.asarray(follows, bool), np.asarray(informative, bool)
    if follows.shape != informative.shape:
        raise ValueError(f"strategy_loglik: shapes differ {follows.shape} vs {informative.shape}")
    n = int(informative.sum())
    m = int((informative & ~follows).sum())
    ties = follows.size - n
    e = min(m / n, E_MAX) if n else E_MAX
    ll = ties * math.log(0.5)
    if n:
        ll += (m * math.log(e) if m else 0.0) + ((n - m) * math.log(1 - e) if n - m else 0.0)
    return ll, e


def classify(data: Data, strategies: Mapping[str, object]) -> list[Classification]:
    """Classify every subject of ``data`` among ``strategies`` (name → theory with ``core_sign``; the deterministic
    core, β → ∞, ε = 0, is the strategy's prediction). Ties between strategies go to the earlier name; a subject no
    strategy explains better than guessing (ln ½ per trial) is labelled "guess"."""
    if not strategies:
        raise ValueError("classify: need at least one strategy")
    a, b = data.design.arrays()
    signs = {k: t.core_sign(a[None], b[None], data.design.context())[0][data.pair_idx]
             for k, t in strategies.items()}
    out = []
    guess = data.resp.shape[1] * math.log(0.5)
    for s in range(data.n_subjects):
        resp = data.resp[s]
        ll, err = {}, {}
        for k, sign in signs.items():
            sg = sign[s]
            follows = ((sg > 0) & (resp == 0)) | ((sg < 0) & (resp == 1))
            ll[k], err[k] = strategy_loglik(follows, sg != 0)
        best = max(ll, key=lambda k: ll[k])  # max keeps the first of equal values: the earlier name
        label = best if ll[best] > guess + 1e-12 else "guess"
        out.append(Classification(s, label, err[best], ll, err))
    return out


def strategy_shares(classes: list[Classification]) -> dict[str, float]:
    """Share of participants per assigned strategy (including "guess")."""
    if not classes:
        return {}
    names = [c.strategy for c in classes]
    return {k: names.count(k) / len(names) for k in dict.fromkeys(names)}
