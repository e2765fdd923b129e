"""The verify-or-ship controller: belief over critic outcomes, greedy and DP controllers, and the Episode driver.

A candidate is correct (Y = 1) with belief b. A critic k passes with probability p1_k if Y = 1 and p0_k if Y = 0, so
after its outcome b moves by Bayes' rule ([C] the authors' replay code):

    pass:  b' = p1·b / (p1·b + p0·(1 − b))          fail:  b' = (1 − p1)·b / ((1 − p1)·b + (1 − p0)·(1 − b))

which in log-odds ℓ = log(b / (1 − b)) is ℓ' = ℓ + log(p1/p0) on a pass and ℓ + log((1 − p1)/(1 − p0)) on a fail.
Verifying (cost c_ver) pays R·Y and ends the episode; giving up pays 0; generating (cost c_gen) replaces the
candidate and moves the belief through the kernel κ(b) = b(1 − P_break) + (1 − b)·P_fix. The controllers take the
action with the largest expected payoff net of cost:

- ``GreedyController`` ([C] ``bayesian_greedy``): one-step look-ahead. Q_verify = R·b − c_ver, Q_give_up = 0,
  Q_generate = −c_gen + R·κ(b) − c_ver, Q_k = −c_k + Σ_{outcome} P(outcome)·max(R·b' − c_ver, 0).
- ``DPController`` ([C] ``bayesian_DP``): backward induction on a belief grid. agentmill stages it by candidate
  [R]: W_j(b, m) = max{R·b − c_ver; 0; −c_gen + W_{j+1}(κ(b), ∅) if j < J; −c_k + P_k(pass)·W_j(b⁺, m∪{k}) +
  P_k(fail)·W_j(b⁻, m∪{k}) for k ∉ m}; the paper's step-counting horizon is ``stages="steps"``.

Derived facts the tests prove (docs/methods/bayes_ship.md): with θ = c_ver/R, verify beats giving up iff b ≥ θ; the
value of a critic's information is ≥ 0 and peaks at b = θ with R·θ(1 − θ)·(p1 − p0), so a zero-gap critic is never
bought at any positive cost.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

import numpy as np

from agentmill.methods.bayes_ship.config import BayesShipConfig, Calibration, CostModel, CriticModel, Kernel

Action = Literal["critic", "verify", "generate", "ship", "give_up"]
ACTIONS: tuple[str, ...] = ("verify", "ship", "give_up", "generate")
"""Terminal and generate actions in tie-break order (earlier wins a tie); critics follow in calibration order."""


# -- the belief ------------------------------------------------------------------------------------------------------
def clip_prob(p: float, clip: float = 1e-6) -> float:
    return min(max(p, clip), 1.0 - clip)


def bayes_update(b: float, p1: float, p0: float, passed: bool) -> float:
    """The closed form of the Bayes update (probabilities as given; a denominator < 1e-12 leaves b unchanged [C])."""
    if passed:
        num, den = p1 * b, p1 * b + p0 * (1 - b)
    else:
        num, den = (1 - p1) * b, (1 - p1) * b + (1 - p0) * (1 - b)
    return b if den < 1e-12 else num / den


class Belief:
    """P(current candidate correct), kept as log-odds so repeated updates add; probabilities are clipped [R]."""

    __slots__ = ("logodds", "clip")

    def __init__(self, b: float, clip: float = 1e-6) -> None:
        if not 0.0 <= b <= 1.0:
            raise ValueError(f"belief must be in [0, 1], got {b!r}")
        self.clip = clip
        b = clip_prob(b, clip)
        self.logodds = math.log(b / (1.0 - b))

    @classmethod
    def _from_logodds(cls, lo: float, clip: float) -> Belief:
        out = cls.__new__(cls)
        out.clip = clip
        hi = math.log((1 - clip) / clip)
        out.logodds = min(max(lo, -hi), hi)
        return out

    @property
    def value(self) -> float:
        lo = self.logodds
        return 1.0 / (1.0 + math.exp(-lo)) if lo >= 0 else math.exp(lo) / (1.0 + math.exp(lo))

    def update(self, critic: CriticModel, passed: bool) -> Belief:
        return Belief._from_logodds(self.logodds + critic.log_lr(passed, self.clip), self.clip)

    def after_generate(self, kernel: Kernel) -> Belief:
        return Belief(kernel.apply(self.value), self.clip)

    def __repr__(self) -> str:
        return f"Belief({self.value:.6g})"


def posterior(b: float, critic: CriticModel, passed: bool, clip: float = 1e-6) -> float:
    """Bayes update with the critic's probabilities clipped as :class:`Belief` clips them."""
    return bayes_update(b, clip_prob(critic.p_pass_y1, clip), clip_prob(critic.p_pass_y0, clip), passed)


def p_pass(b: float, critic: CriticModel, clip: float = 1e-6) -> float:
    return clip_prob(critic.p_pass_y1, clip) * b + clip_prob(critic.p_pass_y0, clip) * (1 - b)


# -- closed forms of the one-step algebra ---------------------------------------------------------------------------
def terminal_value(b: float, cost: CostModel) -> float:
    """Best terminal payoff at belief b: max(R·b − c_ver, 0, ship if allowed)."""
    v = max(cost.R * b - cost.c_ver, 0.0)
    if cost.wrong_ship_loss is not None:
        v = max(v, cost.R * b - cost.wrong_ship_loss * (1 - b))
    return v


def voi(b: float, critic: CriticModel, cost: CostModel, clip: float = 1e-6) -> float:
    """Value of a critic's information: E[T(b')] − T(b), T the terminal value (≥ 0 by Jensen; T is convex)."""
    pp = p_pass(b, critic, clip)
    return (pp * terminal_value(posterior(b, critic, True, clip), cost)
            + (1 - pp) * terminal_value(posterior(b, critic, False, clip), cost) - terminal_value(b, cost))


def purchase_band(critic: CriticModel, theta: float) -> tuple[float, float]:
    """(b_lo, b_hi): the beliefs where a pass lifts b to ≥ θ and a fail drops it below θ; VOI > 0 only inside."""
    p1, p0 = critic.p_pass_y1, critic.p_pass_y0
    if p1 < p0:  # a critic that passes wrong candidates more often: its fail is the good news, so swap outcomes
        p1, p0 = 1 - p1, 1 - p0
    lo = theta * p0 / (theta * p0 + (1 - theta) * p1)
    hi = theta * (1 - p0) / (theta * (1 - p0) + (1 - theta) * (1 - p1))
    return lo, hi


def max_voi(critic: CriticModel, cost: CostModel) -> float:
    """VOI at its peak b = θ: R·θ(1 − θ)·|gap| (0 when θ ∉ (0, 1)); a critic dearer than this is never bought by
    the one-step rule (no ship action: with ``wrong_ship_loss`` the terminal value has a third piece)."""
    th = cost.theta
    return cost.R * th * (1 - th) * abs(critic.gap) if 0 < th < 1 else 0.0


# -- states and decisions --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ControlState:
    """What a policy sees: its belief, the critics already run on this candidate (and their outcomes, in order), the
    number of actions taken so far, and which candidate this is (1-based) of at most ``max_candidates``."""

    belief: float
    used: frozenset[str] = frozenset()
    step: int = 0
    candidates: int = 1
    outcomes: tuple[tuple[str, bool], ...] = ()
    max_candidates: int = 5
    verified_wrong: bool = False
    """True after a non-terminal verify said the candidate is wrong."""


class Decision(NamedTuple):
    """An action (and which critic), every action's Q value, the belief it was taken at, and why (``explanation``,
    built on first read: formatting costs more than deciding)."""

    action: Action
    critic: str | None
    q: Mapping[str, float]
    belief: float
    note: str = ""
    cost: CostModel | None = None

    @property
    def explanation(self) -> str:
        if self.note or self.cost is None:
            return self.note
        return _explain(self.action, self.critic, self.q, self.belief, self.cost)


def _explain(action: str, critic: str | None, q: Mapping[str, float], b: float, cost: CostModel) -> str:
    """One sentence: the action, the belief against θ, and the best critic's value of information against its cost.
    VOI_k = Q_k + c_k − T(b) (Q_k = −c_k + E[value after the outcome]; exact for the one-step rule)."""
    th = cost.theta
    best, bq = None, -math.inf
    for k, v in q.items():
        if k.startswith("critic:") and v > bq:
            best, bq = k[7:], v
    best_txt = ""
    if best is not None:
        c = cost.critic_costs.get(best, 0.0)
        v = bq + c - terminal_value(b, cost)
        best_txt = f"; best critic {best} VOI {v:.3g} {'<' if v < c else '≥'} cost {c:.3g}"
    name = f"critic {critic}" if action == "critic" else action
    return f"{name}: b={b:.3g} {'≥' if b >= th else '<'} θ=c_ver/R={th:.3g}{best_txt}"


def _pick(q: Mapping[str, float]) -> str:
    best, arg = -math.inf, None
    for k, v in q.items():  # insertion order = tie-break order
        if v > best + 1e-12:
            best, arg = v, k
    assert arg is not None
    return arg


def _decision(q: dict[str, float], b: float, cost: CostModel, calib: Calibration, used: frozenset[str]) -> Decision:
    arg = _pick(q)
    if arg.startswith("critic:"):
        action, critic = "critic", arg[7:]
    else:
        action, critic = arg, None
    return Decision(action, critic, q, b, "", cost)  # type: ignore[arg-type]


def family_used(calib: Calibration, k: str, used: frozenset[str]) -> bool:
    fam = calib.critics[k].family
    return fam is not None and any(calib.critics[u].family == fam for u in used if u in calib.critics)


def _check_critic_costs(calib: Calibration, cost: CostModel) -> None:
    missing = [k for k in calib.critics if k not in cost.critic_costs]
    if missing:
        raise ValueError(f"CostModel.critic_costs has no cost for critic(s) {missing}")


class GreedyController:
    """One-step look-ahead ([C] ``bayesian_greedy``). ``decide`` costs a few dozen float operations."""

    def __init__(self, calib: Calibration, cost: CostModel, cfg: BayesShipConfig = BayesShipConfig()) -> None:
        _check_critic_costs(calib, cost)
        self.calib, self.cost, self.cfg = calib, cost, cfg
        self.name = "bayes_greedy"

    def _prepare(self) -> None:
        clip = self.cfg.prob_clip
        self._crit = [(k, f"critic:{k}", clip_prob(cm.p_pass_y1, clip), clip_prob(cm.p_pass_y0, clip),
                       self.cost.critic_costs[k]) for k, cm in self.calib.critics.items()]
        self._families = any(cm.family is not None for cm in self.calib.critics.values())
        self._ship = self.cost.wrong_ship_loss

    def q_values(self, s: ControlState) -> dict[str, float]:
        if not hasattr(self, "_crit"):
            self._prepare()
        cost, calib = self.cost, self.calib
        b = s.belief
        R, cv = cost.R, cost.c_ver
        q: dict[str, float] = {}
        can_gen = s.candidates < s.max_candidates
        if s.verified_wrong:
            q["give_up"] = 0.0
            if can_gen:
                q["generate"] = -cost.c_gen + R * calib.kernel.apply(0.0) - cv
            return q
        qv = R * b - cv
        if not self.cfg.verify_terminal and can_gen:
            qv += (1 - b) * max(0.0, -cost.c_gen + R * calib.kernel.apply(0.0) - cv)
        q["verify"] = qv
        L = self._ship
        if L is not None:
            q["ship"] = R * b - L * (1 - b)
        q["give_up"] = 0.0
        if can_gen:
            q["generate"] = -cost.c_gen + R * calib.kernel.apply(b) - cv  # a verify right after the new sample [C]
        once = self.cfg.critic_once_per_candidate
        used = s.used
        for k, key, p1, p0, ck in self._crit:
            if once and k in used:
                continue
            if self._families and family_used(calib, k, used):
                q[key] = -ck + terminal_value(b, cost)
                continue
            pp = p1 * b + p0 * (1 - b)
            bp = p1 * b / pp if pp >= 1e-12 else b
            bm = (1 - p1) * b / (1 - pp) if 1 - pp >= 1e-12 else b
            if L is None:
                tp = R * bp - cv
                tm = R * bm - cv
                q[key] = -ck + pp * (tp if tp > 0 else 0.0) + (1 - pp) * (tm if tm > 0 else 0.0)
            else:
                q[key] = -ck + pp * terminal_value(bp, cost) + (1 - pp) * terminal_value(bm, cost)
        return q

    def decide(self, s: ControlState) -> Decision:
        return _decision(self.q_values(s), s.belief, self.cost, self.calib, s.used)


# -- the DP controller -----------------------------------------------------------------------------------------------
def content_hash(calib: Calibration, cost: CostModel, cfg: BayesShipConfig) -> str:
    blob = json.dumps({"calib": calib.to_dict(), "cost": cost.to_dict(),
                       "cfg": {k: getattr(cfg, k) for k in cfg.__dataclass_fields__}}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


class _Grid:
    """Reads a function tabulated on {0, 1/N, …, 1} at arbitrary beliefs: nearest point ([C] rint) or linear."""

    def __init__(self, n: int, interp: str) -> None:
        self.n, self.interp = n, interp
        self.b = np.linspace(0.0, 1.0, n + 1)

    def weights(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(lower index, upper index, weight of upper) for beliefs x."""
        x = np.clip(np.asarray(x, dtype=float), 0.0, 1.0) * self.n
        if self.interp == "nearest":
            i = np.rint(x).astype(np.int64)
            return i, i, np.zeros_like(x)
        lo = np.minimum(np.floor(x).astype(np.int64), self.n - 1)
        return lo, lo + 1, x - lo

    def read1(self, row: np.ndarray, x: float) -> float:
        """``read`` for one belief and one table row (pure Python: the per-decision path)."""
        x = min(max(x, 0.0), 1.0) * self.n
        if self.interp == "nearest":
            return float(row[round(x)])  # round half to even, as numpy's rint
        lo = min(int(x), self.n - 1)
        w = x - lo
        return float(row[lo]) * (1 - w) + float(row[lo + 1]) * w

    def read(self, table: np.ndarray, x: np.ndarray | float) -> np.ndarray:
        lo, hi, w = self.weights(np.atleast_1d(np.asarray(x, dtype=float)))
        return table[..., lo] * (1 - w) + table[..., hi] * w


_DP_CACHE: dict[str, dict[str, Any]] = {}


class DPController:
    """Backward induction on a belief grid ([C] ``bayesian_DP``), staged by candidate by default [R].

    Solved on first use and cached by a content hash of (calibration, costs, config). ``value(s)`` is the expected
    utility-to-go under the controller's own model; the episode's value is ``value(start) − c_gen`` (the first
    candidate is paid for). The tables: ``W[j, m, i]`` for stage j (candidate j+1, or step j), critic mask m and grid
    point i, and ``policy[j, m, i]`` the argmax action index (``self.action_names``).
    """

    def __init__(self, calib: Calibration, cost: CostModel, cfg: BayesShipConfig = BayesShipConfig(controller="dp"),
                 *, max_candidates: int | None = None) -> None:
        _check_critic_costs(calib, cost)
        if max_candidates is not None:
            from dataclasses import replace

            cfg = replace(cfg, max_candidates=max_candidates)
        self.calib, self.cost, self.cfg = calib, cost, cfg
        self.names = list(calib.critics)
        self.K = len(self.names)
        self.action_names = list(ACTIONS) + [f"critic:{k}" for k in self.names]
        self.grid = _Grid(cfg.grid, cfg.interp)
        self.key = content_hash(calib, cost, cfg)
        self.name = "bayes_dp" if cfg.stages == "candidates" else "bayes_dp_steps"
        self._tables: dict[str, Any] | None = None

    # the per-critic arrays over the grid: P(pass), b⁺, b⁻
    def _critic_arrays(self, b: np.ndarray) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        out = []
        clip = self.cfg.prob_clip
        for k in self.names:
            cm = self.calib.critics[k]
            p1, p0 = clip_prob(cm.p_pass_y1, clip), clip_prob(cm.p_pass_y0, clip)
            pp = p1 * b + p0 * (1 - b)
            den_p = pp
            den_f = 1 - pp
            with np.errstate(divide="ignore", invalid="ignore"):
                bp = np.where(den_p < 1e-12, b, p1 * b / np.where(den_p < 1e-12, 1, den_p))
                bm = np.where(den_f < 1e-12, b, (1 - p1) * b / np.where(den_f < 1e-12, 1, den_f))
            out.append((pp, bp, bm))
        return out

    def _family_blocked(self, mask: int, k: int) -> bool:
        fam = self.calib.critics[self.names[k]].family
        return fam is not None and any(mask >> i & 1 and self.calib.critics[self.names[i]].family == fam
                                       for i in range(self.K) if i != k)

    def solve(self) -> dict[str, Any]:
        """Solve (vectorised over the grid); cached per content hash."""
        if self._tables is not None:
            return self._tables
        if self.key in _DP_CACHE:
            self._tables = _DP_CACHE[self.key]
            return self._tables
        self._tables = self.solve_vectorised()
        _DP_CACHE[self.key] = self._tables
        return self._tables

    def _stage_count(self) -> int:
        return self.cfg.max_candidates if self.cfg.stages == "candidates" else self.cfg.horizon_steps + 1

    def solve_vectorised(self) -> dict[str, Any]:
        cost, cfg, g = self.cost, self.cfg, self.grid
        b = g.b
        K, S = self.K, self._stage_count()
        M = 1 << K
        A = len(self.action_names)
        W = np.zeros((S, M, b.size))
        pol = np.zeros((S, M, b.size), dtype=np.int8)
        crit = self._critic_arrays(b)
        idx = [(g.weights(bp), g.weights(bm)) for _, bp, bm in crit]
        kb = g.weights(self.calib.kernel.apply(b))
        k0 = g.weights(np.array([self.calib.kernel.apply(0.0)]))
        steps = cfg.stages == "steps"
        masks = sorted(range(M), key=lambda m: -bin(m).count("1"))

        def read(table: np.ndarray, w: tuple[np.ndarray, np.ndarray, np.ndarray]) -> np.ndarray:
            lo, hi, wt = w
            return table[lo] * (1 - wt) + table[hi] * wt

        Q = np.full((A, b.size), -np.inf)
        for j in range(S - 1, -1, -1):
            last = j == S - 1
            for m in masks:
                Q.fill(-np.inf)
                if steps and last:  # V_H(b) = max(R·b − c_ver, 0) [C]
                    Q[0] = cost.R * b - cost.c_ver
                    Q[2] = 0.0
                    if cost.wrong_ship_loss is not None:
                        Q[1] = cost.R * b - cost.wrong_ship_loss * (1 - b)
                else:
                    gen_next = None if last else W[j + 1, 0]
                    qv = cost.R * b - cost.c_ver
                    if not cfg.verify_terminal and gen_next is not None:
                        qv = qv + (1 - b) * max(0.0, float(-cost.c_gen + read(gen_next, k0)[0]))
                    Q[0] = qv
                    if cost.wrong_ship_loss is not None:
                        Q[1] = cost.R * b - cost.wrong_ship_loss * (1 - b)
                    Q[2] = 0.0
                    if gen_next is not None:
                        Q[3] = -cost.c_gen + read(gen_next, kb)
                    nxt = W[j + 1] if steps else W[j]
                    for k in range(K):
                        if m >> k & 1 and cfg.critic_once_per_candidate:
                            continue
                        m2 = m | (1 << k)
                        ck = cost.critic_costs[self.names[k]]
                        if self._family_blocked(m, k):
                            Q[4 + k] = -ck + nxt[m2]
                            continue
                        pp = crit[k][0]
                        wp, wm = idx[k]
                        Q[4 + k] = -ck + pp * read(nxt[m2], wp) + (1 - pp) * read(nxt[m2], wm)
                a = np.argmax(Q > Q.max(axis=0) - 1e-12, axis=0)  # first action within 1e-12 of the max
                pol[j, m] = a
                W[j, m] = Q[a, np.arange(b.size)]
        return {"W": W, "policy": pol}

    def solve_reference(self) -> dict[str, Any]:
        """The same recursion as a per-state Python loop (the performance baseline and a cross-check)."""
        cost, cfg = self.cost, self.cfg
        K, S, N = self.K, self._stage_count(), cfg.grid
        M = 1 << K
        bs = [i / N for i in range(N + 1)]
        W = [[[0.0] * (N + 1) for _ in range(M)] for _ in range(S)]
        pol = [[[0] * (N + 1) for _ in range(M)] for _ in range(S)]
        steps = cfg.stages == "steps"
        clip = cfg.prob_clip
        ps = [(clip_prob(self.calib.critics[k].p_pass_y1, clip), clip_prob(self.calib.critics[k].p_pass_y0, clip))
              for k in self.names]
        kern = self.calib.kernel

        def rd(row: list[float], x: float) -> float:
            x = min(max(x, 0.0), 1.0) * N
            if cfg.interp == "nearest":
                return row[int(np.rint(x))]
            lo = min(int(math.floor(x)), N - 1)
            w = x - lo
            return row[lo] * (1 - w) + row[lo + 1] * w

        masks = sorted(range(M), key=lambda m: -bin(m).count("1"))
        for j in range(S - 1, -1, -1):
            last = j == S - 1
            for m in masks:
                for i, b in enumerate(bs):
                    q = [-math.inf] * (4 + K)
                    q[0] = cost.R * b - cost.c_ver
                    if cost.wrong_ship_loss is not None:
                        q[1] = cost.R * b - cost.wrong_ship_loss * (1 - b)
                    q[2] = 0.0
                    if not (steps and last):
                        if not last:
                            if not cfg.verify_terminal:
                                q[0] += (1 - b) * max(0.0, -cost.c_gen + rd(W[j + 1][0], kern.apply(0.0)))
                            q[3] = -cost.c_gen + rd(W[j + 1][0], kern.apply(b))
                        nxt = W[j + 1] if steps else W[j]
                        for k in range(K):
                            if m >> k & 1 and cfg.critic_once_per_candidate:
                                continue
                            m2 = m | (1 << k)
                            ck = cost.critic_costs[self.names[k]]
                            if self._family_blocked(m, k):
                                q[4 + k] = -ck + nxt[m2][i]
                                continue
                            p1, p0 = ps[k]
                            pp = p1 * b + p0 * (1 - b)
                            q[4 + k] = (-ck + pp * rd(nxt[m2], bayes_update(b, p1, p0, True))
                                        + (1 - pp) * rd(nxt[m2], bayes_update(b, p1, p0, False)))
                    mx = max(q)
                    a = next(t for t, v in enumerate(q) if v > mx - 1e-12)
                    pol[j][m][i] = a
                    W[j][m][i] = q[a]
        return {"W": np.array(W), "policy": np.array(pol, dtype=np.int8)}

    def _mask(self, used: frozenset[str]) -> int:
        m = 0
        for k in used:
            if k in self.names:
                m |= 1 << self.names.index(k)
        return m

    def _stage(self, s: ControlState) -> int:
        if self.cfg.stages == "candidates":
            return min(s.candidates, self.cfg.max_candidates) - 1
        return min(s.step, self.cfg.horizon_steps)

    def q_values(self, s: ControlState) -> dict[str, float]:
        t = self.solve()
        W, g, cost, cfg = t["W"], self.grid, self.cost, self.cfg
        j, m, b = self._stage(s), self._mask(s.used), s.belief
        S = W.shape[0]
        last = j == S - 1
        steps = cfg.stages == "steps"
        can_gen = not last and (steps or s.candidates < s.max_candidates)
        kern = self.calib.kernel
        q: dict[str, float] = {}
        if s.verified_wrong:
            q["give_up"] = 0.0
            if can_gen:
                q["generate"] = -cost.c_gen + g.read1(W[j + 1, 0], kern.apply(0.0))
            return q
        qv = cost.R * b - cost.c_ver
        if not cfg.verify_terminal and can_gen:
            qv += (1 - b) * max(0.0, -cost.c_gen + g.read1(W[j + 1, 0], kern.apply(0.0)))
        q["verify"] = qv
        if cost.wrong_ship_loss is not None:
            q["ship"] = cost.R * b - cost.wrong_ship_loss * (1 - b)
        q["give_up"] = 0.0
        if steps and last:
            return q
        if can_gen:
            q["generate"] = -cost.c_gen + g.read1(W[j + 1, 0], kern.apply(b))
        nxt = W[j + 1] if steps else W[j]
        for i, k in enumerate(self.names):
            if k in s.used and cfg.critic_once_per_candidate:
                continue
            m2 = m | (1 << i)
            ck = cost.critic_costs[k]
            cm = self.calib.critics[k]
            if family_used(self.calib, k, s.used):
                q[f"critic:{k}"] = -ck + g.read1(nxt[m2], b)
                continue
            pp = p_pass(b, cm, cfg.prob_clip)
            bp, bm = posterior(b, cm, True, cfg.prob_clip), posterior(b, cm, False, cfg.prob_clip)
            q[f"critic:{k}"] = -ck + pp * g.read1(nxt[m2], bp) + (1 - pp) * g.read1(nxt[m2], bm)
        return q

    def decide(self, s: ControlState) -> Decision:
        return _decision(self.q_values(s), s.belief, self.cost, self.calib, s.used)

    def value(self, s: ControlState) -> float:
        """max over actions of the Q values at ``s`` (utility-to-go under the controller's model)."""
        return max(self.q_values(s).values())


def make_controller(calib: Calibration, cost: CostModel, cfg: BayesShipConfig = BayesShipConfig()
                    ) -> GreedyController | DPController:
    return GreedyController(calib, cost, cfg) if cfg.controller == "greedy" else DPController(calib, cost, cfg)


# -- the driver any agent loop calls ---------------------------------------------------------------------------------
@dataclass
class EpisodeResult:
    utility: float
    costs: dict[str, float]
    actions: list[str]
    beliefs: list[float]
    outcome: str
    """"verified_correct", "verified_wrong", "shipped", "gave_up" or "running"."""
    y: bool | None = None
    meta: dict[str, Any] = field(default_factory=dict)


class Episode:
    """Drive one task: ask ``next()`` what to do, report what happened with ``observe`` / ``new_candidate`` /
    ``verified`` / ``shipped`` / ``gave_up``, read ``result()``.

    The first candidate is paid for at construction (``charge_first=True``). ``on_event(kind, payload)`` is called
    on every decision and observation (for logs).
    """

    def __init__(self, controller: Any, calib: Calibration, cost: CostModel, *,
                 on_event: Callable[[str, dict[str, Any]], None] | None = None, charge_first: bool = True,
                 max_candidates: int | None = None) -> None:
        self.controller, self.calib, self.cost = controller, calib, cost
        cfg = getattr(controller, "cfg", BayesShipConfig())
        self.cfg = cfg
        self.max_candidates = max_candidates or cfg.max_candidates
        self.on_event = on_event
        self.belief = Belief(calib.prior, cfg.prob_clip)
        self.used: list[str] = []
        self.outcomes: list[tuple[str, bool]] = []
        self.step = 0
        self.candidates = 1
        self.costs: dict[str, float] = {"generate": cost.c_gen if charge_first else 0.0}
        self.actions: list[str] = ["generate"] if charge_first else []
        self.beliefs: list[float] = [self.belief.value]
        self.reward = 0.0
        self.outcome = "running"
        self.y: bool | None = None
        self.verified_wrong = False

    def _emit(self, kind: str, payload: dict[str, Any]) -> None:
        if self.on_event is not None:
            self.on_event(kind, payload)

    def state(self) -> ControlState:
        return ControlState(self.belief.value, frozenset(self.used), self.step, self.candidates,
                            tuple(self.outcomes), self.max_candidates, self.verified_wrong)

    def _charge(self, what: str, c: float) -> None:
        self.costs[what] = self.costs.get(what, 0.0) + c

    def _running(self) -> None:
        if self.outcome != "running":
            raise ValueError(f"the episode has ended ({self.outcome})")

    def next(self) -> Decision:
        self._running()
        d = self.controller.decide(self.state())
        self._emit("decision", {"action": d.action, "critic": d.critic, "belief": d.belief,
                                "explanation": d.explanation})
        return d

    def observe(self, critic: str, passed: bool, cost: float | None = None) -> None:
        self._running()
        if critic not in self.calib.critics:
            raise ValueError(f"unknown critic {critic!r}; calibrated critics: {sorted(self.calib.critics)}")
        if critic in self.used and self.cfg.critic_once_per_candidate:
            raise ValueError(f"critic {critic!r} was already observed on this candidate "
                             "(critic_once_per_candidate=True)")
        c = self.cost.critic_costs.get(critic, 0.0) if cost is None else float(cost)
        if c < 0:
            raise ValueError(f"cost must be >= 0, got {c}")
        if not family_used(self.calib, critic, frozenset(self.used)):
            self.belief = self.belief.update(self.calib.critics[critic], bool(passed))
        self.used.append(critic)
        self.outcomes.append((critic, bool(passed)))
        self.step += 1
        self._charge(critic, c)
        self.actions.append(f"critic:{critic}")
        self.beliefs.append(self.belief.value)
        self._emit("observe", {"critic": critic, "passed": bool(passed), "belief": self.belief.value, "cost": c})

    def new_candidate(self, refined_from_prior: bool = True, cost: float | None = None) -> None:
        """A new candidate: refined from the current one (the kernel moves the belief) or a fresh sample (prior)."""
        self._running()
        if self.candidates >= self.max_candidates and self.cfg.stages == "candidates":
            raise ValueError(f"max_candidates={self.max_candidates} reached")
        if self.verified_wrong:
            self.belief = Belief(0.0, self.cfg.prob_clip)
        self.belief = (self.belief.after_generate(self.calib.kernel) if refined_from_prior
                       else Belief(self.calib.prior, self.cfg.prob_clip))
        self.used, self.outcomes, self.verified_wrong = [], [], False
        self.candidates += 1
        self.step += 1
        self._charge("generate", self.cost.c_gen if cost is None else float(cost))
        self.actions.append("generate")
        self.beliefs.append(self.belief.value)
        self._emit("generate", {"belief": self.belief.value})

    def verified(self, y: bool, cost: float | None = None) -> None:
        self._running()
        self._charge("verify", self.cost.c_ver if cost is None else float(cost))
        self.actions.append("verify")
        if y:
            self.reward, self.outcome, self.y = self.cost.R, "verified_correct", True
        elif self.cfg.verify_terminal or self.candidates >= self.max_candidates:
            self.outcome, self.y = "verified_wrong", False
        else:
            self.verified_wrong = True
        self._emit("verify", {"y": bool(y)})

    def shipped(self, y: bool | None = None) -> None:
        """Ship unverified (needs ``CostModel.wrong_ship_loss``); ``y`` if it later becomes known."""
        self._running()
        if self.cost.wrong_ship_loss is None:
            raise ValueError("shipping unverified needs CostModel.wrong_ship_loss (None: the paper's setting)")
        self.actions.append("ship")
        self.outcome, self.y = "shipped", y
        if y is not None:
            self.reward = self.cost.R if y else -self.cost.wrong_ship_loss
        self._emit("ship", {"y": y})

    def gave_up(self) -> None:
        self._running()
        self.actions.append("give_up")
        self.outcome = "gave_up"
        self._emit("give_up", {})

    def result(self) -> EpisodeResult:
        return EpisodeResult(self.reward - sum(self.costs.values()), dict(self.costs), list(self.actions),
                             list(self.beliefs), self.outcome, self.y)


def run_episode(episode: Episode, *, critic: Callable[[str], bool], verify: Callable[[], bool],
                generate: Callable[[], None], max_actions: int = 64) -> EpisodeResult:
    """Drive ``episode`` to its end with callables for the environment: ``critic(name) -> passed``,
    ``verify() -> correct``, ``generate()`` makes the next candidate. Stops (gives up) after ``max_actions``."""
    for _ in range(max_actions):
        d = episode.next()
        if d.action == "critic":
            assert d.critic is not None
            episode.observe(d.critic, critic(d.critic))
        elif d.action == "generate":
            generate()
            episode.new_candidate()
        elif d.action == "verify":
            episode.verified(verify())
            if episode.outcome != "running":
                break
        elif d.action == "ship":
            episode.shipped()
            break
        else:
            episode.gave_up()
            break
    else:
        episode.gave_up()
    return episode.result()


def decide(belief: float, cost: CostModel, calib: Calibration, *, used: Sequence[str] = (), candidates: int = 1,
           cfg: BayesShipConfig = BayesShipConfig()) -> Decision:
    """One decision at ``belief`` (the one-call API): verify, ship, give up, generate, or which critic to run."""
    s = ControlState(float(belief), frozenset(used), 0, candidates, (), cfg.max_candidates)
    return make_controller(calib, cost, cfg).decide(s)
