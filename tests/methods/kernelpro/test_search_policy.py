"""Hand-checked visit patterns of KernelPro's MCTS tree policy (UCT with c = 0.5, progressive widening k = 1,
alpha = 0.5, root k = 3, mean backup) on toy tables with fixed rewards. They pin the design's behaviour that explains
the replay result on transpose (MCTS below random at budget 40): the root alone takes the first 10 expansions, and
UCT returns to unpromising root children as soon as the best branch's mean is diluted by two ordinary children."""

from __future__ import annotations

import math

from agentmill.methods.kernelpro import library, search
from agentmill.methods.kernelpro.config import SearchConfig


def test_root_widening_takes_the_first_ten_expansions() -> None:
    # the root may hold ceil(3 * N^0.5) children with N = children + 1: c < ceil(3 * sqrt(c + 1)) holds for
    # c = 0..9 (c = 9: ceil(9.49) = 10) and fails at c = 10 (ceil(9.95) = 10), so with 11 unseen neighbours the
    # root widens 10 times before the tree policy first descends
    r0 = library.root("sum", "full")
    assert len(library.neighbours("sum", r0, "full")) == 11
    res = search.mcts("sum", lambda p: search.Outcome(True, 1.0), SearchConfig(budget=12, seed=0), which="full",
                      s_cap=math.e)
    parents = [library.params_of(m["node"]) for m in res.memory]
    assert parents[:10] == [r0] * 10
    assert parents[10] != r0  # evaluation 12 is the first one at depth 2


def test_uct_leaves_the_best_branch_after_two_ordinary_children() -> None:
    # sum's quick space: the root has 7 neighbours. One of them, A (acc = 8), scores r = ln(speedup) = 0.6 with
    # s_cap = e; every other point scores 0. Hand-computed UCT scores u = W/N + 0.5 sqrt(ln N_root / N):
    #   evals 2-8: the 7 root children; the root is then exhausted (7 < ceil(3 sqrt 8) = 9 but nothing is left)
    #   eval 9: A (0.6 + 0.5 sqrt(ln 8) = 1.32 beats 0.72); A's first child scores 0
    #   eval 10: A again (0.3 + 0.5 sqrt(ln 9 / 2) = 0.82 beats 0.5 sqrt(ln 9) = 0.74)
    #   evals 11-16: the six other root children, one each (A: 0.2 + 0.5 sqrt(ln N / 3) = 0.64-0.66 loses to
    #   0.5 sqrt(ln N) = 0.76-0.79 of each unvisited sibling)
    #   eval 17: A's branch (0.2 + 0.5 sqrt(ln 16 / 3) = 0.68 beats 0.5 sqrt(ln 16 / 2) = 0.59); A (N = 3, two
    #   children = ceil(sqrt 3)) may not widen, so the policy descends to A's first child (tie at 0 + 0.5 sqrt(ln 3))
    #   and expands it: A's branch gets 3 of the 9 expansions after the root's
    a = dict(library.root("sum", "quick"), acc=8)
    best = library.params_of(a)

    def ev(p: library.Params) -> search.Outcome:
        return search.Outcome(True, math.exp(0.6) if p == best else 1.0)

    res = search.mcts("sum", ev, SearchConfig(budget=17, seed=0), which="quick", s_cap=math.e)
    r0 = library.root("sum", "quick")
    parents = [library.params_of(m["node"]) for m in res.memory]  # parent of evaluations 2, 3, ..., 17
    assert parents[:7] == [r0] * 7
    assert parents[7] == parents[8] == best
    others = parents[9:15]
    assert best not in others and len(set(others)) == 6 and all(p in {q for _, q in library.neighbours(
        "sum", r0, "quick")} for p in others)
    assert parents[15] == library.params_of(res.evaluated[8]["params"])  # A's first child (evaluation 9)
