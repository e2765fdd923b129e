"""SFT, RLVR (exact policy-gradient flow and sampled REINFORCE) and distillation on the maze ([R];
docs/methods/backtrack_maze.md).

Read top to bottom:

1. ``ce_grad``: the gradient of the per-trace cross-entropy of a policy on (state, action) counts. SFT and
   distillation are both maximum likelihood, so both use it.
2. ``train_sft``: cross-entropy on golden shortest paths. Backward-facing states never occur in golden data, so
   their gradient is exactly 0 (E163 [P/Rev]); the trainer checks this at every step.
3. ``train_rlvr_exact``: Adam on log E[T] with the exact gradient of :mod:`hitting` (``objective="outcome"``:
   the 0/1-reward, no-penalty control NC7, whose gradient vanishes because every full-support policy succeeds).
4. ``train_rlvr_reinforce``: sampled REINFORCE with reward 1 - steps/T_max on success, batch-mean baseline.
5. ``collect_traces`` and ``distill``: maximum likelihood of a fresh uniform student on successful teacher
   traces, optionally stripped to the segment after the last hub departure (the control).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from agentmill.envs.pathstar import PathStarMultigraph
from agentmill.methods.backtrack_maze.config import MazeConfig
from agentmill.methods.backtrack_maze.hitting import expected_hitting_time, objective_and_grad
from agentmill.methods.backtrack_maze.policy import Adam, TabularPolicy
from agentmill.methods.backtrack_maze.rollout import run_episodes

D = MazeConfig()


@dataclass
class TrainLog:
    """What a trainer did. ``T`` holds (step, exact E[T]) checkpoints; ``grad_bwd_max`` is the largest absolute
    gradient entry on backward-facing logits seen at any step (SFT/distillation); ``grad_max`` the largest
    absolute gradient entry overall."""

    method: str
    steps: int = 0
    loss: list[float] = field(default_factory=list)
    T: list[tuple[int, float]] = field(default_factory=list)
    grad_bwd_max: float = 0.0
    grad_max: float = 0.0
    success_rate: list[float] = field(default_factory=list)
    note: str = ""


def _check(policy: TabularPolicy, env: PathStarMultigraph) -> None:
    if (policy.W, policy.K, policy.L) != (env.W, env.K, env.L):
        raise ValueError(f"policy is for W={policy.W}, K={policy.K}, L={policy.L} but env is {env!r}")
    policy.check_finite()


# ---- 1. maximum-likelihood gradient ----------------------------------------------------------------------------
def ce_grad(policy: TabularPolicy, hub_counts: np.ndarray, arm_counts: np.ndarray,
            n_traces: float) -> tuple[float, np.ndarray, np.ndarray]:
    """Mean per-trace cross-entropy and its gradient for (state, action) counts summed over ``n_traces``.

    ``hub_counts`` [W], ``arm_counts`` [K-1, 2, L+1]. For softmax logits, ∂(-log π(a|s))/∂θ_s = π(s) - e_a, so
    the gradient at state s is (n_s π(s) - N_s) / n_traces: exactly 0 wherever n_s = 0.
    """
    hub, arm = policy.hub_probs(), policy.arm_probs()
    with np.errstate(divide="ignore"):
        loss = -(np.sum(hub_counts * np.log(hub)) + np.sum(arm_counts * np.log(arm))) / n_traces
    g_hub = (hub_counts.sum() * hub - hub_counts) / n_traces
    g_arm = (arm_counts.sum(axis=-1, keepdims=True) * arm - arm_counts) / n_traces
    return float(loss), g_hub, g_arm


# ---- 2. SFT on golden shortest paths ---------------------------------------------------------------------------
def golden_counts(env: PathStarMultigraph, mode: str, rng: np.random.Generator | None,
                  batch: int) -> tuple[np.ndarray, np.ndarray, float]:
    """(State, action) counts of golden paths: hub -> g, then a uniform forward edge at depths 1..K-1.

    ``mode="exact"``: the expectation per path (g ~ U(W), edges ~ U(L)); ``"sampled"``: ``batch`` sampled paths.
    """
    W, K, L = env.W, env.K, env.L
    hub = np.zeros(W)
    arm = np.zeros((K - 1, 2, L + 1))
    if mode == "exact":
        hub[:] = 1.0 / W
        arm[:, 0, :L] = 1.0 / L
        return hub, arm, 1.0
    assert rng is not None
    hub += np.bincount(rng.integers(W, size=batch), minlength=W)
    edges = rng.integers(L, size=(batch, K - 1))
    for j in range(K - 1):
        arm[j, 0, :L] += np.bincount(edges[:, j], minlength=L)
    return hub, arm, float(batch)


def train_sft(policy: TabularPolicy, env: PathStarMultigraph, mode: str = "exact", steps: int = D.sft_steps,
              lr: float = D.sft_lr, batch: int = D.sft_batch, seed: int = 0, eval_every: int = 0) -> TrainLog:
    """SFT (cross-entropy on golden paths) with Adam. Raises AssertionError if any backward-facing gradient entry
    is nonzero at any step (SFT never sees a backward-facing state)."""
    _check(policy, env)
    if mode not in ("exact", "sampled"):
        raise ValueError(f"mode must be 'exact' or 'sampled', got {mode!r}")
    rng = np.random.default_rng(seed) if mode == "sampled" else None
    log = TrainLog(f"sft-{mode}")
    opt = Adam(policy.n_params, lr)
    for t in range(steps):
        hub_c, arm_c, n = golden_counts(env, mode, rng, batch)
        loss, g_hub, g_arm = ce_grad(policy, hub_c, arm_c, n)
        bwd = float(np.abs(g_arm[:, 1, :]).max())
        log.grad_bwd_max = max(log.grad_bwd_max, bwd)
        if bwd != 0.0:
            raise AssertionError(f"SFT produced a nonzero gradient {bwd} on a backward-facing state at step {t}")
        grad = np.concatenate([g_hub, g_arm.ravel()])
        log.grad_max = max(log.grad_max, float(np.abs(grad).max()))
        policy.set_flat(opt.step(policy.get_flat(), grad))
        log.loss.append(loss)
        if eval_every and (t + 1) % eval_every == 0:
            log.T.append((t + 1, expected_hitting_time(policy)))
    log.steps = steps
    log.T.append((steps, expected_hitting_time(policy)))
    return log


# ---- 3. RLVR, exact policy-gradient flow -----------------------------------------------------------------------
def train_rlvr_exact(policy: TabularPolicy, env: PathStarMultigraph, steps: int = D.rl_steps, lr: float = D.rl_lr,
                     objective: str = "steps", eval_every: int = 0) -> TrainLog:
    """Adam on log E[T] (``objective="steps"``: outcome reward with a length penalty, equivalent under full
    support) or on -log P(success) (``"outcome"``: 0/1 reward, no penalty; NC7)."""
    _check(policy, env)
    log = TrainLog(f"rlvr-exact-{objective}")
    opt = Adam(policy.n_params, lr)
    for t in range(steps):
        val, grad, why = objective_and_grad(policy, objective)
        if why is not None:
            log.note = f"stopped at step {t}: {why}"
            break
        # d log E[T] = dE[T]/E[T]; for the outcome objective minimise -log P(success).
        grad = grad / val if objective == "steps" else -grad / val
        log.grad_max = max(log.grad_max, float(np.abs(grad).max()))
        log.loss.append(math.log(val) if objective == "steps" else -math.log(val))
        policy.set_flat(opt.step(policy.get_flat(), grad))
        log.steps = t + 1
        if eval_every and (t + 1) % eval_every == 0:
            log.T.append((t + 1, expected_hitting_time(policy)))
    log.T.append((log.steps, expected_hitting_time(policy)))
    return log


# ---- 4. RLVR, sampled REINFORCE --------------------------------------------------------------------------------
def train_rlvr_reinforce(policy: TabularPolicy, env: PathStarMultigraph, episodes: int = D.reinforce_episodes,
                         batch: int = D.reinforce_batch, lr: float = D.rl_lr,
                         t_max_factor: int = D.t_max_factor, seed: int = 0, eval_every: int = 0) -> TrainLog:
    """REINFORCE: reward r = 1 - steps/T_max on success within T_max = t_max_factor·T*, else 0; advantage
    r - batch mean; gradient of -Σ_e A_e log π(trajectory_e) / batch, i.e. -(A_e (N_e - n_e π)) averaged."""
    _check(policy, env)
    if batch < 2:
        raise ValueError(f"batch must be >= 2 for a batch-mean baseline, got {batch}")
    rng = np.random.default_rng(seed)
    t_max = t_max_factor * env.optimal_steps
    log = TrainLog("rlvr-reinforce")
    opt = Adam(policy.n_params, lr)
    n_updates = episodes // batch
    for t in range(n_updates):
        ep = run_episodes(policy, env, batch, rng, t_max=t_max, record=True)
        r = np.where(ep.success, 1.0 - ep.steps / t_max, 0.0)
        adv = r - r.mean()
        hub, arm = policy.hub_probs(), policy.arm_probs()
        assert ep.hub_counts is not None and ep.arm_counts is not None
        # Σ_t ∇ log π(a_t|s_t) = N_e(s, ·) - n_e(s) π(s)
        glp_hub = ep.hub_counts - ep.hub_counts.sum(1, keepdims=True) * hub
        glp_arm = ep.arm_counts - ep.arm_counts.sum(-1, keepdims=True) * arm
        g_hub = -(adv[:, None] * glp_hub).mean(0)
        g_arm = -(adv[:, None, None, None] * glp_arm).mean(0)
        grad = np.concatenate([g_hub, g_arm.ravel()])
        log.grad_max = max(log.grad_max, float(np.abs(grad).max()))
        log.grad_bwd_max = max(log.grad_bwd_max, float(np.abs(g_arm[:, 1, :]).max()))
        policy.set_flat(opt.step(policy.get_flat(), grad))
        log.loss.append(float(r.mean()))
        log.success_rate.append(float(ep.success.mean()))
        if eval_every and (t + 1) % eval_every == 0:
            log.T.append(((t + 1) * batch, expected_hitting_time(policy)))
    log.steps = n_updates * batch
    log.T.append((log.steps, expected_hitting_time(policy)))
    return log


# ---- 5. distillation -------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Traces:
    """Sufficient statistics of ``n`` successful traces: (state, action) counts of whole traces and of their last
    segments (last hub departure to the target), and the mean trace length."""

    n: int
    hub_counts: np.ndarray
    arm_counts: np.ndarray
    seg_hub_counts: np.ndarray
    seg_arm_counts: np.ndarray
    mean_steps: float
    attempts: int


def collect_traces(teacher: TabularPolicy, env: PathStarMultigraph, n_traces: int = D.distill_traces,
                   seed: int = 0, t_max_factor: int = D.t_max_factor, max_attempts: int | None = None) -> Traces:
    """Sample episodes (horizon t_max_factor·T*) until ``n_traces`` have succeeded; keep only successful ones."""
    _check(teacher, env)
    rng = np.random.default_rng(seed)
    t_max = t_max_factor * env.optimal_steps
    max_attempts = max_attempts or 50 * n_traces
    W, K, L = env.W, env.K, env.L
    hub, arm = np.zeros(W), np.zeros((K - 1, 2, L + 1))
    shub, sarm = np.zeros(W), np.zeros((K - 1, 2, L + 1))
    got, attempts, lengths = 0, 0, []
    while got < n_traces:
        if attempts >= max_attempts:
            raise RuntimeError(f"only {got} of {n_traces} traces succeeded in {attempts} attempts")
        need = n_traces - got
        ep = run_episodes(teacher, env, max(need, 64), rng, t_max=t_max, record=True)
        attempts += ep.steps.size
        ok = np.flatnonzero(ep.success)[:need]
        assert ep.hub_counts is not None and ep.arm_counts is not None
        assert ep.seg_hub_counts is not None and ep.seg_arm_counts is not None
        hub += ep.hub_counts[ok].sum(0)
        arm += ep.arm_counts[ok].sum(0)
        shub += ep.seg_hub_counts[ok].sum(0)
        sarm += ep.seg_arm_counts[ok].sum(0)
        lengths.extend(ep.steps[ok].tolist())
        got += ok.size
    return Traces(n_traces, hub, arm, shub, sarm, float(np.mean(lengths)), attempts)


def fit_student(env: PathStarMultigraph, hub_counts: np.ndarray, arm_counts: np.ndarray, n: int,
                steps: int = D.distill_steps, lr: float = D.distill_lr) -> tuple[TabularPolicy, TrainLog]:
    """Maximum likelihood (Adam on the mean per-trace cross-entropy) of a fresh uniform student."""
    student = TabularPolicy(env.W, env.K, env.L)
    log = TrainLog("distill")
    opt = Adam(student.n_params, lr)
    for _ in range(steps):
        loss, g_hub, g_arm = ce_grad(student, hub_counts, arm_counts, n)
        log.grad_bwd_max = max(log.grad_bwd_max, float(np.abs(g_arm[:, 1, :]).max()))
        grad = np.concatenate([g_hub, g_arm.ravel()])
        log.grad_max = max(log.grad_max, float(np.abs(grad).max()))
        student.set_flat(opt.step(student.get_flat(), grad))
        log.loss.append(loss)
    log.steps = steps
    log.T.append((steps, expected_hitting_time(student)))
    return student, log


def distill(teacher: TabularPolicy, env: PathStarMultigraph, n_traces: int = D.distill_traces,
            strip_recoveries: bool = False, steps: int = D.distill_steps, seed: int = 0,
            lr: float = D.distill_lr, traces: Traces | None = None) -> TabularPolicy:
    """Distil ``n_traces`` successful teacher traces into a fresh uniform student [R].

    ``strip_recoveries=True`` keeps only each trace's segment from the last hub departure to the target (the
    control: the recoveries are gone). Pass ``traces`` to reuse one sample for both variants.
    """
    tr = traces if traces is not None else collect_traces(teacher, env, n_traces, seed)
    if strip_recoveries:
        return fit_student(env, tr.seg_hub_counts, tr.seg_arm_counts, tr.n, steps, lr)[0]
    return fit_student(env, tr.hub_counts, tr.arm_counts, tr.n, steps, lr)[0]
