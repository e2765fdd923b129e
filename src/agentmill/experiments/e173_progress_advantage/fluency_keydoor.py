"""KeyDoor with a fluency prior: the exact task, a vectorised simulator and the step grades of every scorer.

The reference policy puts extra logit on fluent but useless commands (no-ops, distractors), so the progress
advantage of a trained pair has something to see past. P-4 (``keydoor_grader``) grades steps on it and P-5
(``fluency_control``) varies the prior's strength; both build tasks and grade steps here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from agentmill.core.tabular_mdp import TabularMDP, soft_advantage, soft_value_iteration
from agentmill.core.types import DEAD_END_DISTANCE
from agentmill.envs.keydoor import KeyDoorConfig, KeyDoorEnv, KeyDoorLayout
from agentmill.methods.progress_advantage import tabular_progress_advantage

TRAP_WORLD = KeyDoorConfig(trap=True, droppable=False, slip=0.0, max_steps=30)
"""P-4 setup [R]: KeyDoor with trap; droppable=False keeps the exact model small [R]."""


NO_OPS = ("look", "wait", "inventory")


@dataclass(frozen=True)
class GraderParams:
    """What building a task and grading its steps depend on. P-4's ``Setup`` carries the same fields, so either
    can be passed."""

    beta: float = 0.1
    """KL coefficient of training and of the score (0.1 [R]; docs/methods/progress_advantage.md)."""
    gamma: float = 0.95
    """Discount (0.95, as GiGPO's launch scripts [C]; the project default for KeyDoor)."""
    fluency_logit: float = 2.0
    """Reference logit on no-ops and distractor actions (+2, the P-4 "fluency prior" [R])."""
    target_ref_p: float = 0.0
    """If > 0, ignore ``fluency_logit`` and pick it per layout so that π_ref puts this mean mass on the first moves
    of shortest plans (P-5: 0.02)."""
    mc_k: int = 4
    """Monte Carlo rollouts per estimate (k = 4 [R], cost reported)."""


class Task(NamedTuple):
    """One layout's exact model with its reference, oracle labels and the exact soft-optimal advantage."""

    layout: KeyDoorLayout
    mdp: TabularMDP
    actions: tuple[str, ...]
    dist: np.ndarray
    """(S,) oracle distance to the goal (``DEAD_END_DISTANCE`` in dead ends)."""
    plan: np.ndarray
    """(S, A) bool: first moves of shortest plans."""
    fluent: np.ndarray
    """(A,) bool: no-op or distractor commands."""
    pi_ref: np.ndarray
    A_star: np.ndarray
    fluency_logit: float


def fluent_actions(actions: tuple[str, ...], layout: KeyDoorLayout) -> np.ndarray:
    """No-ops (look, wait, inventory, examine …) and actions on distractor objects: fluent but useless."""
    return np.array([c in NO_OPS or c.startswith("examine ") or any(c.endswith(f" {d}") for d in layout.distractors)
                     for c in actions])


def fluency_reference(valid: np.ndarray, fluent: np.ndarray, logit: float) -> np.ndarray:
    """π_ref(a|s) ∝ exp(logit·fluent(a)) over A(s)."""
    w = np.where(valid, np.exp(logit * fluent[None, :].astype(float)), 0.0)
    tot = w.sum(1, keepdims=True)
    return np.divide(w, tot, out=np.zeros_like(w), where=tot > 0)


def ref_plan_mass(valid: np.ndarray, fluent: np.ndarray, plan: np.ndarray, logit: float) -> float:
    ref = fluency_reference(valid, fluent, logit)
    rows = plan.any(1)
    return float((ref * plan).sum(1)[rows].mean())


def build_task(layout: KeyDoorLayout, s: GraderParams) -> Task:
    env = KeyDoorEnv(layout, TRAP_WORLD)
    mdp, _, _, _ = env.to_tabular(s.gamma)
    states = env.reachable_states()
    actions = env.tabular_actions
    col = {c: k for k, c in enumerate(actions)}
    dist = np.array([env.distance(st) for st in states], dtype=np.int64)
    plan = np.zeros((mdp.n_states, mdp.n_actions), bool)
    for k, st in enumerate(states):
        for c in env.plan_commands(st):
            plan[k, col[c]] = True
    fluent = fluent_actions(actions, layout)
    logit = s.fluency_logit
    if s.target_ref_p > 0:  # bisection: plan mass falls as the fluency logit rises
        lo, hi = 0.0, 20.0
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            lo, hi = (mid, hi) if ref_plan_mass(mdp.valid, fluent, plan, mid) > s.target_ref_p else (lo, mid)
        logit = 0.5 * (lo + hi)
    ref = fluency_reference(mdp.valid, fluent, logit)
    ref[mdp.absorbing] = np.where(mdp.valid[mdp.absorbing], 1.0, 0.0)
    Q, V, _ = soft_value_iteration(mdp, ref, s.beta)
    return Task(layout, mdp, actions, dist, plan, fluent, ref, soft_advantage(Q, V), logit)


def _cdf(p: np.ndarray) -> np.ndarray:
    c = np.cumsum(p, axis=-1)
    tot = c[..., -1:]
    return np.divide(c, tot, out=np.ones_like(c), where=tot > 0)


class Sim:
    """Vectorised sampling on one exact model: actions from a policy, next states from P (chunked gathers)."""

    def __init__(self, mdp: TabularMDP, pi: np.ndarray) -> None:
        self.mdp = mdp
        self.pi_cdf = _cdf(pi)
        self.P_cdf = _cdf(mdp.P)

    def act(self, s: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return (rng.random(s.size)[:, None] > self.pi_cdf[s]).sum(1)

    def next(self, s: np.ndarray, a: np.ndarray, rng: np.random.Generator, chunk: int = 4096) -> np.ndarray:
        out = np.empty(s.size, np.int64)
        for i in range(0, s.size, chunk):
            cdf = self.P_cdf[s[i:i + chunk], a[i:i + chunk]]
            out[i:i + chunk] = (rng.random(cdf.shape[0])[:, None] > cdf).sum(1)
        return np.minimum(out, self.mdp.n_states - 1)

    def returns(self, s0: np.ndarray, horizon: np.ndarray, rng: np.random.Generator,
                first_a: np.ndarray | None = None) -> tuple[np.ndarray, int]:
        """Discounted return of chains from ``s0`` for ``horizon`` steps (first action forced when given); returns
        (returns, env steps simulated)."""
        mdp = self.mdp
        s = s0.astype(np.int64).copy()
        ret = np.zeros(s.size)
        disc = np.ones(s.size)
        alive = ~mdp.absorbing[s] & (horizon > 0)
        t, steps = 0, 0
        while alive.any():
            idx = np.flatnonzero(alive)
            a = first_a[idx] if (t == 0 and first_a is not None) else self.act(s[idx], rng)
            ret[idx] += disc[idx] * mdp.R[s[idx], a]
            s2 = self.next(s[idx], a, rng)
            disc[idx] *= mdp.gamma
            s[idx] = s2
            steps += idx.size
            t += 1
            alive[idx] = ~mdp.absorbing[s2] & (t < horizon[idx])
        return ret, steps


class Episodes(NamedTuple):
    """Flat step arrays (one row per step) and per-trajectory arrays."""

    traj: np.ndarray
    t: np.ndarray
    s: np.ndarray
    a: np.ndarray
    s2: np.ndarray
    length: np.ndarray
    success: np.ndarray
    group: np.ndarray


def rollouts(task: Task, sim: Sim, n: int, max_steps: int, rng: np.random.Generator) -> Episodes:
    mdp = task.mdp
    s = np.zeros(n, np.int64)
    alive = np.ones(n, bool)
    rows: list[tuple[np.ndarray, ...]] = []
    t = 0
    while alive.any() and t < max_steps:
        idx = np.flatnonzero(alive)
        a = sim.act(s[idx], rng)
        s2 = sim.next(s[idx], a, rng)
        rows.append((idx, np.full(idx.size, t), s[idx].copy(), a, s2))
        s[idx] = s2
        alive[idx] = ~mdp.absorbing[s2]
        t += 1
    traj, tt, ss, aa, ss2 = (np.concatenate(x) for x in zip(*rows))
    order = np.lexsort((tt, traj))
    traj, tt, ss, aa, ss2 = traj[order], tt[order], ss[order], aa[order], ss2[order]
    length = np.bincount(traj, minlength=n)
    success = mdp.absorbing[s]
    return Episodes(traj, tt, ss, aa, ss2, length, success, np.zeros(n, np.int64))


def grade_steps(task: Task, pi: np.ndarray, ep: Episodes, sim: Sim, s: GraderParams,
                rng: np.random.Generator) -> tuple[dict[str, np.ndarray], np.ndarray, int]:
    """Per-step scores of every scorer, labels (1 progress, 0 error, −1 unknown) and MC env steps spent."""
    valid = task.mdp.valid
    pa = tabular_progress_advantage(pi, task.pi_ref, s.beta, valid)
    with np.errstate(divide="ignore"):
        logpi = np.where(valid, np.log(np.where(valid, pi, 1.0)), np.nan)
    n_valid = np.maximum(valid.sum(1), 1)
    sc_state = -np.log(n_valid) - np.nansum(np.where(valid, logpi, 0.0), 1) / n_valid  # KL(U ‖ π)
    # Monte Carlo advantage: k rollouts from (s, a) minus k from s, for the remaining horizon
    h = TRAP_WORLD.max_steps - ep.t
    rep = np.repeat(np.arange(ep.s.size), s.mc_k)
    q, n_q = sim.returns(ep.s[rep], h[rep], rng, first_a=ep.a[rep])
    v, n_v = sim.returns(ep.s[rep], h[rep], rng)
    mc = (q - v).reshape(-1, s.mc_k).mean(1)
    scores = {"progress": pa[ep.s, ep.a], "logprob": logpi[ep.s, ep.a], "self_certainty": sc_state[ep.s],
              "mc": mc, "oracle": task.A_star[ep.s, ep.a]}
    d0, d1 = task.dist[ep.s], task.dist[ep.s2]
    labels = np.where(d0 >= DEAD_END_DISTANCE, -1, (d1 < d0).astype(np.int64))
    return scores, labels, n_q + n_v
