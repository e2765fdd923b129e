"""The expansion objective and why greedy selection works ([P] monotone submodular + greedy
>= 1 - 1/e; the exact form here is [R]).

An *instance* is a small tree of groups (the root and internal nodes), observed leaves with 0/1 outcomes under
them, and candidate expansion points each with a fixed success probability p_x. Expanding candidate x adds one
leaf under x, succeeding with p_x independently. For a multiset S of expansions

    F(S) = sum_a w_a * P(group a is mixed | S),   P(mixed) = 1 - prod(1 - p_l) - prod(p_l) over leaves under a

with w_root = 1 and w_a = beta otherwise. Every group holds at least one observed leaf, which keeps each term of
the form -prod(c_x) (monotone submodular). The *leaf-count* objective n_a * P(mixed) is not submodular (control
NC2): at p = 0.5 its marginals run 1, 1.25, 1.25, ...
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np


@dataclass(frozen=True)
class Instance:
    """``parent[a]`` of group a (-1 for the root, a = 0); ``observed[a]`` outcomes of leaves directly under a;
    ``cand_group[x]`` the deepest group containing candidate x; ``p[x]`` its success probability."""

    parent: tuple[int, ...]
    observed: tuple[tuple[int, ...], ...]
    cand_group: tuple[int, ...]
    p: tuple[float, ...]

    @property
    def n_groups(self) -> int:
        return len(self.parent)

    @property
    def n_cands(self) -> int:
        return len(self.p)

    def ancestors(self, a: int) -> list[int]:
        out = []
        while a >= 0:
            out.append(a)
            a = self.parent[a]
        return out

    def depth(self, a: int) -> int:
        return len(self.ancestors(a)) - 1

    def _tables(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per group: prod of observed (1 - r), prod of observed r, observed count (computed once)."""
        cached = self.__dict__.get("_tables_cache")
        if cached is None:
            cached = self._compute_tables()
            object.__setattr__(self, "_tables_cache", cached)
        return cached

    def _compute_tables(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        A = self.n_groups
        fail = np.ones(A)
        succ = np.ones(A)
        count = np.zeros(A)
        for a in range(A):
            for b in range(A):
                if a in self.ancestors(b):
                    for r in self.observed[b]:
                        fail[a] *= 1 - r
                        succ[a] *= r
                        count[a] += 1
        return fail, succ, count

    def membership(self) -> np.ndarray:
        """[C, A]: 1 where candidate x lies under group a (computed once)."""
        m = self.__dict__.get("_membership_cache")
        if m is None:
            m = np.zeros((self.n_cands, self.n_groups))
            for x, g in enumerate(self.cand_group):
                m[x, self.ancestors(g)] = 1
            object.__setattr__(self, "_membership_cache", m)
        return m


def objective(S: Sequence[int], inst: Instance, beta: float = 0.0, *, leaf_count: bool = False) -> float:
    """F(S) for a multiset S of candidate indices; ``leaf_count=True`` gives the non-submodular n * P(mixed)."""
    fail, succ, count = inst._tables()
    mem = inst.membership()
    fail, succ, count = fail.copy(), succ.copy(), count.copy()
    p = np.asarray(inst.p)
    for x in S:
        fail *= 1 - mem[x] * p[x]
        succ *= 1 - mem[x] * (1 - p[x])
        count += mem[x]
    w = np.full(inst.n_groups, beta)
    w[0] = 1.0
    mixed = 1.0 - fail - succ
    return float((w * (count * mixed if leaf_count else mixed)).sum())


def objective_table(inst: Instance, ground: Sequence[int], beta: float = 0.0, *, leaf_count: bool = False) -> np.ndarray:
    """F of every subset of ``ground`` (bit i of the index = element i), by exact repeated multiplication."""
    fail0, succ0, count0 = inst._tables()
    mem = inst.membership()
    n = len(ground)
    masks = np.arange(1 << n)
    fail = np.tile(fail0, (1 << n, 1))
    succ = np.tile(succ0, (1 << n, 1))
    count = np.tile(count0, (1 << n, 1))
    for i, x in enumerate(ground):
        on = (masks >> i & 1).astype(bool)
        fail[on] *= 1 - mem[x] * inst.p[x]
        succ[on] *= 1 - mem[x] * (1 - inst.p[x])
        count[on] += mem[x]
    w = np.full(inst.n_groups, beta)
    w[0] = 1.0
    mixed = 1.0 - fail - succ
    return ((count * mixed if leaf_count else mixed) * w).sum(1)


def marginal_gain(x: int, S: Sequence[int], inst: Instance, beta: float = 0.0) -> float:
    """Closed form: sum over groups a containing x of w_a [F_a p_x + S_a (1 - p_x)], where F_a (S_a) is the
    probability that every leaf under a fails (succeeds) given S — the sampler's UUCB value term with oracle p."""
    fail, succ, _ = inst._tables()
    mem = inst.membership()
    for y in S:
        fail = fail * np.where(mem[y] > 0, 1 - inst.p[y], 1.0)
        succ = succ * np.where(mem[y] > 0, inst.p[y], 1.0)
    w = np.full(inst.n_groups, beta)
    w[0] = 1.0
    px = inst.p[x]
    return float((mem[x] * w * (fail * px + succ * (1 - px))).sum())


def greedy(inst: Instance, k: int, beta: float = 0.0) -> list[int]:
    """k expansions (repeats allowed), each the argmax of the marginal gain; ties to the lowest index."""
    S: list[int] = []
    for _ in range(k):
        gains = [marginal_gain(x, S, inst, beta) for x in range(inst.n_cands)]
        S.append(int(np.argmax(gains)))
    return S


def brute_force_opt(inst: Instance, k: int, beta: float = 0.0) -> tuple[list[int], float]:
    """The best multiset of k expansions by enumeration."""
    best, best_val = [], -np.inf
    for S in itertools.combinations_with_replacement(range(inst.n_cands), k):
        v = objective(S, inst, beta)
        if v > best_val + 1e-15:
            best, best_val = list(S), v
    return best, float(best_val)


@dataclass
class Violations:
    checked: int
    monotone: int
    submodular: int
    worst: float

    @property
    def rate(self) -> float:
        return (self.monotone + self.submodular) / self.checked if self.checked else 0.0


def check_submodular(fn: Callable[[Sequence[int]], float], ground: Sequence[int], *, exhaustive_max: int = 10,
                     samples: int = 10_000, tol: float = 1e-12, rng: np.random.Generator | None = None,
                     table: np.ndarray | None = None) -> Violations:
    """Monotonicity (gain >= -tol) and diminishing returns (gain(x | T - y) >= gain(x | T) - tol) of a set
    function over ``ground`` (elements may repeat: a multiset ground set of expansion copies).

    Up to ``exhaustive_max`` elements every (T, x, y) is checked from a table of all 2^n values (the single-step
    condition is equivalent to submodularity); beyond it ``samples`` random (S ⊂ T, x) triples are drawn. A
    precomputed ``table`` of all 2^n values (:func:`objective_table`) makes the exhaustive check cheap.
    """
    n = len(ground)
    if table is not None or n <= exhaustive_max:
        vals = table if table is not None else np.array([fn([ground[i] for i in range(n) if m >> i & 1])
                                                         for m in range(1 << n)])
        mono = sub = checked = 0
        worst = 0.0
        masks = np.arange(1 << n)
        for x in range(n):
            bx = 1 << x
            without = masks[(masks & bx) == 0]
            gain = vals[without | bx] - vals[without]
            checked += len(without)
            mono += int((gain < -tol).sum())
            worst = min(worst, float(gain.min()))
            g_of = np.full(1 << n, np.nan)
            g_of[without] = gain
            for y in range(n):
                if y == x:
                    continue
                by = 1 << y
                T = without[(without & by) != 0]
                diff = g_of[T ^ by] - g_of[T]
                checked += len(T)
                sub += int((diff < -tol).sum())
                if len(diff):
                    worst = min(worst, float(diff.min()))
        return Violations(checked, mono, sub, worst)
    rng = rng or np.random.default_rng(0)
    mono = sub = 0
    worst = 0.0
    for _ in range(samples):
        order = rng.permutation(n)
        x = int(order[0])
        t_size = int(rng.integers(0, n))
        T = [ground[i] for i in order[1: 1 + t_size]]
        s_size = int(rng.integers(0, len(T) + 1))
        S = T[:s_size]
        gS = fn(S + [ground[x]]) - fn(S)
        gT = fn(T + [ground[x]]) - fn(T)
        mono += int(gS < -tol) + int(gT < -tol)
        sub += int(gS < gT - tol)
        worst = min(worst, gS - gT, gS, gT)
    return Violations(samples, mono, sub, float(worst))


def random_instance(rng: np.random.Generator, *, n_cands: tuple[int, int] = (8, 12), all_fail_share: float = 0.7,
                    max_groups: int = 5, max_depth: int | None = None) -> Instance:
    """E162-R4 instances: a random group tree, 1-2 observed leaves per group (all failed in 70% of instances,
    else Bernoulli(0.3)), 8-12 candidates attached to random groups, p ~ Beta(0.5, 2)."""
    A = int(rng.integers(1, max_groups + 1))
    parent = [-1] + [int(rng.integers(0, a)) for a in range(1, A)]
    all_fail = rng.random() < all_fail_share
    observed = tuple(tuple(0 if all_fail else int(rng.random() < 0.3) for _ in range(int(rng.integers(1, 3))))
                     for _ in range(A))
    C = int(rng.integers(n_cands[0], n_cands[1] + 1))
    cand_group = tuple(int(rng.integers(0, A)) for _ in range(C))
    p = tuple(float(v) for v in rng.beta(0.5, 2.0, size=C))
    return Instance(tuple(parent), observed, cand_group, p)
