"""Exact solvers for small tabular MDPs, plain and KL-regularised (arXiv:2606.26080 for the identity; [D]).

These are the ground truth that E165/E173 estimators are judged against: exact V^π for G2PO's node values, and
the soft-optimal Q*, V*, π* for the progress-advantage identity β·log(π*/π_ref) = A* **[P]** (E173, arXiv
2606.26080). numpy only, float64 throughout.

Conventions (shared by every function here):

- ``P[s, a, s']`` transition probabilities, ``R[s, a]`` the expected reward received after ``a`` in ``s``.
- ``valid[s, a]`` marks the actions available at ``s`` (the "admissible set" A(s)). A policy is an (S, A) array
  that is 0 on invalid actions and sums to 1 over A(s) at every non-absorbing state.
- An ``absorbing`` state ends the episode: V(s) = 0 there, whatever P and R say, and no action is taken.
  Its Q and advantage are 0 on valid actions, and soft solvers return π = π_ref there (A* = 0).
- Q and advantages are ``NaN`` on invalid actions, so an accidental use of them poisons the result instead of
  silently contributing a number.
- KL-regularised objective (arXiv:2606.26080): J(π) = E[Σ_t γ^t (r_t − β·KL(π(·|s_t) ‖ π_ref(·|s_t)))], the KL taken
  over A(s). π_ref must be > 0 on every valid action of a non-absorbing state (otherwise log π_ref is undefined there).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

UNREACHABLE = 1_000_000
"""Distance returned by :func:`bfs_distance` for a state from which no goal can be reached (a dead end)."""

_PROB_TOL = 1e-9


@dataclass(frozen=True, eq=False)
class TabularMDP:
    """A finite MDP with per-state action sets and absorbing states.

    Shapes: S states, A action slots (invalid slots are masked by ``valid``).
    """

    P: np.ndarray
    """(S, A, S) float64: P[s, a, s'] = Pr(s' | s, a). Rows of valid actions at non-absorbing states sum to 1;
    other rows are ignored."""
    R: np.ndarray
    """(S, A) float64: expected reward received after taking a in s (ignored at absorbing states and invalid
    actions)."""
    gamma: float
    """Discount in (0, 1]. With γ = 1 value functions exist only for proper policies (absorption reachable from
    every state)."""
    valid: np.ndarray = field(default=None)  # type: ignore[assignment]
    """(S, A) bool: the action set A(s). Default: every action valid everywhere."""
    absorbing: np.ndarray = field(default=None)  # type: ignore[assignment]
    """(S,) bool: terminal states, V = 0. Default: none."""
    start: np.ndarray = field(default=None)  # type: ignore[assignment]
    """(S,) float64: initial-state distribution. Default: all mass on state 0."""

    def __post_init__(self) -> None:
        P = np.asarray(self.P, dtype=np.float64)
        R = np.asarray(self.R, dtype=np.float64)
        if P.ndim != 3 or P.shape[0] != P.shape[2]:
            raise ValueError(f"P must have shape (S, A, S), got {P.shape}")
        S, A = P.shape[:2]
        if R.shape != (S, A):
            raise ValueError(f"R must have shape (S, A) = {(S, A)}, got {R.shape}")
        valid = np.ones((S, A), bool) if self.valid is None else np.asarray(self.valid, dtype=bool)
        absorbing = np.zeros(S, bool) if self.absorbing is None else np.asarray(self.absorbing, dtype=bool)
        if self.start is None:
            start = np.zeros(S)
            start[0] = 1.0
        else:
            start = np.asarray(self.start, dtype=np.float64)
        if valid.shape != (S, A):
            raise ValueError(f"valid must have shape {(S, A)}, got {valid.shape}")
        if absorbing.shape != (S,) or start.shape != (S,):
            raise ValueError(f"absorbing and start must have shape ({S},), got {absorbing.shape}, {start.shape}")
        if not 0 < self.gamma <= 1:
            raise ValueError(f"gamma must be in (0, 1], got {self.gamma}")
        live = ~absorbing
        if np.any(live & ~valid.any(1)):
            bad = np.flatnonzero(live & ~valid.any(1))
            raise ValueError(f"non-absorbing states without a valid action: {bad[:10].tolist()}")
        mask = valid & live[:, None]
        if not np.all(np.isfinite(P)) or np.any(P < 0):
            raise ValueError("P must be finite and non-negative")
        if not np.all(np.isfinite(R[mask])):
            raise ValueError("R must be finite on valid actions")
        sums = P.sum(2)
        if np.any(np.abs(sums[mask] - 1) > _PROB_TOL):
            s, a = np.argwhere(mask & (np.abs(sums - 1) > _PROB_TOL))[0]
            raise ValueError(f"P[{s}, {a}] sums to {sums[s, a]!r}, not 1")
        if np.any(start < 0) or abs(start.sum() - 1) > _PROB_TOL:
            raise ValueError("start must be a probability vector")
        for name, value in (("P", P), ("R", R), ("valid", valid), ("absorbing", absorbing), ("start", start)):
            value.setflags(write=False)
            object.__setattr__(self, name, value)
        object.__setattr__(self, "gamma", float(self.gamma))

    @property
    def n_states(self) -> int:
        return self.P.shape[0]

    @property
    def n_actions(self) -> int:
        return self.P.shape[1]

    @property
    def live_valid(self) -> np.ndarray:
        """(S, A) bool: valid actions at non-absorbing states, the only entries any solver reads."""
        return self.valid & ~self.absorbing[:, None]


# --------------------------------------------------------------------------------------------------------------
# checks shared by the solvers


def _check_policy(mdp: TabularMDP, pi: np.ndarray, name: str) -> np.ndarray:
    p = np.asarray(pi, dtype=np.float64)
    if p.shape != (mdp.n_states, mdp.n_actions):
        raise ValueError(f"{name} must have shape {(mdp.n_states, mdp.n_actions)}, got {p.shape}")
    if not np.all(np.isfinite(p)) or np.any(p < 0):
        raise ValueError(f"{name} must be finite and non-negative")
    live = ~mdp.absorbing
    if np.any(p[live][~mdp.valid[live]] > 0):
        raise ValueError(f"{name} puts mass on invalid actions")
    sums = p.sum(1)
    if np.any(np.abs(sums[live] - 1) > _PROB_TOL):
        s = np.flatnonzero(live & (np.abs(sums - 1) > _PROB_TOL))[0]
        raise ValueError(f"{name}[{s}] sums to {sums[s]!r}, not 1")
    return p


def _check_ref(mdp: TabularMDP, pi_ref: np.ndarray) -> np.ndarray:
    p = _check_policy(mdp, pi_ref, "pi_ref")
    if np.any(p[mdp.live_valid] <= 0):
        s, a = np.argwhere(mdp.live_valid & (p <= 0))[0]
        raise ValueError(f"pi_ref must be > 0 on every valid action (log pi_ref undefined at s={s}, a={a})")
    return p


def _check_beta(beta: float) -> float:
    if not (np.isfinite(beta) and beta > 0):
        raise ValueError(f"beta must be > 0, got {beta}")
    return float(beta)


def _backup(mdp: TabularMDP, V: np.ndarray) -> np.ndarray:
    """Q(s,a) = R(s,a) + γ Σ_s' P(s'|s,a) V(s') on live valid entries; 0 on absorbing valid; NaN on invalid."""
    Q = mdp.R + mdp.gamma * (mdp.P @ V)
    Q[mdp.absorbing] = 0.0
    Q[~mdp.valid] = np.nan
    return Q


def _is_proper(mdp: TabularMDP, pi: np.ndarray) -> np.ndarray:
    """(S,) bool: absorption is reached with probability 1 from s under π (finite chain: iff reachable)."""
    P_pi = np.einsum("sa,sat->st", np.where(mdp.valid, pi, 0.0), mdp.P)
    reach = mdp.absorbing.copy()
    edge = P_pi > 0
    while True:
        new = reach | (edge & reach[None, :]).any(1)
        if np.array_equal(new, reach):
            return reach
        reach = new


def _linear_values(mdp: TabularMDP, pi: np.ndarray, r_pi: np.ndarray) -> np.ndarray:
    """Solve (I − γ P_π) V = r_π on live states, with V = 0 at absorbing states."""
    live = ~mdp.absorbing
    if mdp.gamma == 1.0:
        proper = _is_proper(mdp, pi)
        if not proper.all():
            bad = np.flatnonzero(~proper)
            raise ValueError(f"gamma = 1 needs a proper policy; absorption is unreachable from states "
                             f"{bad[:10].tolist()}")
    P_pi = np.einsum("sa,sat->st", np.where(mdp.valid, pi, 0.0), mdp.P)
    idx = np.flatnonzero(live)
    M = np.eye(idx.size) - mdp.gamma * P_pi[np.ix_(idx, idx)]
    V = np.zeros(mdp.n_states)
    V[idx] = np.linalg.solve(M, r_pi[idx])
    return V


def _xlogy_ratio(pi: np.ndarray, pi_ref: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """π·log(π/π_ref) with 0·log 0 = 0 (an action π never takes costs no KL)."""
    out = np.zeros_like(pi)
    m = valid & (pi > 0)
    out[m] = pi[m] * (np.log(pi[m]) - np.log(pi_ref[m]))
    return out


# --------------------------------------------------------------------------------------------------------------
# plain and soft policy evaluation


def policy_evaluation(mdp: TabularMDP, pi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Exact (V^π, Q^π) by one linear solve of (I − γ P_π) V = r_π.

    Shapes: V (S,), Q (S, A) (NaN on invalid actions). With γ = 1 a policy from which some state never reaches an
    absorbing state has no finite value: ``ValueError``.
    """
    p = _check_policy(mdp, pi, "pi")
    r_pi = np.where(mdp.live_valid, p * np.where(mdp.valid, mdp.R, 0.0), 0.0).sum(1)
    V = _linear_values(mdp, p, r_pi)
    return V, _backup(mdp, V)


def soft_policy_evaluation(mdp: TabularMDP, pi: np.ndarray, pi_ref: np.ndarray,
                           beta: float) -> tuple[np.ndarray, np.ndarray]:
    """Exact KL-regularised (Q^π, V^π): V(s) = Σ_a π(a|s)[Q(s,a) − β·log(π(a|s)/π_ref(a|s))] [D].

    Q(s,a) = R(s,a) + γ Σ P V is the soft Q: the KL penalty starts at the next state, so that the one-step identity
    V = Σ π (Q − β log π/π_ref) holds. Shapes: Q (S, A) (NaN on invalid), V (S,).
    """
    beta = _check_beta(beta)
    p = _check_policy(mdp, pi, "pi")
    ref = _check_ref(mdp, pi_ref)
    lv = mdp.live_valid
    r_soft = np.where(lv, p * np.where(mdp.valid, mdp.R, 0.0), 0.0).sum(1) \
        - beta * np.where(lv, _xlogy_ratio(p, ref, lv), 0.0).sum(1)
    V = _linear_values(mdp, p, r_soft)
    return _backup(mdp, V), V


# --------------------------------------------------------------------------------------------------------------
# soft optimality


def _soft_max(mdp: TabularMDP, Q: np.ndarray, log_ref: np.ndarray, beta: float) -> np.ndarray:
    """V(s) = β log Σ_{a∈A(s)} π_ref(a|s) exp(Q(s,a)/β), max-shifted so β = 0.01 with |Q| = 100 is fine."""
    z = np.where(mdp.live_valid, log_ref + np.where(mdp.live_valid, Q, 0.0) / beta, -np.inf)
    live = ~mdp.absorbing
    V = np.zeros(mdp.n_states)
    zl = z[live]
    m = zl.max(1)
    V[live] = beta * (m + np.log(np.exp(zl - m[:, None]).sum(1)))
    return V


def _soft_greedy(mdp: TabularMDP, Q: np.ndarray, V: np.ndarray, ref: np.ndarray, beta: float) -> np.ndarray:
    """π(a|s) = π_ref(a|s) exp((Q(s,a) − V(s))/β), renormalised (it sums to 1 up to rounding when V is the
    soft max of Q); π = π_ref at absorbing states."""
    lv = mdp.live_valid
    logits = np.where(lv, np.log(np.where(lv, ref, 1.0)) + (np.where(lv, Q, 0.0) - V[:, None]) / beta, -np.inf)
    m = logits.max(1, keepdims=True)
    m[~np.isfinite(m)] = 0.0
    w = np.exp(logits - m)
    tot = w.sum(1, keepdims=True)
    pi = np.divide(w, tot, out=np.zeros_like(w), where=tot > 0)
    pi[mdp.absorbing] = np.where(mdp.valid[mdp.absorbing], ref[mdp.absorbing], 0.0)
    return pi


def soft_value_iteration(mdp: TabularMDP, pi_ref: np.ndarray, beta: float, *, tol: float = 1e-13,
                         max_iter: int = 100_000) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Soft-optimal (Q*, V*, π*) by iterating the soft Bellman operator [D]:

        Q(s,a) = r(s,a) + γ Σ_s' P(s'|s,a) V(s'),   V(s) = β log Σ_a π_ref(a|s) exp(Q(s,a)/β).

    Stops when the sup-norm change of V drops below ``tol``; at that point ‖V − V*‖∞ ≤ γ·tol/(1 − γ). The operator is
    a γ-contraction, so γ < 1 always converges; with γ = 1 it converges when a finite soft value exists (e.g.
    absorption is certain under every policy; a reward-r self-loop is fine while π_ref(loop)·e^{r/β} < 1), and
    ``RuntimeError`` is raised after ``max_iter`` sweeps otherwise. Finite horizons: :func:`soft_backward_induction`.

    π* = π_ref·exp((Q* − V*)/β), normalised, so β·log(π*/π_ref) = Q* − V* = A* — the E173 identity **[P]**.
    Shapes: Q (S, A) with NaN on invalid actions, V (S,), π (S, A).
    """
    beta = _check_beta(beta)
    ref = _check_ref(mdp, pi_ref)
    log_ref = np.log(np.where(mdp.live_valid, ref, 1.0))
    V = np.zeros(mdp.n_states)
    for _ in range(max_iter):
        Q = _backup(mdp, V)
        V_new = _soft_max(mdp, Q, log_ref, beta)
        delta = np.max(np.abs(V_new - V)) if V.size else 0.0
        V = V_new
        if delta < tol:
            break
    else:
        raise RuntimeError(f"soft value iteration did not reach tol={tol} in {max_iter} sweeps (gamma="
                           f"{mdp.gamma}); with gamma = 1 some policy may never be absorbed")
    Q = _backup(mdp, V)
    return Q, V, _soft_greedy(mdp, Q, V, ref, beta)


def soft_backward_induction(mdp: TabularMDP, pi_ref: np.ndarray, beta: float,
                            horizon: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Finite-horizon soft optimum by backward induction: H decisions left at t = 0, V_H ≡ 0.

    Returns Q (H, S, A), V (H + 1, S) and π (H, S, A), indexed by the time step t = 0..H−1 (V[H] = 0). The identity
    β·log(π_t/π_ref) = Q_t − V_t holds at every t; this is the time-indexed optimum that a truncated episode
    actually has, which the stationary solution only approximates.
    """
    beta = _check_beta(beta)
    if horizon < 1:
        raise ValueError(f"horizon must be >= 1, got {horizon}")
    ref = _check_ref(mdp, pi_ref)
    log_ref = np.log(np.where(mdp.live_valid, ref, 1.0))
    S, A = mdp.n_states, mdp.n_actions
    Q = np.empty((horizon, S, A))
    V = np.zeros((horizon + 1, S))
    pi = np.empty((horizon, S, A))
    for t in range(horizon - 1, -1, -1):
        Q[t] = _backup(mdp, V[t + 1])
        V[t] = _soft_max(mdp, Q[t], log_ref, beta)
        pi[t] = _soft_greedy(mdp, Q[t], V[t], ref, beta)
    return Q, V, pi


def soft_policy_iteration(mdp: TabularMDP, pi_ref: np.ndarray, beta: float, iters: int = 200, *,
                          tol: float = 1e-14, pi0: np.ndarray | None = None,
                          ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Soft policy iteration: π_{k+1} ∝ π_ref·exp(Q^{π_k}/β), with Q^{π_k} from :func:`soft_policy_evaluation`.

    A route to π* that never runs the soft Bellman max, so comparing it with :func:`soft_value_iteration` is not
    circular (claim P-1b). Each step improves the soft objective at every state (soft policy improvement), and it
    converges much faster than value iteration in practice. Stops after ``iters`` improvements or when the
    sup-norm change of π drops below ``tol``. Starts from ``pi0`` (default π_ref). Returns (Q^π, V^π, π) of the
    final π.
    """
    beta = _check_beta(beta)
    ref = _check_ref(mdp, pi_ref)
    pi = ref.copy() if pi0 is None else _check_policy(mdp, pi0, "pi0").copy()
    lv = mdp.live_valid
    for _ in range(iters):
        Q, _V = soft_policy_evaluation(mdp, pi, ref, beta)
        logits = np.where(lv, np.log(np.where(lv, ref, 1.0)) + np.where(lv, Q, 0.0) / beta, -np.inf)
        m = logits.max(1, keepdims=True)
        m[~np.isfinite(m)] = 0.0
        w = np.exp(logits - m)
        tot = w.sum(1, keepdims=True)
        new = np.divide(w, tot, out=np.zeros_like(w), where=tot > 0)
        new[mdp.absorbing] = np.where(mdp.valid[mdp.absorbing], ref[mdp.absorbing], 0.0)
        change = float(np.max(np.abs(new - pi))) if pi.size else 0.0
        pi = new
        if change < tol:
            break
    Q, V = soft_policy_evaluation(mdp, pi, ref, beta)
    return Q, V, pi


def log_ratio_advantage(pi: np.ndarray, pi_ref: np.ndarray, beta: float,
                        valid: np.ndarray | None = None) -> np.ndarray:
    """β·log(π(a|s)/π_ref(a|s)) on (S, A); NaN where the action is invalid or either probability is 0.

    At the KL-regularised optimum this *is* A*(s, a) (arXiv:2606.26080 [A]). Shapes: (S, A) in, (S, A) out.
    """
    beta = _check_beta(beta)
    p = np.asarray(pi, dtype=np.float64)
    r = np.asarray(pi_ref, dtype=np.float64)
    if p.shape != r.shape:
        raise ValueError(f"pi and pi_ref shapes differ: {p.shape} vs {r.shape}")
    ok = (p > 0) & (r > 0)
    if valid is not None:
        ok &= np.asarray(valid, dtype=bool)
    out = np.full(p.shape, np.nan)
    out[ok] = beta * (np.log(p[ok]) - np.log(r[ok]))
    return out


def soft_advantage(Q: np.ndarray, V: np.ndarray) -> np.ndarray:
    """A(s, a) = Q(s, a) − V(s) (NaN stays NaN on invalid actions). Shapes: (S, A), (S,) -> (S, A)."""
    return np.asarray(Q, dtype=np.float64) - np.asarray(V, dtype=np.float64)[:, None]


# --------------------------------------------------------------------------------------------------------------
# random instances


def random_mdp(n_states: int = 20, n_actions: int = 4, gamma: float = 0.9, alpha: float = 0.5,
               deterministic: bool = False, seed: int = 0, *, n_absorbing: int = 0,
               p_invalid: float = 0.0) -> tuple[TabularMDP, np.ndarray]:
    """A random MDP and reference policy [R]: P[s,a] ~ Dirichlet(α·1) (or one-hot on a uniform next
    state when ``deterministic``), R ~ N(0, 1), π_ref[s] ~ Dirichlet(1) over A(s).

    ``n_absorbing`` last states are absorbing; ``p_invalid`` masks each action with that probability (one action
    per state always stays valid), which exercises the A(s) masks. Returns ``(mdp, pi_ref)``.
    """
    if n_states < 1 or n_actions < 1 or not 0 <= n_absorbing < n_states:
        raise ValueError("need n_states >= 1, n_actions >= 1 and 0 <= n_absorbing < n_states")
    if alpha <= 0:
        raise ValueError(f"alpha must be > 0, got {alpha}")
    rng = np.random.default_rng(seed)
    S, A = n_states, n_actions
    if deterministic:
        P = np.zeros((S, A, S))
        nxt = rng.integers(0, S, size=(S, A))
        P[np.arange(S)[:, None], np.arange(A)[None, :], nxt] = 1.0
    else:
        P = rng.dirichlet(np.full(S, alpha), size=(S, A))
        # Dirichlet(α < 1) can underflow a whole row to 0 in float64 draws; renormalise defensively.
        P /= P.sum(2, keepdims=True)
    R = rng.standard_normal((S, A))
    valid = rng.random((S, A)) >= p_invalid
    keep = rng.integers(0, A, size=S)
    valid[np.arange(S), keep] = True
    absorbing = np.zeros(S, bool)
    if n_absorbing:
        absorbing[S - n_absorbing:] = True
    ref = np.zeros((S, A))
    for s in range(S):
        k = int(valid[s].sum())
        ref[s, valid[s]] = rng.dirichlet(np.ones(k))
    ref = np.where(valid, np.maximum(ref, 1e-12), 0.0)
    ref /= ref.sum(1, keepdims=True)
    mdp = TabularMDP(P=P, R=R, gamma=gamma, valid=valid, absorbing=absorbing)
    return mdp, ref


@dataclass(frozen=True, eq=False)
class TokenMDP:
    """An environment MDP whose actions are strings of ``action_len`` tokens from a ``vocab``-token alphabet, with
    an autoregressive reference policy over tokens (claim P-3).

    Inside an action, token transitions are deterministic, carry no reward and are not discounted; the reward and
    the environment transition apply after the last token. Prefixes are numbered as trie nodes: the prefix
    (y_1..y_d), d < action_len, is node ``sum(vocab**k for k < d) + int(y_1..y_d in base vocab)``; the root (empty
    prefix) is node 0. A complete action (y_1..y_L) is action ``int(y_1..y_L in base vocab)`` of ``env``.
    """

    env: TabularMDP
    """Action-level MDP: S states, vocab**action_len actions, all valid."""
    pi_ref_tokens: np.ndarray
    """(S, n_nodes, vocab): π_ref(y | s, prefix node), each row a distribution (> 0)."""
    vocab: int
    """Alphabet size."""
    action_len: int
    """Tokens per action (L)."""

    @property
    def n_nodes(self) -> int:
        return sum(self.vocab ** d for d in range(self.action_len))

    @property
    def action_tokens(self) -> np.ndarray:
        """(A, L) int: the tokens of each action, most significant first."""
        A = self.vocab ** self.action_len
        a = np.arange(A)
        return np.stack([(a // self.vocab ** (self.action_len - 1 - j)) % self.vocab
                         for j in range(self.action_len)], 1)

    def node_of(self, prefix: Sequence[int]) -> int:
        """The trie node id of a prefix of length < action_len."""
        d = len(prefix)
        if d >= self.action_len:
            raise ValueError(f"a prefix has at most {self.action_len - 1} tokens, got {d}")
        code = 0
        for y in prefix:
            code = code * self.vocab + int(y)
        return sum(self.vocab ** k for k in range(d)) + code

    def _action_nodes(self) -> np.ndarray:
        """(A, L) int: the node each token of each action is emitted from."""
        toks = self.action_tokens
        return np.array([[self.node_of(row[:j]) for j in range(self.action_len)] for row in toks])

    def action_pi_ref(self) -> np.ndarray:
        """(S, A): π_ref(a|s) = Π_j π_ref(y_j | s, y_<j), the action-level reference the token policy implies."""
        toks, nodes = self.action_tokens, self._action_nodes()
        return np.prod(self.pi_ref_tokens[:, nodes, toks], axis=2)

    def token_log_ratios(self, pi_tokens: np.ndarray, beta: float) -> np.ndarray:
        """(S, A, L): β·log(π(y_j|s, y_<j)/π_ref(y_j|s, y_<j)) along every action, for a token policy
        ``pi_tokens`` of shape (S, n_nodes, vocab). Their sum over j is the action's log-ratio score ([D],
        "Token granularity")."""
        beta = _check_beta(beta)
        toks, nodes = self.action_tokens, self._action_nodes()
        return beta * (np.log(pi_tokens[:, nodes, toks]) - np.log(self.pi_ref_tokens[:, nodes, toks]))

    def token_soft_optimum(self, Q_star: np.ndarray, beta: float) -> np.ndarray:
        """Token-level π* from the action-level Q* (S, A) by the intra-action recursion
        V(s, y_≤L) = Q*(s, a), V(s, y_<j) = β log Σ_y π_ref(y|·) exp(V(s, y_<j y)/β), π*(y|·) = π_ref·exp((V_child −
        V)/β). Returns (S, n_nodes, vocab)."""
        beta = _check_beta(beta)
        S, v, L = self.env.n_states, self.vocab, self.action_len
        child_vals = np.asarray(Q_star, dtype=np.float64).reshape(S, v ** (L - 1), v)  # depth L−1 nodes × token
        out = np.empty((S, self.n_nodes, v))
        for d in range(L - 1, -1, -1):
            off = sum(v ** k for k in range(d))
            ref = self.pi_ref_tokens[:, off:off + v ** d, :]
            z = np.log(ref) + child_vals / beta
            m = z.max(2, keepdims=True)
            V = beta * (m[..., 0] + np.log(np.exp(z - m).sum(2)))
            out[:, off:off + v ** d, :] = ref * np.exp((child_vals - V[..., None]) / beta)
            out[:, off:off + v ** d, :] /= out[:, off:off + v ** d, :].sum(2, keepdims=True)
            child_vals = V.reshape(S, v ** (d - 1), v) if d > 0 else V
        return out

    def token_level(self) -> tuple[TabularMDP, np.ndarray, np.ndarray]:
        """The token-level MDP as one :class:`TabularMDP`, for solving it directly (an independent route to the
        token-level π*).

        States: (s, node) for every env state and prefix node, numbered ``s * n_nodes + node``, plus one absorbing
        "discount" state. Actions: the vocab tokens. Discounting only between environment steps is expressed with
        γ = 1 and a (1 − γ_env) probability of moving to the absorbing state after the last token, which has the
        same Bellman equations as discounting by γ_env there. Returns ``(mdp, pi_ref (S_tok, vocab),
        index (S, n_nodes))``.
        """
        env, v, L, N = self.env, self.vocab, self.action_len, self.n_nodes
        S = env.n_states
        n_tok = S * N + 1
        dead = n_tok - 1
        P = np.zeros((n_tok, v, n_tok))
        R = np.zeros((n_tok, v))
        index = np.arange(S * N).reshape(S, N)
        for d in range(L):
            off = sum(v ** k for k in range(d))
            for code in range(v ** d):
                node = off + code
                for y in range(v):
                    rows = index[:, node]
                    if d < L - 1:
                        child = sum(v ** k for k in range(d + 1)) + code * v + y
                        P[rows, y, index[:, child]] = 1.0
                    else:
                        a = code * v + y
                        R[rows, y] = env.R[:, a]
                        P[rows, y, :S * N] = 0.0
                        P[np.ix_(rows, [y], index[:, 0])] = env.gamma * env.P[:, a, :][:, None, :]
                        P[rows, y, dead] = 1.0 - env.gamma
        P[dead, :, dead] = 1.0
        absorbing = np.zeros(n_tok, bool)
        absorbing[dead] = True
        absorbing[:S * N] = np.repeat(env.absorbing, N)
        start = np.zeros(n_tok)
        start[index[:, 0]] = env.start
        ref = np.vstack([self.pi_ref_tokens.reshape(S * N, v), np.full((1, v), 1.0 / v)])
        mdp = TabularMDP(P=P, R=R, gamma=1.0, absorbing=absorbing, start=start)
        return mdp, ref, index


def random_token_mdp(n_states: int = 10, vocab: int = 3, action_len: int = 3, gamma: float = 0.9,
                     alpha: float = 0.5, deterministic: bool = False, seed: int = 0, *,
                     n_absorbing: int = 0) -> TokenMDP:
    """A random :class:`TokenMDP`: environment as in :func:`random_mdp` over vocab**action_len actions (all
    valid), and an autoregressive π_ref(y | s, prefix) ~ Dirichlet(1) at every (state, prefix) [R]."""
    if vocab < 2 or action_len < 1:
        raise ValueError("need vocab >= 2 and action_len >= 1")
    env, _ = random_mdp(n_states, vocab ** action_len, gamma=gamma, alpha=alpha, deterministic=deterministic,
                        seed=seed, n_absorbing=n_absorbing)
    rng = np.random.default_rng((seed, 1))
    n_nodes = sum(vocab ** d for d in range(action_len))
    ref = np.maximum(rng.dirichlet(np.ones(vocab), size=(n_states, n_nodes)), 1e-12)
    ref /= ref.sum(2, keepdims=True)
    return TokenMDP(env=env, pi_ref_tokens=ref, vocab=vocab, action_len=action_len)


# --------------------------------------------------------------------------------------------------------------
# oracle distances


def bfs_distance(next_state_table: np.ndarray | Sequence[Sequence[int]], goal_mask: np.ndarray | Sequence[bool],
                 ) -> np.ndarray:
    """Shortest number of actions from each state to any goal state, :data:`UNREACHABLE` for dead ends.

    ``next_state_table[s][a]`` is the successor of (s, a) under deterministic dynamics, or −1 where a is not
    available (a ragged list of lists is accepted). Goal states have distance 0. Backward BFS: O(S·A).
    Returns (S,) int64.
    """
    goal = np.asarray(goal_mask, dtype=bool)
    S = goal.size
    rows = list(next_state_table)
    if len(rows) != S:
        raise ValueError(f"next_state_table has {len(rows)} rows but goal_mask has {S} states")
    preds: list[list[int]] = [[] for _ in range(S)]
    for s, row in enumerate(rows):
        for t in row:
            t = int(t)
            if t < 0:
                continue
            if t >= S:
                raise ValueError(f"next_state_table[{s}] points to state {t}, but there are {S} states")
            preds[t].append(s)
    dist = np.full(S, UNREACHABLE, dtype=np.int64)
    frontier = list(np.flatnonzero(goal))
    dist[frontier] = 0
    d = 0
    while frontier:
        d += 1
        nxt = []
        for t in frontier:
            for s in preds[t]:
                if dist[s] == UNREACHABLE:
                    dist[s] = d
                    nxt.append(s)
        frontier = nxt
    return dist
