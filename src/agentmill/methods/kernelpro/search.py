"""Search over compiled-and-measured candidates: domain-adapted MCTS (progressive widening, asymmetric branching
at the root, log-scaled reward, dead-end pruning, a transposition table, search memory), greedy hill climbing and
random search, all driven by one ``evaluate(params) -> Outcome`` callable so the same code runs live (compile and
time each candidate) or as a replay over an exhaustively measured table (ground truth for the search claims)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agentmill.methods.kernelpro.config import SearchConfig
from agentmill.methods.kernelpro.library import Params, Proposer, enumerate_space, root


@dataclass(frozen=True)
class Outcome:
    """What evaluating a candidate gave: ``ok`` (passed the wall, or the weaker check in a no-wall arm), its
    speedup over the numpy reference, the tool-recommended parameter changes, and whether it is an exploit."""

    ok: bool
    speedup: float
    recommended: tuple[tuple[str, object], ...] = ()
    exploit: bool = False


def reward(o: Outcome, s_cap: float, form: str = "log") -> float:
    """[P name; R form] log: clip(log(speedup)/log(S_cap), -1, 1); linear: clip((speedup-1)/(S_cap-1), -1, 1);
    any failure scores -1 (the correctness wall: incorrect code earns nothing)."""
    if not o.ok or not o.speedup > 0:
        return -1.0
    s_cap = max(s_cap, 1.5)
    if form == "log":
        return float(np.clip(math.log(o.speedup) / math.log(s_cap), -1, 1))
    return float(np.clip((o.speedup - 1) / (s_cap - 1), -1, 1))


@dataclass
class Node:
    params: Params
    outcome: Outcome
    parent: Node | None = None
    children: list[Node] = field(default_factory=list)
    N: int = 0
    W: float = 0.0
    exhausted: bool = False
    recent: list[str] = field(default_factory=list)
    """Last expansion outcomes from this node: ``fail``, ``regress`` or ``ok`` (dead-end pruning)."""


@dataclass
class SearchResult:
    algo: str
    best: Params
    best_speedup: float
    best_exploit: bool
    curve: list[float]
    """Best speedup found after each evaluation (NaN until a correct one is found)."""
    evaluated: list[dict[str, Any]]
    memory: list[dict[str, Any]]
    bookkeeping_s: float = 0.0


def _best_curve(history: list[Outcome]) -> list[float]:
    best, out = -math.inf, []
    for o in history:
        if o.ok:
            best = max(best, o.speedup)
        out.append(best if best > -math.inf else math.nan)
    return out


def mcts(task: str, evaluate: Callable[[Params], Outcome], cfg: SearchConfig, *, which: str = "full",
         s_cap: float = 2.0, rng: np.random.Generator | None = None,
         recommend: Callable[[Params, Outcome], Sequence[tuple[str, object]]] | None = None) -> SearchResult:
    """MCTS over the library's move space: one evaluation per expansion until ``cfg.budget``."""
    import time

    rng = rng if rng is not None else np.random.default_rng(cfg.seed)
    prop = Proposer(task, which, cfg.guided_weight)
    rec = recommend or (lambda p, o: o.recommended)
    t_book = 0.0
    r0 = root(task, which)
    history: list[Outcome] = [evaluate(r0)]
    seen: dict[Params, Outcome] = {r0: history[0]}
    rootn = Node(r0, history[0])
    rootn.N, rootn.W = 1, reward(history[0], s_cap, cfg.reward)
    nodes = [rootn]
    evaluated = [{"params": dict(r0), "speedup": history[0].speedup, "ok": history[0].ok}]
    memory: list[dict[str, Any]] = []
    while len(history) < cfg.budget:
        t0 = time.perf_counter()
        node, path = rootn, [rootn]
        while True:
            k = cfg.root_k if node is rootn else cfg.widen_k
            allowed = math.ceil(k * max(node.N, 1) ** cfg.widen_alpha)
            live = [c for c in node.children if c.outcome.ok and not _dead(c)]
            if len(node.children) < allowed and not node.exhausted:
                break
            if not live:
                if not node.exhausted:
                    break
                node = None  # type: ignore[assignment]
                break
            node = max(live, key=lambda c: (c.W / c.N + cfg.c_uct * math.sqrt(math.log(node.N) / c.N), -nodes.index(c)))
            path.append(node)
        if node is None:  # the whole tree is exhausted
            break
        step = prop.propose(node.params, list(rec(node.params, node.outcome)), set(seen), rng)
        t_book += time.perf_counter() - t0
        if step is None:
            node.exhausted = True
            if all(n.exhausted or not n.outcome.ok for n in nodes):
                break
            continue
        action, child_p = step
        o = evaluate(child_p)
        t0 = time.perf_counter()
        history.append(o)
        seen[child_p] = o
        evaluated.append({"params": dict(child_p), "speedup": o.speedup, "ok": o.ok, "action": action})
        child = Node(child_p, o, node)
        node.children.append(child)
        nodes.append(child)
        outcome = "fail" if not o.ok else ("regress" if node.outcome.ok and o.speedup < node.outcome.speedup *
                                           (1 - cfg.regress_margin) else "ok")
        node.recent = (node.recent + [outcome])[-cfg.dead_end_k:]
        if len(node.recent) == cfg.dead_end_k and all(x != "ok" for x in node.recent):
            node.exhausted = True
        memory.append({"node": dict(node.params), "action": action, "outcome": outcome, "speedup": o.speedup,
                       "lesson": f"{action} from this node {'failed' if outcome == 'fail' else outcome}"})
        r = reward(o, s_cap, cfg.reward)
        child.N, child.W = 1, r
        for n in path:
            n.N += 1
            n.W += r
        t_book += time.perf_counter() - t0
    return _result("mcts", history, seen, evaluated, memory, t_book)


def _dead(n: Node) -> bool:
    """A subtree whose nodes are all exhausted (or failed) is a leaf."""
    return n.exhausted and all(_dead(c) or not c.outcome.ok for c in n.children)


def _result(algo: str, history: list[Outcome], seen: dict[Params, Outcome], evaluated: list, memory: list,
            t_book: float) -> SearchResult:
    ok = [(o.speedup, p, o.exploit) for p, o in seen.items() if o.ok]
    if ok:
        sp, bp, ex = max(ok, key=lambda x: x[0])
    else:
        sp, bp, ex = math.nan, next(iter(seen)), False
    return SearchResult(algo, bp, sp, ex, _best_curve(history), evaluated, memory, t_book)


def greedy(task: str, evaluate: Callable[[Params], Outcome], cfg: SearchConfig, *, which: str = "full",
           rng: np.random.Generator | None = None,
           recommend: Callable[[Params, Outcome], Sequence[tuple[str, object]]] | None = None) -> SearchResult:
    """Hill climbing: always expand the best-so-far node with one proposal (the next best when it has none left)."""
    rng = rng if rng is not None else np.random.default_rng(cfg.seed)
    prop = Proposer(task, which, cfg.guided_weight)
    rec = recommend or (lambda p, o: o.recommended)
    r0 = root(task, which)
    history = [evaluate(r0)]
    seen = {r0: history[0]}
    evaluated = [{"params": dict(r0), "speedup": history[0].speedup, "ok": history[0].ok}]
    spent: set[Params] = set()
    while len(history) < cfg.budget:
        ranked = sorted(((o.speedup, p) for p, o in seen.items() if o.ok and p not in spent), key=lambda x: -x[0])
        if not ranked:
            break
        _, base = ranked[0]
        step = prop.propose(base, list(rec(base, seen[base])), set(seen), rng)
        if step is None:
            spent.add(base)
            continue
        action, p = step
        o = evaluate(p)
        history.append(o)
        seen[p] = o
        evaluated.append({"params": dict(p), "speedup": o.speedup, "ok": o.ok, "action": action})
    return _result("greedy", history, seen, evaluated, [], 0.0)


def random_search(task: str, evaluate: Callable[[Params], Outcome], cfg: SearchConfig, *, which: str = "full",
                  rng: np.random.Generator | None = None, space: list[Params] | None = None) -> SearchResult:
    """Uniform random points of the space (the root first), without repetition."""
    rng = rng if rng is not None else np.random.default_rng(cfg.seed)
    pts = space or enumerate_space(task, which)
    r0 = root(task, which)
    order = [r0] + [pts[i] for i in rng.permutation(len(pts)) if pts[i] != r0]
    history, seen, evaluated = [], {}, []
    for p in order[:cfg.budget]:
        o = evaluate(p)
        history.append(o)
        seen[p] = o
        evaluated.append({"params": dict(p), "speedup": o.speedup, "ok": o.ok})
    return _result("random", history, seen, evaluated, [], 0.0)


def run_algo(algo: str, task: str, evaluate: Callable[[Params], Outcome], cfg: SearchConfig, **kw: Any) -> SearchResult:
    if algo == "mcts":
        return mcts(task, evaluate, cfg, **kw)
    kw.pop("s_cap", None)
    if algo == "greedy":
        return greedy(task, evaluate, cfg, **kw)
    if algo == "random":
        kw.pop("recommend", None)
        return random_search(task, evaluate, cfg, **kw)
    raise ValueError(f"unknown search algorithm {algo!r}; choose mcts, greedy or random")


def evals_to_reach(curve: Sequence[float], target: float, budget: int) -> int:
    """1-based evaluation count at which the best-so-far first reaches ``target`` (budget + 1 if never)."""
    for i, v in enumerate(curve):
        if v == v and v >= target:
            return i + 1
    return budget + 1
