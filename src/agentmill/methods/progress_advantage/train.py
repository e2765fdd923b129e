"""Pair builders: policies trained from a reference under the KL-regularised objective (arXiv:2606.26080 [A]; [R]).

Implemented: :func:`kl_pg_exact`, tabular policy gradient with the *exact* gradient of
J(π) = E[Σ_t γ^t (r_t − β·KL(π(·|s_t) ‖ π_ref(·|s_t)))] (claim P-1c: the log-ratio approaches A* as training
approaches the optimum). For P-6 (an LM pair over candidate sets, ``agentmill.lm.policy``):
:func:`candidate_policy_table` (a candidate policy as an (S, A) table over an exact model), :func:`distill_to_optimum`
(fit the trainable copy to π* by cross-entropy over candidates, P-6a) and :func:`kl_pg_train` (KL-in-reward policy
gradient from rollouts with ``pg_step`` semantics, LoRA or tabular, P-6b).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from agentmill.core.tabular_mdp import TabularMDP, soft_policy_evaluation
from agentmill.core.types import StepTable


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

    Exact gradient (softmax policy-gradient theorem with the KL in the reward [D]):
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


# ------------------------------------------------------------------------------------------------------------
# LM pair builders (P-6a/P-6b): a CandidatePolicy (agentmill.lm.policy) trained from its reference
class DistillTrace(NamedTuple):
    """:func:`distill_to_optimum` progress: ``mean_kl[e]`` = mean over live states of KL(π*(·|s) ‖ π_θ(·|s))
    measured after epoch ``epochs[e]`` (epoch 0 = before training)."""

    epochs: tuple[int, ...]
    mean_kl: tuple[float, ...]
    seconds: float


def _state_columns(cands: Sequence[str], actions: Sequence[str], valid_row: np.ndarray, s: int) -> np.ndarray:
    col = {a: k for k, a in enumerate(actions)}
    missing = [c for c in cands if c not in col]
    if missing:
        raise ValueError(f"state {s}: commands {missing} are not among the model's action columns")
    cols = np.array([col[c] for c in cands], dtype=np.int64)
    if set(cols.tolist()) != set(np.flatnonzero(valid_row).tolist()):
        raise ValueError(f"state {s}: the admissible commands do not match the model's valid actions")
    return cols


def candidate_policy_table(policy: Any, states: Sequence[tuple[str, Mapping[str, Any]]], actions: Sequence[str],
                           mdp: TabularMDP) -> np.ndarray:
    """π(·|s) of a policy with ``log_probs(obs, info, candidates)`` (an ``lm.policy.CandidatePolicy``, or an
    ``envs.policies`` softmax policy) on every state of a tabular model, in the model's action columns: shape
    (S, A), zero on invalid actions and on absorbing rows.

    ``states[s] = (obs, info)`` is what the policy sees in state s (for KeyDoor: ``obs_of_state[s]`` from
    ``to_tabular()`` with ``include_feedback=False`` so that rollouts show the same text, and an info with the
    task's ``objective`` and ``admissible_commands``); ``actions`` names the columns (``env.tabular_actions``).
    The admissible commands of each live state must be exactly its valid columns.
    """
    if len(states) != mdp.n_states:
        raise ValueError(f"{len(states)} states given for a model of {mdp.n_states}")
    pi = np.zeros((mdp.n_states, mdp.n_actions))
    for s, (obs, info) in enumerate(states):
        if mdp.absorbing[s]:
            continue
        cands = tuple(info.get("admissible_commands") or ())
        cols = _state_columns(cands, actions, mdp.valid[s], s)
        pi[s, cols] = np.exp(np.asarray(policy.log_probs(obs, info, cands), dtype=np.float64))
    return pi


def distill_to_optimum(policy: Any, states: Sequence[tuple[str, Mapping[str, Any]]], actions: Sequence[str],
                       mdp: TabularMDP, pi_star: np.ndarray, *, epochs: int = 20, batch_size: int = 8,
                       lr: float | None = None, tol: float = 1e-3, seed: int = 0) -> DistillTrace:
    """Fit a trainable candidate policy (``lm.policy.LoRACandidatePolicy``) to a known π* on every live state of
    a small tabular model, by cross-entropy over the candidates ([R]; experiment P-6a).

    Typical use: π_ref = ``candidate_policy_table(reference, states, actions, mdp)``; (Q*, V*, π*) =
    ``soft_value_iteration(mdp, π_ref, β)``; distil; then β·log(π_θ/π_ref) on (s, a) approaches A* = Q* − V* as
    the KL reached falls. Each epoch visits the live states in a seeded random order in mini-batches of
    ``batch_size`` (one AdamW step each); training stops early once the mean KL(π* ‖ π_θ) is below ``tol``.
    """
    import time

    if epochs < 0 or batch_size < 1:
        raise ValueError("distill_to_optimum: epochs must be >= 0 and batch_size >= 1")
    t0 = time.perf_counter()
    pi_star = np.asarray(pi_star, dtype=np.float64)
    live = np.flatnonzero(~mdp.absorbing & mdp.valid.any(1))
    items = []
    for s in live:
        obs, info = states[s]
        cands = tuple(info.get("admissible_commands") or ())
        cols = _state_columns(cands, actions, mdp.valid[s], int(s))
        items.append((obs, info, cands, pi_star[s, cols] / pi_star[s, cols].sum()))

    def mean_kl() -> float:
        out = 0.0
        for obs, info, cands, q in items:
            lp = np.asarray(policy.log_probs(obs, info, cands), dtype=np.float64)
            with np.errstate(divide="ignore", invalid="ignore"):
                out += float(np.where(q > 0, q * (np.log(q) - lp), 0.0).sum())
        return out / max(len(items), 1)

    rng = np.random.default_rng(seed)
    done, kls = [0], [mean_kl()]
    for e in range(1, epochs + 1):
        if kls[-1] < tol:
            break
        order = rng.permutation(len(items))
        for b in range(0, len(order), batch_size):
            policy.distill_step([items[i] for i in order[b:b + batch_size]], lr=lr)
        done.append(e)
        kls.append(mean_kl())
    return DistillTrace(tuple(done), tuple(kls), time.perf_counter() - t0)


@dataclass
class KLPGLog:
    """:func:`kl_pg_train` per iteration: training-rollout success, mean soft return, mean KL over the rows."""

    success: list[float] = field(default_factory=list)
    soft_return: list[float] = field(default_factory=list)
    mean_kl: list[float] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=lambda: {"rollout": 0.0, "kl": 0.0, "update": 0.0})


def soft_advantages(table: StepTable, kl: np.ndarray, beta: float, gamma: float) -> tuple[np.ndarray, np.ndarray]:
    """Per-row (advantage, soft return-to-go) for KL-in-reward policy gradient.

    Soft reward r_t − β·KL_t (the ``envs.policies.pg_step`` contract; the KL_t term of step t does not depend on
    a_t, so including it adds only zero-mean noise), discounted return-to-go G_t within each trajectory, and a
    leave-one-out baseline: the mean of G at the same step index over the group's other trajectories that reached
    it (0 if none). It depends on other rollouts only, so the gradient stays unbiased.
    """
    soft = table.reward - beta * np.asarray(kl, dtype=np.float64)
    G = np.zeros(len(table))
    traj = table.traj_index
    for k in range(table.n_trajectories):
        rows = np.flatnonzero(traj == k)
        acc = 0.0
        for r in rows[::-1]:
            acc = soft[r] + gamma * acc
            G[r] = acc
    adv = np.zeros(len(table))
    groups = table.group_index
    for g in np.unique(groups):
        rows = np.flatnonzero(groups == g)
        for r in rows:
            peers = rows[(table.t[rows] == table.t[r]) & (traj[rows] != traj[r])]
            adv[r] = G[r] - (G[peers].mean() if peers.size else 0.0)
    return adv, G


def kl_pg_train(policy: Any, reference: Any, env_factory: Callable[[Any], Any], tasks: Sequence[Any], *,
                beta: float, iterations: int, group_size: int = 8, tasks_per_iter: int = 4, gamma: float = 0.95,
                max_steps: int | None = None, lr: float | None = None, seed: int = 0,
                normalize: str = "trajectories", start: int = 0, log: KLPGLog | None = None,
                on_iteration: Callable[[int, KLPGLog], None] | None = None) -> KLPGLog:
    """KL-regularised policy gradient from rollouts ([R]; experiment P-6b).

    Each iteration plays ``tasks_per_iter`` groups of ``group_size`` rollouts (``envs.rollout.collect_groups``),
    computes KL_t = KL(π(·|s_t) ‖ π_ref(·|s_t)) exactly over each row's candidates (``envs.policies.kl_per_step``),
    builds :func:`soft_advantages`, and takes one step with the direct KL gradient too (``kl_coef = β``): on an
    ``lm.policy.LoRACandidatePolicy`` its ``pg_update`` (AdamW; ``lr`` overrides its step size), on an
    ``envs.policies`` softmax policy ``pg_step`` (``lr`` required). The fixed point is π* of the paper's objective for
    this π_ref, β and candidate sets, which is what makes β·log(π/π_ref) a progress advantage.

    Resumption: each iteration's rollouts are seeded by (``seed``, iteration) and its tasks by ``seed`` alone, so a run
    restored to the weights and optimizer state after iteration ``start − 1`` (``LoRACandidatePolicy
    .load_training_state``) and called with ``start`` and that iteration's ``log`` continues as the uninterrupted run
    would. ``on_iteration(it, log)`` runs after each update (where a caller saves its checkpoint).
    """
    import time

    from agentmill.core.seeding import derive_seed
    from agentmill.envs.policies import kl_per_step, pg_step
    from agentmill.envs.rollout import collect_groups

    if not (np.isfinite(beta) and beta > 0):
        raise ValueError(f"beta must be > 0, got {beta}")
    if iterations < 1 or group_size < 1 or tasks_per_iter < 1 or not tasks:
        raise ValueError("kl_pg_train: iterations, group_size and tasks_per_iter must be >= 1 and tasks non-empty")
    trainable = callable(getattr(policy, "pg_update", None))
    if not trainable and lr is None:
        raise ValueError("kl_pg_train: a numpy softmax policy needs lr=")
    if not 0 <= start <= iterations:
        raise ValueError(f"kl_pg_train: start must be in [0, {iterations}], got {start}")
    log = log if log is not None else KLPGLog()
    if len(log.success) != start:
        raise ValueError(f"kl_pg_train: the log has {len(log.success)} iterations but start is {start}")
    order = np.random.default_rng(derive_seed(seed, "kl-pg-tasks")).permutation(
        np.resize(np.arange(len(tasks)), iterations * tasks_per_iter))
    for it in range(start, iterations):
        batch = [tasks[i] for i in order[it * tasks_per_iter:(it + 1) * tasks_per_iter]]
        t0 = time.perf_counter()
        table, _, _ = collect_groups(env_factory, policy, batch, group_size, max_steps,
                                     seed=derive_seed(seed, "kl-pg", it))
        t1 = time.perf_counter()
        kl = kl_per_step(policy, reference, table)
        adv, G = soft_advantages(table, kl, beta, gamma)
        t2 = time.perf_counter()
        if trainable:
            policy.pg_update(table, adv, lr=lr, kl_coef=beta, ref=reference, normalize=normalize)
        else:
            pg_step(policy, table, adv, float(lr), kl_coef=beta, ref=reference, normalize=normalize)
        t3 = time.perf_counter()
        starts = table.traj_starts
        log.success.append(float(table.success[starts].mean()))
        log.soft_return.append(float(G[starts].mean()))
        log.mean_kl.append(float(kl.mean()))
        for k, dt in (("rollout", t1 - t0), ("kl", t2 - t1), ("update", t3 - t2)):
            log.seconds[k] += dt
        if on_iteration is not None:
            on_iteration(it, log)
    return log
