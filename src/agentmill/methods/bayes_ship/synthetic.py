"""Synthetic worlds with known answers: sample candidate records, and evaluate any policy exactly.

A world is a true prior b₀, true critic likelihoods, a true kernel and a candidate budget J. Candidate 1 is correct
with probability b₀; candidate j+1 is correct with probability P_fix if candidate j was wrong and 1 − P_break if it
was right; critics are conditionally independent given correctness. ``exact_evaluate`` enumerates every outcome a
deterministic policy can meet (memoised on the state), so utilities are exact, not Monte Carlo.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from agentmill.methods.bayes_ship.config import Calibration, CostModel, CriticModel, Kernel
from agentmill.methods.bayes_ship.core import ControlState, family_used, clip_prob, posterior
from agentmill.methods.bayes_ship.replay import CandidateRecord


@dataclass(frozen=True)
class SyntheticWorld:
    name: str
    prior: float
    critics: Mapping[str, tuple[float, float]]
    """name → (p1, p0): P(pass | correct), P(pass | wrong)."""
    critic_costs: Mapping[str, float]
    c_gen: float
    max_candidates: int = 5
    kernel: Kernel | None = None
    """None: the IID kernel (P_fix = b₀, P_break = 1 − b₀)."""
    meta: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def true_kernel(self) -> Kernel:
        return self.kernel if self.kernel is not None else Kernel.iid(self.prior)

    def calibration(self) -> Calibration:
        """The world's true parameters as a controller's calibration (the oracle model)."""
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cs = {k: CriticModel(k, p1, p0) for k, (p1, p0) in self.critics.items()}
        return Calibration(self.prior, 0, cs, self.true_kernel, {"source": f"true parameters of world {self.name}"})

    def cost(self, c_ver: float, R: float = 100.0, **kw: Any) -> CostModel:
        return CostModel(R=R, c_gen=self.c_gen, c_ver=c_ver, critic_costs=dict(self.critic_costs), **kw)

    def with_kernel(self, kernel: Kernel | None, suffix: str = "") -> SyntheticWorld:
        return SyntheticWorld(self.name + suffix, self.prior, self.critics, self.critic_costs, self.c_gen,
                              self.max_candidates, kernel, self.meta)

    def with_candidates(self, J: int) -> SyntheticWorld:
        return SyntheticWorld(self.name, self.prior, self.critics, self.critic_costs, self.c_gen, J, self.kernel,
                              self.meta)


# The three worlds of the regime claims (R = 100, J = 5, IID kernel; critics as (p1, p0), cost) [R]: W-A makes
# verifying everything right, W-B has a near-oracle cheap test, W-C has only imperfect critics.
WORLD_A = SyntheticWorld("W-A", 0.8, {"L0": (0.9, 0.9), "L3": (0.8, 0.45)}, {"L0": 1.0, "L3": 5.0}, 20.0)
WORLD_B = SyntheticWorld("W-B", 0.2, {"L0": (0.9, 0.9), "L2": (0.85, 0.01), "L3": (0.8, 0.45)},
                         {"L0": 1.0, "L2": 2.0, "L3": 5.0}, 5.0)
WORLD_C = SyntheticWorld("W-C", 0.2, {"L0": (0.9, 0.9), "L2": (0.8, 0.3), "L3": (0.8, 0.35), "L4": (0.75, 0.3)},
                         {"L0": 1.0, "L2": 2.0, "L3": 3.0, "L4": 2.0}, 5.0)
WORLDS = {"W-A": WORLD_A, "W-B": WORLD_B, "W-C": WORLD_C}
MEASURED_KERNEL = Kernel(0.22, 0.16, 112, "measured-style")
"""The schema doc's example kernel: P_fix 0.22, P_break 0.16 from 112 pairs [C]."""


def sample_trajectories(world: SyntheticWorld, n: int, seed: int, *, generator: str = "synthetic"
                        ) -> list[list[CandidateRecord]]:
    """``n`` instances × J candidates, each with every critic's outcome and its label."""
    rng = np.random.default_rng(seed)
    ker = world.true_kernel
    names = list(world.critics)
    p1 = np.array([world.critics[k][0] for k in names])
    p0 = np.array([world.critics[k][1] for k in names])
    J = world.max_candidates
    out = []
    for i in range(n):
        traj = []
        y = bool(rng.random() < world.prior)
        for j in range(J):
            if j > 0:
                y = bool(rng.random() < (1 - ker.p_break if y else ker.p_fix))
            passes = rng.random(len(names)) < (p1 if y else p0)
            traj.append(CandidateRecord(f"{world.name}-{i}", f"{world.name}-{i}-{j}", j,
                                        {k: bool(v) for k, v in zip(names, passes)}, y,
                                        None if j == 0 else f"{world.name}-{i}-{j - 1}",
                                        dict(world.critic_costs), None, "", generator, world.name))
        out.append(traj)
    return out


@dataclass(frozen=True)
class ExactValue:
    utility: float
    """Expected utility, the first candidate's c_gen included."""
    critic_calls: Mapping[str, float]
    """Expected number of calls per critic."""
    p_verify: float
    p_correct_verified: float
    expected_candidates: float


def exact_evaluate(policy: Any, world: SyntheticWorld, cost: CostModel, *, verify_terminal: bool = True,
                   policy_calib: Calibration | None = None, max_nodes: int = 2_000_000) -> ExactValue:
    """Exact expected utility of a deterministic ``policy`` in ``world`` by enumeration over outcomes.

    The state a policy sees carries the belief computed with its own calibration (``policy.calib``, or
    ``policy_calib``, or the world's true one); the probabilities of outcomes always come from the true model (the
    true belief tb). Memoised on (candidate, step, outcomes so far on this candidate, policy belief, true belief).
    """
    if not getattr(policy, "reads_belief", True) and verify_terminal:
        return exact_blind(policy, world, cost)
    true = world.calibration()
    model = getattr(policy, "calib", None) or policy_calib or true
    clip = getattr(getattr(policy, "cfg", None), "prob_clip", 1e-6)
    names = list(world.critics)
    K = len(names)
    J = world.max_candidates
    tk, mk = world.true_kernel, model.kernel
    memo: dict[tuple, np.ndarray] = {}
    count = [0]

    def rnd(x: float) -> float:
        return round(x, 12)

    def V(j: int, step: int, outcomes: tuple[tuple[str, bool], ...], cb: float, tb: float, wrong: bool) -> np.ndarray:
        key = (j, step, outcomes, rnd(cb), rnd(tb), wrong)
        hit = memo.get(key)
        if hit is not None:
            return hit
        count[0] += 1
        if count[0] > max_nodes:
            raise RuntimeError(f"exact_evaluate: more than {max_nodes} states; the policy's tree is too wide")
        used = frozenset(k for k, _ in outcomes)
        d = policy.decide(ControlState(cb, used, step, j, outcomes, J, wrong))
        out = np.zeros(K + 4)  # utility, calls per critic, p_verify, p_correct_verified, candidates
        a = d.action
        if a == "verify" and not wrong:
            out[0] = -cost.c_ver + cost.R * tb
            out[K + 1] = 1.0
            out[K + 2] = tb
            if not verify_terminal and j < J and tb < 1:
                rest = V(j, step + 1, (("__verify__", False),), clip_prob(0.0, clip), 0.0, True)
                out += (1 - tb) * rest
        elif a == "ship" and not wrong:
            out[0] = cost.R * tb - (cost.wrong_ship_loss or 0.0) * (1 - tb)
        elif a == "generate" and j < J:
            nb_true = tk.apply(0.0 if wrong else tb)
            nb_ctrl = mk.apply(clip_prob(0.0, clip) if wrong else cb)
            out = V(j + 1, step + 1, (), nb_ctrl, nb_true, False).copy()
            out[0] -= cost.c_gen
            out[K + 3] += 1.0
        elif a == "critic" and not wrong:
            k = d.critic
            if k not in world.critics:
                raise ValueError(f"policy {getattr(policy, 'name', policy)} asked for critic {k!r}, which world "
                                 f"{world.name} does not have")
            i = names.index(k)
            p1, p0 = world.critics[k]
            if k in used:
                # a repeated critic is no new evidence (its outcome is the one already seen); a deterministic policy
                # that repeats would loop, so the step counter ends it (as giving up) after 64 actions
                seen = dict(outcomes)[k]
                if step < 64:
                    out += V(j, step + 1, outcomes + ((k, seen),), cb, tb, False)
            else:
                pp = p1 * tb + p0 * (1 - tb)
                for passed, pr in ((True, pp), (False, 1 - pp)):
                    if pr <= 0:
                        continue
                    tb2 = (p1 * tb / pp) if passed else ((1 - p1) * tb / (1 - pp))
                    if k not in model.critics or family_used(model, k, used):
                        cb2 = cb
                    else:
                        cb2 = posterior(cb, model.critics[k], passed, clip)
                    out += pr * V(j, step + 1, outcomes + ((k, passed),), cb2, tb2, False)
            out[0] -= cost.critic_costs[k]
            out[1 + i] += 1.0
        # give_up (or an action that is not available) pays 0
        memo[key] = out
        return out

    res = V(1, 0, (), model.prior, world.prior, False).copy()
    res[0] -= cost.c_gen
    res[K + 3] += 1.0
    return ExactValue(float(res[0]), {k: float(res[1 + i]) for i, k in enumerate(names)}, float(res[K + 1]),
                      float(res[K + 2]), float(res[K + 3]))


def exact_blind(policy: Any, world: SyntheticWorld, cost: CostModel) -> ExactValue:
    """Exact evaluation of a policy that never reads the belief (the baselines): its behaviour on a candidate depends
    only on that candidate's outcomes and index, so the joint mass of reaching candidate j with Y_j = 0 / 1 can be
    carried forward and summed over histories (linear in J instead of exponential)."""
    names = list(world.critics)
    K, J = len(names), world.max_candidates
    tk = world.true_kernel
    acc = np.zeros(K + 4)
    enter = np.array([1 - world.prior, world.prior])  # P(reach candidate j, Y_j = 0 / 1)
    acc[0] -= cost.c_gen
    acc[K + 3] += 1.0

    def walk(j: int, outcomes: tuple[tuple[str, bool], ...], q: np.ndarray, nxt: np.ndarray) -> None:
        mass = float(q.sum())
        if mass <= 0:
            return
        used = frozenset(k for k, _ in outcomes)
        d = policy.decide(ControlState(float("nan"), used, len(outcomes), j, outcomes, J))
        if d.action == "verify":
            acc[0] += cost.R * q[1] - cost.c_ver * mass
            acc[K + 1] += mass
            acc[K + 2] += q[1]
        elif d.action == "ship":
            acc[0] += cost.R * q[1] - (cost.wrong_ship_loss or 0.0) * q[0]
        elif d.action == "generate" and j < J:
            acc[0] -= cost.c_gen * mass
            acc[K + 3] += mass
            nxt += np.array([q[0] * (1 - tk.p_fix) + q[1] * tk.p_break, q[0] * tk.p_fix + q[1] * (1 - tk.p_break)])
        elif d.action == "critic":
            k = d.critic
            if k not in world.critics:
                raise ValueError(f"policy {getattr(policy, 'name', policy)} asked for critic {k!r}, which world "
                                 f"{world.name} does not have")
            if k in used:
                raise ValueError(f"policy {getattr(policy, 'name', policy)} repeats critic {k!r} on one candidate")
            p1, p0 = world.critics[k]
            acc[0] -= cost.critic_costs[k] * mass
            acc[1 + names.index(k)] += mass
            walk(j, outcomes + ((k, True),), q * np.array([p0, p1]), nxt)
            walk(j, outcomes + ((k, False),), q * np.array([1 - p0, 1 - p1]), nxt)

    for j in range(1, J + 1):
        nxt = np.zeros(2)
        walk(j, (), enter, nxt)
        enter = nxt
    return ExactValue(float(acc[0]), {k: float(acc[1 + i]) for i, k in enumerate(names)}, float(acc[K + 1]),
                      float(acc[K + 2]), float(acc[K + 3]))


def exact_expected_utility(policy: Any, world: SyntheticWorld, cost: CostModel, **kw: Any) -> float:
    return exact_evaluate(policy, world, cost, **kw).utility


def oracle_auroc(world: SyntheticWorld) -> float:
    """The AUROC of the true posterior after every critic, over one fresh candidate (prior b₀), computed exactly by
    enumerating the 2^K outcome patterns (ties count ½)."""
    names = list(world.critics)
    pats = []
    for m in range(1 << len(names)):
        l1 = l0 = 1.0
        for i, k in enumerate(names):
            p1, p0 = world.critics[k]
            passed = bool(m >> i & 1)
            l1 *= p1 if passed else 1 - p1
            l0 *= p0 if passed else 1 - p0
        lr = l1 / l0 if l0 > 0 else math.inf
        pats.append((lr, world.prior * l1, (1 - world.prior) * l0))
    pos = sum(p for _, p, _ in pats)
    neg = sum(q for _, _, q in pats)
    auc = 0.0
    for lr_a, pa, _ in pats:
        for lr_b, _, qb in pats:
            if lr_a > lr_b + 1e-15:
                auc += pa * qb
            elif abs(lr_a - lr_b) <= 1e-15:
                auc += 0.5 * pa * qb
    return auc / (pos * neg)


def perturb(calib: Calibration, delta: float, sign: Sequence[int] | None = None) -> Calibration:
    """A misspecified calibration: each critic's gap moved by ±delta (p1 by ±delta/2, p0 by ∓delta/2, clipped)."""
    import warnings

    cs = {}
    for i, (k, c) in enumerate(calib.critics.items()):
        s = 1 if sign is None else sign[i % len(sign)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cs[k] = CriticModel(k, min(max(c.p_pass_y1 + s * delta / 2, 0.0), 1.0),
                                min(max(c.p_pass_y0 - s * delta / 2, 0.0), 1.0), c.n_y1, c.n_y0, c.family)
    return Calibration(calib.prior, calib.prior_n, cs, calib.kernel, {**calib.provenance, "perturbed": delta})
