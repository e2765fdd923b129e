"""Pair builders: policies trained from a reference under the KL-regularised objective (spec §2.7, §6.5).

Implemented: :func:`kl_pg_exact`, tabular policy gradient with the *exact* gradient of
J(π) = E[Σ_t γ^t (r_t − β·KL(π(·|s_t) ‖ π_ref(·|s_t)))] (claim P-1c: the log-ratio approaches A* as training
approaches the optimum). Not yet here: the sampled KL-in-reward PG (``pg_step`` semantics, in ``envs.policies``)
and the LoRA builders ``kl_pg_train``/``distill_to_optimum`` for P-6.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from agentmill.core.tabular_mdp import TabularMDP, soft_policy_evaluation


class KLPGTrace(NamedTuple):
    """Policies along exact-gradient KL-PG: ``policies[k]`` is π after ``steps[k]`` updates; ``objective[k]`` the
    soft value J(π) = start · V^π."""

    steps: tuple[int, ...]
    policies: tuple[np.ndarray, ...]
    objective: tuple[float, ...]


def _softmax_masked(logits: np.ndarray, valid: np.ndarray) -> np.ndarray:
    z = np.where(valid, logits, -np.inf)
    m = z.max(1, keepdims=True)
    m[~np.isfinite(m)] = 0.0
    w = np.where(valid, np.exp(z - m), 0.0)
    tot = w.sum(1, keepdims=True)
    return np.divide(w, tot, out=np.zeros_like(w), where=tot > 0)


def kl_pg_exact(mdp: TabularMDP, pi_ref: np.ndarray, beta: float, *, steps: int = 400, lr: float = 1.0,
                record: tuple[int, ...] = (0, 50, 100, 200, 400)) -> KLPGTrace:
    """Gradient ascent on J with softmax logits θ initialised at log π_ref (so π_0 = π_ref).

    Exact gradient (softmax policy-gradient theorem with the KL in the reward, spec §6.5 "train.py"):
    ∂J/∂θ_{s,a} = d^π(s)·π(a|s)·(Q^π(s,a) − β·log(π/π_ref)(s,a) − V^π(s)), where Q^π, V^π come from
    :func:`soft_policy_evaluation` and d^π = start^T (I − γP_π)^{-1} is the discounted visitation. States the start
    distribution never reaches get no gradient, so use a start with full support when every state should train.
    """
    live_valid = mdp.live_valid
    theta = np.where(live_valid, np.log(np.where(live_valid, pi_ref, 1.0)), 0.0)
    wanted = sorted(set(int(k) for k in record if 0 <= k <= steps))
    out_steps, out_pi, out_j = [], [], []
    live = np.flatnonzero(~mdp.absorbing)
    for k in range(steps + 1):
        pi = _softmax_masked(theta, mdp.valid)
        pi[mdp.absorbing] = np.where(mdp.valid[mdp.absorbing], pi_ref[mdp.absorbing], 0.0)
        Q, V = soft_policy_evaluation(mdp, pi, pi_ref, beta)
        if k in wanted:
            out_steps.append(k)
            out_pi.append(pi.copy())
            out_j.append(float(mdp.start @ V))
        if k == steps:
            break
        P_pi = np.einsum("sa,sat->st", pi, mdp.P)[np.ix_(live, live)]
        d = np.zeros(mdp.n_states)
        d[live] = np.linalg.solve((np.eye(live.size) - mdp.gamma * P_pi).T, mdp.start[live])
        with np.errstate(divide="ignore", invalid="ignore"):
            soft_adv = np.where(live_valid, np.nan_to_num(Q) - beta * (np.log(np.where(live_valid, pi, 1.0))
                                                                      - np.log(np.where(live_valid, pi_ref, 1.0)))
                                - V[:, None], 0.0)
        theta = theta + lr * d[:, None] * pi * soft_adv
    return KLPGTrace(tuple(out_steps), tuple(out_pi), tuple(out_j))
