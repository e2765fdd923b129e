"""The E173 identity checked on code: β·log(π*/π_ref) = A* on random KL-regularised MDPs solved exactly
(claims P-1, P-2, P-3; arXiv:2606.26080 [A]). Functions return plain records an experiment can judge.

These are algebraic claims: a "supported" verdict says the code is right, nothing about agents (README, Caveats).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from agentmill.core.tabular_mdp import (TabularMDP, random_mdp, random_token_mdp, soft_advantage,
                                        soft_policy_iteration, soft_value_iteration)
from agentmill.methods.progress_advantage.core import aggregate_tokens, tabular_progress_advantage
from agentmill.methods.progress_advantage.train import kl_pg_exact

MDP_KINDS = {"det": (True, 1.0), "dir0.1": (False, 0.1), "dir1": (False, 1.0)}
"""Transition families of claim P-1: deterministic, Dirichlet(α = 0.1) (nearly deterministic, heavy-tailed) and
Dirichlet(α = 1) (diffuse)."""


def _max_err(x: np.ndarray, y: np.ndarray, mask: np.ndarray) -> float:
    return float(np.max(np.abs(x[mask] - y[mask]))) if mask.any() else 0.0


def identity_errors(mdp: TabularMDP, pi_ref: np.ndarray, beta: float) -> dict[str, float]:
    """Max |β·log(π/π_ref) − A*| over live valid (s, a) for (a) π* from soft value iteration and (b) π from soft
    policy iteration (never runs the soft max, so (b) is not circular); A* from soft value iteration."""
    Q, V, pi_vi = soft_value_iteration(mdp, pi_ref, beta)
    A = soft_advantage(Q, V)
    _, V_pi, pi_pi = soft_policy_iteration(mdp, pi_ref, beta)
    m = mdp.live_valid
    return {
        "err_vi": _max_err(tabular_progress_advantage(pi_vi, pi_ref, beta, mdp.valid), A, m),
        "err_spi": _max_err(tabular_progress_advantage(pi_pi, pi_ref, beta, mdp.valid), A, m),
        "err_value": float(np.max(np.abs(V_pi - V))),
    }


def exactness_check(n_mdps: int = 50, *, n_states: int = 20, n_actions: int = 4, gamma: float = 0.9,
                    betas: Sequence[float] = (0.1, 1.0), kinds: Sequence[str] = ("det", "dir0.1", "dir1"),
                    seed: int = 0) -> list[dict[str, Any]]:
    """Claim P-1 (a, b): one record per (MDP, β) with the identity errors. MDP i has kind ``kinds[i % len]`` and
    seed ``seed + i``. Pre-registered threshold [R]: max error < 1e-8 (this code reaches ~1e-13)."""
    rows = []
    for i in range(n_mdps):
        kind = kinds[i % len(kinds)]
        det, alpha = MDP_KINDS[kind]
        mdp, ref = random_mdp(n_states, n_actions, gamma=gamma, alpha=alpha, deterministic=det, seed=seed + i)
        for beta in betas:
            rows.append({"mdp": i, "kind": kind, "beta": float(beta), **identity_errors(mdp, ref, beta)})
    return rows


def kl_pg_identity_curve(mdp: TabularMDP, pi_ref: np.ndarray, beta: float, *, steps: int = 400, lr: float = 1.0,
                         record: Sequence[int] = (0, 50, 100, 200, 400)) -> list[dict[str, float]]:
    """Claim P-1 (c): max |β·log(π_K/π_ref) − A*| after K exact-gradient KL-PG steps (it should fall with K)."""
    Q, V, _ = soft_value_iteration(mdp, pi_ref, beta)
    A = soft_advantage(Q, V)
    trace = kl_pg_exact(mdp, pi_ref, beta, steps=steps, lr=lr, record=tuple(record))
    m = mdp.live_valid
    return [{"K": k, "err": _max_err(tabular_progress_advantage(pi, pi_ref, beta, mdp.valid), A, m), "J": j}
            for k, pi, j in zip(trace.steps, trace.policies, trace.objective)]


def reward_recovery_rms(mdp: TabularMDP, pi_ref: np.ndarray, beta: float, *, n_samples: int = 4000,
                        seed: int = 0) -> float:
    """Claim P-2: RMS of r̂ − r on sampled transitions, r̂(s,a,s') = β·log(π*/π_ref)(s,a) + V*(s) − γ·V*(s').

    r̂ − r = γ·(E_{s''}V*(s'') − V*(s')): zero exactly for deterministic P, positive otherwise — which is why the
    paper reads the log-ratio as an advantage, not a reward [D]. (s, a) are drawn
    uniformly over live valid pairs, s' from P.
    """
    Q, V, pi = soft_value_iteration(mdp, pi_ref, beta)
    adv = tabular_progress_advantage(pi, pi_ref, beta, mdp.valid)
    pairs = np.argwhere(mdp.live_valid)
    rng = np.random.default_rng(seed)
    pick = pairs[rng.integers(0, len(pairs), size=n_samples)]
    s, a = pick[:, 0], pick[:, 1]
    cum = np.cumsum(mdp.P[s, a], axis=1)
    s2 = np.minimum((rng.random(n_samples)[:, None] > cum).sum(1), mdp.n_states - 1)
    r_hat = adv[s, a] + V[s] - mdp.gamma * V[s2]
    return float(np.sqrt(np.mean((r_hat - mdp.R[s, a]) ** 2)))


def token_telescoping_errors(*, n_states: int = 10, vocab: int = 3, action_len: int = 3, gamma: float = 0.9,
                             beta: float = 1.0, alpha: float = 0.5, deterministic: bool = False,
                             seed: int = 0) -> dict[str, Any]:
    """Claim P-3: token log-ratios of the *token-level* optimum (solved directly on the token MDP) aggregated per
    action, against A*(s, a) of the action-level MDP. Returns the max error of `sum` (exact, [D]) and, for every
    token aggregation, the arrays needed for Spearman correlations."""
    tm = random_token_mdp(n_states, vocab, action_len, gamma=gamma, alpha=alpha, deterministic=deterministic,
                          seed=seed)
    Q, V, _ = soft_value_iteration(tm.env, tm.action_pi_ref(), beta)
    A = soft_advantage(Q, V)
    mt, ref_t, index = tm.token_level()
    _, _, pt = soft_value_iteration(mt, ref_t, beta)
    ratios = tm.token_log_ratios(pt[index], beta)  # (S, A, L)
    live = ~tm.env.absorbing
    per_agg = {how: np.array([[aggregate_tokens(ratios[s, a], how) for a in range(ratios.shape[1])]
                              for s in range(ratios.shape[0])]) for how in ("sum", "mean", "min", "max", "last")}
    return {"max_err_sum": float(np.max(np.abs(per_agg["sum"][live] - A[live]))),
            "advantage": A[live].ravel(), "aggregates": {k: v[live].ravel() for k, v in per_agg.items()}}


def tabular_pair_lms(pi: np.ndarray, pi_ref: np.ndarray) -> tuple[Any, Any]:
    """Two canned token scorers that *are* the tabular policies: the vocabulary is one word per state (``s0``..)
    and one per action (``a0``..); after a state word, the next-token log-probs are log π(·|s) on the action words.
    An episode (s_0, a_0, s_1, a_1, ...) written as those words is then scored by
    :class:`~agentmill.methods.progress_advantage.scorer.ProgressAdvantageScorer` exactly as a real LM pair would
    be, so the whole scoring path can be checked against A*."""
    from agentmill.lm.scripted import ScriptedScoringLM

    S, A = pi.shape
    vocab = [f"s{i}" for i in range(S)] + [f"a{j}" for j in range(A)]
    state_id = {i + 1: i for i in range(S)}  # ScriptedScoringLM puts <bos> at id 0

    def make(p: np.ndarray) -> Any:
        with np.errstate(divide="ignore"):
            logp = np.log(p)

        def nxt(ctx: tuple[int, ...]) -> np.ndarray:
            v = np.zeros(len(vocab) + 1)
            s = state_id.get(ctx[-1])
            if s is not None:
                v[:] = -np.inf
                v[1 + S:] = logp[s]
            return v

        return ScriptedScoringLM(vocab, nxt, spec="scripted:tabular")

    return make(np.asarray(pi, dtype=np.float64)), make(np.asarray(pi_ref, dtype=np.float64))


def scorer_exactness(mdp: TabularMDP, pi_ref: np.ndarray, beta: float, *, n_episodes: int = 8, horizon: int = 12,
                     action_space: str = "free_text", seed: int = 0) -> dict[str, float]:
    """Item 5 of issue 4 / claim P-1 through the scorer: sample episodes from π* in ``mdp``, score them with
    :class:`ProgressAdvantageScorer` over :func:`tabular_pair_lms` (π*, π_ref), and return the max |A_t − A*(s_t,
    a_t)| over all steps, with the number of steps. Threshold: < 1e-10."""
    from agentmill.methods.progress_advantage.config import PAConfig
    from agentmill.methods.progress_advantage.scorer import Episode, ProgressAdvantageScorer

    Q, V, pi = soft_value_iteration(mdp, pi_ref, beta)
    A = soft_advantage(Q, V)
    pol, ref = tabular_pair_lms(pi, pi_ref)
    scorer = ProgressAdvantageScorer(pol, ref, PAConfig(beta=beta, action_space=action_space))
    rng = np.random.default_rng(seed)
    S = mdp.n_states
    episodes, truth = [], []
    for _ in range(n_episodes):
        s = int(rng.choice(S, p=mdp.start))
        segs, flags, cands, adv = [], [], [], []
        for _t in range(horizon):
            if mdp.absorbing[s]:
                break
            a = int(rng.choice(mdp.n_actions, p=pi[s]))
            segs += [(1 + s,), (1 + S + a,)]
            flags += [False, True]
            cands.append(tuple((1 + S + b,) for b in np.flatnonzero(mdp.valid[s])))
            adv.append(A[s, a])
            s = int(rng.choice(S, p=mdp.P[s, a]))
        if adv:
            episodes.append(Episode(tuple(segs), tuple(flags), tuple(cands), ()))
            truth.append(np.asarray(adv))
    scores = scorer.score_many(episodes, batch_size=4)
    err = max(float(np.max(np.abs(sc.A - t))) for sc, t in zip(scores, truth))
    return {"max_err": err, "n_steps": float(sum(t.size for t in truth))}
