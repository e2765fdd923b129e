"""Spending one token budget across many prompts (E162; ABA-lite [R], not the paper's learned ABA).

``uniform``: every prompt gets the same budget. ``aba_lite`` ([R], in the spirit of Knapsack RL,
arXiv:2509.25849; the paper's ABA is a learned predictor and is not reproduced):

    1. seed every prompt with m0 leaves
    2. priority of a prompt = its largest value-only marginal gain (posterior mean, c = 0, lam = 0) per
       expected token
    3. expand the top prompt with its own selector; recompute only its priority (lazy heap)
    4. when every priority is 0 (all mixed, or nothing affordable), spend what is left round-robin

Allocation trades metric against metric [R]: it raises the mixed-outcome ratio but stops feeding prompts
that are already mixed. The :class:`EmptyLakeDetector` flags prompts the policy cannot solve (k = 0 over many
root samples) so a trainer can report or skip them instead of resampling forever.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from agentmill.lm.fork import ForkableLM, StopSpec
from agentmill.methods.tree_rollouts.config import AllocatorConfig, TreeConfig
from agentmill.methods.tree_rollouts.sampler import RolloutLog, TreeGrower, Verifier
from agentmill.methods.tree_rollouts.selectors import Selector
from agentmill.methods.tree_rollouts.tree import BranchPolicy, RolloutTree


def build_forest(prompts: Sequence[Any], lm: ForkableLM, verifier: Verifier, selector: Selector,
                 allocator: AllocatorConfig, cfg: TreeConfig, *, run_seed: int, branch_policy: BranchPolicy | None = None,
                 stop: StopSpec = StopSpec(), oracles: Sequence[Callable[[np.ndarray], float]] | None = None,
                 prompt_keys: Sequence[str] | None = None, log: RolloutLog | None = None) -> list[RolloutTree]:
    """One tree per prompt under a total budget of ``allocator.budget_per_prompt * len(prompts)`` generated
    tokens. Tree i uses RNG key (run_seed, i)."""
    n = len(prompts)
    total = allocator.budget_per_prompt * n
    keys = list(prompt_keys) if prompt_keys is not None else [str(i) for i in range(n)]
    if allocator.kind == "uniform":
        tcfg = _with_budget(cfg, allocator.budget_per_prompt, cap=None)
        trees = []
        for i, q in enumerate(prompts):
            g = TreeGrower(q, lm, verifier, selector, tcfg, tree_key=(run_seed, i), prompt_key=keys[i],
                           branch_policy=branch_policy, stop=stop, oracle=oracles[i] if oracles else None, log=log)
            g.seed()
            while g.step():
                pass
            trees.append(g.finish())
        return trees
    # ABA-lite: trees draw from one shared pool; each is capped at 4x the uniform share of expansions.
    tcfg = _with_budget(cfg, None, cap=max(1, 4 * allocator.budget_per_prompt // 8))
    growers = [TreeGrower(q, lm, verifier, selector, tcfg, tree_key=(run_seed, i), prompt_key=keys[i],
                          branch_policy=branch_policy, stop=stop, oracle=oracles[i] if oracles else None, log=log)
               for i, q in enumerate(prompts)]
    spent = sum(g.seed() for g in growers)
    heap = [(-g.value_priority(total - spent), i) for i, g in enumerate(growers)]
    heapq.heapify(heap)
    while heap and total - spent >= 1:
        neg, i = heapq.heappop(heap)
        if -neg <= 0:
            heapq.heappush(heap, (neg, i))
            break
        cur = growers[i].value_priority(total - spent)
        if cur < -neg - 1e-15:   # stale entry: push back with its current priority (lazy heap)
            heapq.heappush(heap, (-cur, i))
            continue
        used = growers[i].step(total - spent)
        spent += used
        if used:
            heapq.heappush(heap, (-growers[i].value_priority(total - spent), i))
    # 4. leftover budget: round-robin through the within-prompt selectors
    progressed = True
    while total - spent >= 1 and progressed:
        progressed = False
        for g in growers:
            if total - spent < 1:
                break
            used = g.step(total - spent)
            spent += used
            progressed = progressed or used > 0
    return [g.finish() for g in growers]


def _with_budget(cfg: TreeConfig, budget: int | None, cap: int | None) -> TreeConfig:
    """The per-tree config: its own token budget (uniform), or none (ABA-lite: the forest's pool limits it)."""
    from dataclasses import replace

    if budget is not None:
        return replace(cfg, budget_tokens=budget)
    return replace(cfg, budget_tokens=None, max_leaves=cfg.max_leaves or 10**9, max_expansions=cap)


@dataclass
class EmptyLakeDetector:
    """Per-prompt root-level history across epochs (leaves under failed prefixes are not evidence about p_root);
    old counts decay by ``decay`` per visit. Flags a prompt when k = 0, n >= 8 and the Jeffreys upper 95% bound
    on p_root is below ``p_floor`` ("empty lake"); symmetrically k = n ("full lake")."""

    p_floor: float = 0.02
    decay: float = 0.9
    min_n: float = 8.0
    history: dict[str, list[float]] = field(default_factory=dict)

    def observe(self, prompt_key: str, root_successes: int, root_samples: int) -> None:
        if not 0 <= root_successes <= root_samples:
            raise ValueError(f"need 0 <= k <= n, got k={root_successes}, n={root_samples}")
        k, n = self.history.get(prompt_key, [0.0, 0.0])
        self.history[prompt_key] = [self.decay * k + root_successes, self.decay * n + root_samples]

    def status(self, prompt_key: str) -> str:
        """"empty", "full" or "ok"."""
        from scipy.stats import beta

        k, n = self.history.get(prompt_key, [0.0, 0.0])
        if n < self.min_n:
            return "ok"
        if k == 0 and beta.ppf(0.95, 0.5, n + 0.5) < self.p_floor:
            return "empty"
        if k == n and beta.ppf(0.05, n + 0.5, 0.5) > 1 - self.p_floor:
            return "full"
        return "ok"

    def flagged(self) -> list[str]:
        return [key for key in self.history if self.status(key) != "ok"]
