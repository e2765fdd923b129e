"""Exact expected steps to the target, its policy gradient, and the closed forms ([R] model; values checked by exact
solves).

Arms share the policy's parameters and the hub choice is memoryless, so for a fixed goal arm g every wrong arm
behaves alike. The exact chain therefore has the states

    hub; goal arm (j, f) and wrong arm (j, f) for j = 1..K-1, f in {fwd, bwd}; the wrong arm's dead end (K)

(4K-2 transient states) plus the absorbing target (g, K). The hub enters the goal arm with probability
π_hub(g). We solve (I - Q) T = 1 for each g and average over g ~ Uniform(W).

Before solving we check on the support graph that every state reachable from the hub can reach the target; if
one cannot, the answer is ``math.inf`` with a reason, never a number from a near-singular solve [R].

Gradient [R, standard policy-gradient identity for absorbing chains with unit step cost]:

    ∂E[T]/∂θ_{s,a} = Σ_{σ sharing s's parameters} ν(σ) · π(a|σ) · (Q(σ,a) - V(σ)),

ν = expected visits from the hub, V = expected steps to absorption, Q(σ,a) = 1 + V(next(σ,a)), V(target) = 0.
The "outcome" objective (NC7) uses the absorption probability h instead: Q(σ,a) = h(next), h(target) = 1, no
step cost. When absorption is almost sure (checked on the support graph) h = 1 exactly, so that gradient is 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
from scipy.linalg import lu_factor, lu_solve

from agentmill.envs.pathstar import PathStarMultigraph
from agentmill.methods.backtrack_maze.policy import TabularPolicy

RESIDUAL_TOL = 1e-8
"""Largest accepted relative residual of the linear solve; above it the answer is inf with a reason."""


@dataclass(frozen=True)
class HittingTime:
    """Expected steps from the hub to the target, averaged over the goal arm. ``reason`` is set when ``value`` is
    ``math.inf`` (target not reached almost surely, or a numerically singular chain)."""

    value: float
    reason: str | None = None
    per_goal: tuple[float, ...] = field(default=())


@dataclass(frozen=True)
class _Structure:
    """Index arrays of the lumped chain for depth K (see the module docstring)."""

    n: int            # transient states; index n is the target
    hub: int
    dead: int
    goal_entry: int
    wrong_entry: int
    dead_back: int    # wrong arm (K-1, bwd), where the dead end's forced back move leads
    sig: np.ndarray   # [2·2(K-1)] transient index of each arm state (goal arm first, then wrong arm)
    jj: np.ndarray    # depth - 1 (parameter row)
    ff: np.ndarray    # facing
    nf: np.ndarray    # next state after a forward move (n = target)
    nb: np.ndarray    # next state after the back move


@lru_cache(maxsize=64)
def _structure(K: int) -> _Structure:
    def idx(goal: bool, j: int, f: int) -> int:
        return 1 + (0 if goal else 2 * (K - 1)) + 2 * (j - 1) + f

    n = 4 * K - 2
    dead, target = n - 1, n
    sig, jj, ff, nf, nb = [], [], [], [], []
    for goal in (True, False):
        for j in range(1, K):
            for f in (0, 1):
                sig.append(idx(goal, j, f))
                jj.append(j - 1)
                ff.append(f)
                nf.append(idx(goal, j + 1, 0) if j + 1 < K else (target if goal else dead))
                nb.append(idx(goal, j - 1, 1) if j > 1 else 0)
    a = lambda x: np.asarray(x, dtype=np.int64)
    return _Structure(n, 0, dead, idx(True, 1, 0), idx(False, 1, 0), idx(False, K - 1, 1), a(sig), a(jj), a(ff),
                      a(nf), a(nb))


def _check(policy: TabularPolicy, env: PathStarMultigraph | None) -> None:
    if env is not None and (policy.W, policy.K, policy.L) != (env.W, env.K, env.L):
        raise ValueError(f"policy is for W={policy.W}, K={policy.K}, L={policy.L} but env is {env!r}")


def _transition(st: _Structure, p_goal: float, fw: np.ndarray, bk: np.ndarray) -> np.ndarray:
    """Transition matrix [n, n+1] (last column: the target). ``fw``/``bk`` are per arm state (aligned with sig)."""
    M = np.zeros((st.n, st.n + 1))
    M[st.hub, st.goal_entry] = p_goal
    M[st.hub, st.wrong_entry] = 1.0 - p_goal
    np.add.at(M, (st.sig, st.nf), fw)
    np.add.at(M, (st.sig, st.nb), bk)
    M[st.dead, st.dead_back] = 1.0             # forced back move out of the dead end
    return M


def _unreachable_reason(M: np.ndarray, st: _Structure) -> str | None:
    """None if every state reachable from the hub reaches the target with positive probability.

    The answer depends on the support of M only, which all but never changes during training (every finite logit
    gives every move a positive probability), so it is cached per support pattern: the closures cost more than
    the linear solve they guard."""
    adj = M > 0                                   # [n, n+1] support of one move
    return _support_reason(st.n, adj.tobytes())


@lru_cache(maxsize=256)
def _support_reason(n: int, support: bytes) -> str | None:
    st = _structure((n + 2) // 4)
    adj = np.frombuffer(support, dtype=bool).reshape(n, n + 1)
    seen = np.zeros(st.n + 1, dtype=bool)         # forward closure from the hub
    seen[st.hub] = True
    while True:
        new = seen | adj[seen[: st.n]].any(axis=0)
        if (new == seen).all():
            break
        seen = new
    if not seen[st.n]:
        return "the target is unreachable from the hub under this policy"
    good = np.zeros(st.n + 1, dtype=bool)         # backward closure from the target
    good[st.n] = True
    while True:
        new = good.copy()
        new[: st.n] |= adj[:, good].any(axis=1)
        if (new == good).all():
            break
        good = new
    bad = seen[: st.n] & ~good[: st.n]
    if bad.any():
        return f"{int(bad.sum())} reachable state(s) cannot reach the target (absorption is not almost sure)"
    return None


def _solve(M: np.ndarray, st: _Structure, rhs: np.ndarray) -> tuple[np.ndarray, np.ndarray, str | None]:
    """Solve (I-Q) x = rhs and (I-Q)^T ν = e_hub. Returns x, ν, reason (None if fine)."""
    A = np.eye(st.n) - M[:, : st.n]
    lu = lu_factor(A, check_finite=True)
    x = lu_solve(lu, rhs)
    e = np.zeros(st.n)
    e[st.hub] = 1.0
    nu = lu_solve(lu, e, trans=1)
    res = np.abs(A @ x - rhs).max() / max(1.0, np.abs(A).max() * np.abs(x).max())
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(nu))) or res > RESIDUAL_TOL:
        return x, nu, f"numerically singular chain (relative residual {res:.1e})"
    return x, nu, None


def _per_goal(policy: TabularPolicy, objective: str, with_grad: bool):
    """Yield (goal-entry prob, value, reason, grad_hub_terms, grad_arm) per distinct π_hub(g)."""
    st = _structure(policy.K)
    hub = policy.hub_probs()
    P = policy.arm_probs()
    L = policy.L
    Ps = P[st.jj, st.ff]                       # [m, L+1] per arm state
    fw, bk = Ps[:, :L].sum(1), Ps[:, L]
    cache: dict[float, tuple] = {}
    for g in range(policy.W):
        p = float(hub[g])
        if p in cache:
            yield (g,) + cache[p]
            continue
        M = _transition(st, p, fw, bk)
        reason = _unreachable_reason(M, st)
        if reason is not None:
            out = (math.inf, reason, None, None)
        else:
            if objective == "steps":
                x, nu, reason = _solve(M, st, np.ones(st.n))
                x_ext, cost = np.append(x, 0.0), 1.0
            else:
                # Absorption probability h. The support check above proved absorption almost sure, so h = 1 on
                # every state the walk can visit, exactly; a float solve of (I-Q) h = r would only add ~1e-15
                # roundoff, which Adam's scale invariance turns into steps of ~lr·1e-7 (NC7 would then drift).
                _, nu, reason = _solve(M, st, np.ones(st.n))
                x = np.ones(st.n)
                x_ext, cost = np.append(x, 1.0), 0.0
            val = float(x[st.hub]) if reason is None else math.inf
            if reason is not None or not with_grad:
                out = (val, reason, None, None)
            else:
                # Arm parameters: ν(σ) π(a|σ) (Q(σ,a) - V(σ)); forward edges share one next state.
                q = np.empty_like(Ps)
                q[:, :L] = (cost + x_ext[st.nf])[:, None]
                q[:, L] = cost + x_ext[st.nb]
                contrib = nu[st.sig][:, None] * Ps * (q - x[st.sig][:, None])
                g_arm = np.zeros_like(P)
                np.add.at(g_arm, (st.jj, st.ff), contrib)
                # Hub: Q(hub, goal arm) and Q(hub, any wrong arm).
                q_goal = cost + x_ext[st.goal_entry]
                q_wrong = cost + x_ext[st.wrong_entry]
                out = (val, None, (nu[st.hub], q_goal, q_wrong, x[st.hub]), g_arm)
        cache[p] = out
        yield (g,) + out


def hitting_time(policy: TabularPolicy, env: PathStarMultigraph | None = None) -> HittingTime:
    """Exact E[T] from the hub, averaged over the uniform goal arm (``math.inf`` with a reason if not a.s.)."""
    _check(policy, env)
    vals, reason = [], None
    for _g, val, why, _h, _a in _per_goal(policy, "steps", with_grad=False):
        vals.append(val)
        reason = reason or why
    if reason is not None:
        return HittingTime(math.inf, reason, tuple(vals))
    return HittingTime(float(np.mean(vals)), None, tuple(vals))


def expected_hitting_time(policy: TabularPolicy, env: PathStarMultigraph | None = None) -> float:
    """Exact E[T]; ``math.inf`` when the target is not reached almost surely."""
    return hitting_time(policy, env).value


def objective_and_grad(policy: TabularPolicy, objective: str = "steps") -> tuple[float, np.ndarray, str | None]:
    """Objective and its gradient with respect to ``policy.get_flat()``.

    ``objective="steps"``: E[T] (averaged over g). ``"outcome"``: P(success) with 0/1 reward and no horizon.
    Returns ``(value, grad [n_params], reason)``; on an infinite E[T] the gradient is NaN and ``reason`` is set.
    """
    if objective not in ("steps", "outcome"):
        raise ValueError(f"objective must be 'steps' or 'outcome', got {objective!r}")
    W = policy.W
    hub = policy.hub_probs()
    g_hub = np.zeros(W)
    g_arm = np.zeros_like(policy.theta)
    vals = []
    for g, val, why, hub_terms, arm in _per_goal(policy, objective, with_grad=True):
        if why is not None:
            return math.inf, np.full(policy.n_params, np.nan), why
        vals.append(val)
        nu_hub, q_goal, q_wrong, v_hub = hub_terms
        q = np.full(W, q_wrong)
        q[g] = q_goal
        g_hub += nu_hub * hub * (q - v_hub) / W
        g_arm += arm / W
    return float(np.mean(vals)), np.concatenate([g_hub, g_arm.ravel()]), None


# ---- closed forms [R] -------------------------------------------------------------------------------------------
def optimal_time(W: int, K: int) -> int:
    """T* = K(2W-1), the RLVR limit."""
    return K * (2 * W - 1)


def sft_converged_time(W: int, K: int, L: int) -> float:
    """Closed form for P(back|fwd) = 0, P(back|bwd) = b = 1/(L+1), uniform hub [R]:

    T = K + (W-1)(K + 1 + E_{K-1}),  E_0 = 0,  E_j = b(1 + E_{j-1}) + (1-b)(K - j + 1 + E_{K-1}).

    E_j (expected steps from (j, bwd) back to the hub) is affine in the unknown E_{K-1}; we carry E_j = α_j +
    β_j·E_{K-1} and solve the fixed point at j = K-1.
    """
    PathStarMultigraph(W, K, L)  # validates
    b = 1.0 / (L + 1)
    alpha, beta = 0.0, 0.0       # E_0 = 0
    for j in range(1, K):
        alpha, beta = b * (1 + alpha) + (1 - b) * (K - j + 1), b * beta + (1 - b)
    e_last = alpha / (1 - beta)  # E_{K-1} = α + β E_{K-1}
    return K + (W - 1) * (K + 1 + e_last)


def restart_time(W: int, K: int, restart_cost: float) -> float:
    """E[T] of the SFT-converged policy under RestartAfter(τ=K, r): K·W + r(W-1) [D]."""
    return K * W + restart_cost * (W - 1)
