"""Growing one rollout tree under a token budget ([R], tree_rollouts README), and the rollout log.

    1. start the tree (one prompt prefill); sample m0 independent root continuations; verify; insert
    2. until the budget, the leaf cap or the expansion cap is reached:
       a. candidates = root + branch points of every leaf; drop those whose expected cost
          (mean leaf length - t) exceeds the remaining token budget
       b. choose a wave of b candidates; after each pick apply the virtual update
          (n += 1 along its path; F_a <- F_a (1 - mu_x); S_a <- S_a mu_x)
       c. fork every pick, decode the wave as one batch, verify each leaf, update counts incrementally
    3. stop when nothing is affordable; every expansion samples >= 1 token, so the loop cannot spin
"""

from __future__ import annotations

import functools
import json
import math
import os
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from agentmill.lm.fork import BranchRequest, ForkableLM, StopSpec, TokenCounters
from agentmill.methods.tree_rollouts.config import TreeConfig, UUCBConfig
from agentmill.methods.tree_rollouts.selectors import UUCB, CandidateView, Selector
from agentmill.methods.tree_rollouts.tree import BranchPolicy, Node, Reward, RolloutTree

Verifier = Callable[[np.ndarray, str], Reward]


class RolloutLog:
    """JSONL, one line per leaf, flushed per leaf and fsync'd per tree (nothing verified is lost)."""

    def __init__(self, path: str | Path, run_id: str = "") -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.run_id = run_id
        self._fh = open(self.path, "a", encoding="utf-8")

    def write(self, row: dict[str, Any]) -> None:
        self._fh.write(json.dumps({"run_id": self.run_id, **row}) + "\n")
        self._fh.flush()

    def sync(self) -> None:
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        self.sync()
        self._fh.close()

    def __enter__(self) -> "RolloutLog":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def safe_verify(verifier: Verifier, tokens: np.ndarray, text: str) -> Reward:
    """A verifier that raises makes the leaf unscorable instead of crashing the tree."""
    try:
        r = verifier(tokens, text)
    except Exception as e:  # noqa: BLE001 - any verifier failure is data, not a crash
        return Reward(None, f"verifier_error: {type(e).__name__}")
    return r if isinstance(r, Reward) else Reward(*r)


def _uucb_cfg(selector: Selector) -> UUCBConfig:
    return selector.cfg if isinstance(selector, UUCB) else UUCBConfig()


def build_view(tree: RolloutTree, cands: list[Node], cfg: UUCBConfig, pending: list[Node],
               oracle: Callable[[np.ndarray], float] | None = None) -> CandidateView:
    """Arrays for scoring ``cands``, with the virtual updates of the already-picked ``pending`` candidates."""
    C = len(cands)
    index = {id(nd): i for i, nd in enumerate(cands)}
    n_real = np.array([nd.n for nd in cands], dtype=np.float64)
    k = np.array([nd.k for nd in cands], dtype=np.float64)
    # Hierarchical posterior means, parents first (a candidate's parent candidate is shallower).
    mu = np.zeros(C)
    a0, b0 = cfg.prior
    by_id: dict[int, float] = {}
    for i in sorted(range(C), key=lambda j: cands[j].depth):  # stable, as argsort(kind="stable")
        nd = cands[i]
        parent = nd.cand_parent
        if parent is None or nd.depth == 0:
            m = (a0 + nd.k) / (a0 + b0 + nd.n)
        else:
            mp = by_id.get(id(parent))
            if mp is None:   # parent not among the affordable candidates: compute it on the fly
                mp = _posterior_mean(parent, cfg)
            m = (cfg.m * mp + nd.k) / (cfg.m + nd.n)
        mu[i] = by_id[id(nd)] = m
    # Groups: the root, plus branching nodes when beta > 0.
    groups = [tree.root] + ([nd for nd in tree.group_nodes()[1:]] if cfg.beta > 0 else [])
    gidx = {id(g): j for j, g in enumerate(groups)}
    w = np.array([1.0] + [cfg.beta] * (len(groups) - 1))
    F = np.array([tree.flags(g)[0] for g in groups])
    S = np.array([tree.flags(g)[1] for g in groups])
    anc = []
    if cfg.beta > 0:
        # the groups containing a node, nearest first: its own index (if it is a group) + its parent's chain; the
        # chains are memoised along the walk, so the trie above the candidates is climbed once, not per candidate
        chains: dict[int, list[int]] = {}
        for nd in cands:
            todo, up = [], nd
            while up is not None and id(up) not in chains:
                todo.append(up)
                up = up.parent
            chain = chains[id(up)] if up is not None else []
            for node in reversed(todo):
                j = gidx.get(id(node))
                if j is not None:
                    chain = [j, *chain]
                chains[id(node)] = chain
            anc.append(list(chains[id(nd)]))
    else:
        anc = [[0] for _ in cands]
    n = n_real.copy()
    N = float(tree.root.n)
    for nd in pending:   # virtual updates of this wave's earlier picks
        N += 1
        up = nd
        while up is not None:
            if id(up) in index:
                n[index[id(up)]] += 1
            up = up.cand_parent
        m = by_id.get(id(nd))
        if m is None:
            m = _posterior_mean(nd, cfg)
        for j in (anc[index[id(nd)]] if id(nd) in index else [0]):
            F[j] *= 1.0 - m
            S[j] *= m
    ent = np.array([0.0 if math.isnan(nd.next_entropy) else nd.next_entropy for nd in cands])
    depth = np.array([nd.depth for nd in cands], dtype=np.int64)
    op = np.array([oracle(tree.prefix(nd)) for nd in cands]) if oracle is not None else None
    return CandidateView(n, n_real, k, mu, ent, depth, N, anc, w, F, S, op)


def _posterior_mean(nd: Node, cfg: UUCBConfig) -> float:
    chain = []
    up = nd
    while up is not None:
        chain.append(up)
        up = up.cand_parent if up.depth > 0 else None
    a0, b0 = cfg.prior
    m = None
    for c in reversed(chain):
        m = (a0 + c.k) / (a0 + b0 + c.n) if m is None or c.depth == 0 else (cfg.m * m + c.k) / (cfg.m + c.n)
    return float(m)


def _pick(scores: np.ndarray, rng: np.random.Generator | Callable[[], np.random.Generator]) -> int:
    """Argmax; exact ties (within 1e-12) are broken by the expansion's RNG stream, never by list order.

    ``rng`` may be a zero-argument factory: the stream is then seeded only when there is a tie to break (seeding a
    generator per pick cost more than the scoring; an untouched stream draws nothing either way)."""
    top = np.flatnonzero(scores >= scores.max() - 1e-12)
    if len(top) == 1:
        return int(top[0])
    gen = rng if isinstance(rng, np.random.Generator) else rng()
    return int(top[gen.integers(len(top))])


class TreeGrower:
    """One prompt's tree, grown a wave at a time (so an allocator can interleave prompts); :func:`build_tree`
    is the single-prompt loop over it."""

    def __init__(self, prompt: Any, lm: ForkableLM, verifier: Verifier, selector: Selector, cfg: TreeConfig, *,
                 tree_key: tuple[int, ...], prompt_key: str = "", branch_policy: BranchPolicy | None = None,
                 stop: StopSpec = StopSpec(), oracle: Callable[[np.ndarray], float] | None = None,
                 log: RolloutLog | None = None) -> None:
        if cfg.budget_tokens is not None and cfg.budget_tokens < cfg.seed_rollouts:
            raise ValueError(f"budget_tokens={cfg.budget_tokens} cannot pay for the {cfg.seed_rollouts} seed "
                             "rollouts")
        self.lm, self.verifier, self.selector, self.cfg = lm, verifier, selector, cfg
        self.tree_key, self.stop, self.oracle, self.log = tuple(tree_key), stop, oracle, log
        self.ucfg = _uucb_cfg(selector)
        # UUCB's score is the sum of the terms the leaf log records: compute them once per pick, unless a subclass
        # overrides either method (NC8's permuted-entropy UUCB draws from its RNG in every terms() call)
        kind = type(selector)
        self._fused_terms = (isinstance(selector, UUCB) and kind.terms is UUCB.terms and kind.scores is UUCB.scores)
        self.tree = RolloutTree(prompt_key, branch_policy=branch_policy,
                                max_branch_points_per_leaf=cfg.max_branch_points_per_leaf,
                                decode=getattr(lm, "decode", None), reward_threshold=cfg.reward_threshold)
        self.handle = lm.start_tree(prompt, self.tree_key)
        self.t0 = time.perf_counter()
        self.gen_used = self.expansions = self.next_id = 0
        self.select_seconds = 0.0
        self.cap = cfg.expansion_cap()
        self.done = False

    # ------------------------------------------------------------------------------------------- budget
    def remaining(self, budget: float | None = None) -> float:
        """Tokens this tree may still spend: its own budget, or ``budget`` when an allocator passes one."""
        if budget is not None:
            return budget
        return math.inf if self.cfg.budget_tokens is None else self.cfg.budget_tokens - self.gen_used

    def can_grow(self) -> bool:
        if self.done or self.expansions >= self.cap:
            return False
        return self.cfg.max_leaves is None or len(self.tree.leaves) < self.cfg.max_leaves

    def expected_cost(self, nd: Node) -> float:
        """Mean leaf length minus the prefix (at least one token); a prefix at the length cap is unaffordable."""
        if nd.depth >= self.cfg.max_new_tokens:
            return math.inf
        return max(self.tree.mean_leaf_length() - nd.depth, 1.0)

    # -------------------------------------------------------------------------------------------- steps
    def seed(self) -> int:
        """Step 1: m0 independent root samples. Returns generated tokens."""
        m0 = self.cfg.seed_rollouts if self.cfg.max_leaves is None else min(self.cfg.seed_rollouts, self.cfg.max_leaves)
        return self._run_wave([self.tree.root] * m0, [{} for _ in range(m0)], [self.remaining()] * m0)

    def step(self, budget: float | None = None) -> int:
        """Step 2: choose and decode one wave. Returns generated tokens (0 = nothing affordable: stop)."""
        remaining = self.remaining(budget)
        if not self.can_grow() or remaining < 1:
            return 0
        pool = [self.tree.root] if self.selector.root_only else self.tree.candidates
        room = self.cfg.wave if self.cfg.max_leaves is None else min(self.cfg.wave, self.cfg.max_leaves - len(self.tree.leaves))
        picks: list[Node] = []
        terms: list[dict[str, float]] = []
        caps: list[float] = []
        reserved = 0.0
        ts = time.perf_counter()
        while len(picks) < room:
            cands = [nd for nd in pool if self.expected_cost(nd) + reserved <= remaining]
            if not cands:
                break

            view = build_view(self.tree, cands, self.ucfg, picks, self.oracle)
            if self._fused_terms:
                t = self.selector.terms(view)
                scores = UUCB.combine(t)
            else:
                scores = self.selector.scores(view)
            i = _pick(scores, functools.partial(np.random.default_rng, [*self.tree_key, self.next_id + len(picks), 7]))
            picks.append(cands[i])
            caps.append(self.expected_cost(cands[i]))
            reserved += caps[-1]
            if isinstance(self.selector, UUCB):
                if not self._fused_terms:
                    t = self.selector.terms(view)
                terms.append({k: round(float(v[i]), 6) for k, v in t.items()})
            else:
                terms.append({"score": round(float(scores[i]), 6)})
        self.select_seconds += time.perf_counter() - ts
        if not picks:
            self.done = True
            return 0
        # Token caps: each pick's expected cost plus an equal share of the slack, so a wave never spends more
        # than the remaining budget (with b = 1 the cap is simply the remaining budget).
        slack = (remaining - reserved) / len(picks) if math.isfinite(remaining) else math.inf
        return self._run_wave(picks, terms, [c + slack for c in caps])

    def value_priority(self, budget: float | None = None) -> float:
        """ABA-lite priority: the largest value-only marginal gain (posterior mean, c = 0, lam = 0) per expected
        token over affordable candidates; 0 when nothing is affordable or every group is already mixed."""
        remaining = self.remaining(budget)
        if not self.can_grow() or remaining < 1:
            return 0.0
        pool = [self.tree.root] if self.selector.root_only else self.tree.candidates
        cands = [nd for nd in pool if self.expected_cost(nd) <= remaining]
        if not cands:
            return 0.0
        view = build_view(self.tree, cands, self.ucfg, [], None)
        gain = view.group_w[0] * (view.group_F[0] * view.mu + view.group_S[0] * (1 - view.mu))
        return float(np.max(gain / np.array([self.expected_cost(nd) for nd in cands])))

    def finish(self) -> RolloutTree:
        counters: TokenCounters = self.lm.end_tree(self.handle)
        self.tree.counters = {**counters.to_dict(), "expansions": self.expansions,
                              "select_seconds": self.select_seconds}
        if self.log is not None:
            self.log.sync()
        return self.tree

    def _run_wave(self, picks: list[Node], terms: list[dict[str, float]], caps: list[float]) -> int:
        """Decode one wave. ``caps[j]``: tokens pick j may generate at most (its share of the remaining budget)."""
        reqs = []
        for nd, cap in zip(picks, caps):
            # max_new_tokens caps the whole completion, shared prefix included, as for an independent sample.
            max_new = int(min(self.cfg.max_new_tokens - nd.depth, max(1, cap)))
            reqs.append(BranchRequest(nd.fork_leaf if nd.depth else None, nd.depth, self.tree.prefix(nd),
                                      self.next_id, max_new, self.stop))
            self.next_id += 1
        conts = self.lm.expand(self.handle, reqs, self.cfg.temperature)
        used = 0
        for req, cont, term in zip(reqs, conts, terms):
            full = np.concatenate([req.prefix_ids.astype(np.int32), cont.token_ids])
            text = self.lm.decode(full) if hasattr(self.lm, "decode") else ""
            reward = safe_verify(self.verifier, full, text)
            gen = len(cont.token_ids) + int(cont.finish == "eos")
            used += gen
            self.expansions += 1
            leaf = self.tree.add_leaf(full, new_from=req.pos, parent_leaf=req.parent_leaf, logprobs=cont.logprobs,
                                      entropies=cont.entropies, branch_entropy=cont.branch_entropy, reward=reward,
                                      finish=cont.finish, text=text, gen_tokens=gen, uucb_terms=term,
                                      eos_logprob=cont.eos_logprob)
            if self.log is not None:
                self.log.write({"prompt_id": self.tree.prompt_key, "tree_id": "-".join(map(str, self.tree_key)),
                                "leaf_id": leaf.id, "parent_leaf": req.parent_leaf, "branch_pos": req.pos,
                                "depth": req.pos, "selector": self.selector.name, "completion_ids": full.tolist(),
                                "text": text[:2000], "logprobs": np.round(cont.logprobs, 4).tolist(),
                                "entropies": np.round(cont.entropies, 4).tolist(), "reward": reward.value,
                                "reward_reason": reward.reason, "gen_tokens": gen, "uucb_terms": term,
                                "rng_key": [*self.tree_key, req.expansion_id],
                                "t_wall": round(time.perf_counter() - self.t0, 4)})
        self.gen_used += used
        return max(used, 1)


def build_tree(prompt: Any, lm: ForkableLM, verifier: Verifier, selector: Selector, cfg: TreeConfig, *,
               tree_key: tuple[int, ...], prompt_key: str = "", branch_policy: BranchPolicy | None = None,
               stop: StopSpec = StopSpec(), oracle: Callable[[np.ndarray], float] | None = None,
               log: RolloutLog | None = None) -> RolloutTree:
    """Grow one tree for ``prompt`` under ``cfg``'s budget (see the module docstring). ``tree.counters`` holds
    the backend's token counters plus the expansion count and selector time."""
    g = TreeGrower(prompt, lm, verifier, selector, cfg, tree_key=tree_key, prompt_key=prompt_key,
                   branch_policy=branch_policy, stop=stop, oracle=oracle, log=log)
    g.seed()
    while g.step():
        pass
    return g.finish()


def sample_independent(prompt: Any, lm: ForkableLM, verifier: Verifier, n: int, *, tree_key: tuple[int, ...],
                       max_new_tokens: int = 48, temperature: float = 1.0, batch: int = 8,
                       stop: StopSpec = StopSpec()) -> list[tuple[np.ndarray, Reward]]:
    """The standalone independent sampler (no tree bookkeeping): n root samples with expansion ids 0..n-1, in
    batches. With the same keys it must give the same leaves as the ``independent`` selector (control NC4)."""
    handle = lm.start_tree(prompt, tree_key)
    out = []
    for start in range(0, n, batch):
        reqs = [BranchRequest(None, 0, np.zeros(0, np.int32), i, max_new_tokens, stop)
                for i in range(start, min(n, start + batch))]
        for cont in lm.expand(handle, reqs, temperature):
            text = lm.decode(cont.token_ids) if hasattr(lm, "decode") else ""
            out.append((cont.token_ids, safe_verify(verifier, cont.token_ids, text)))
    lm.end_tree(handle)
    return out


def tree_metrics(trees: Sequence[RolloutTree]) -> dict[str, float]:
    """Pooled signal metrics of a forest (keys defined in the tree_rollouts README). ``nz_leaves_per_1k``: leaves in
    mixed root groups per 1 000 generated tokens; ``nz_token_frac``: distinct tokens (trie nodes) whose subtree
    advantage is non-zero, per generated token; ``mixed_ratio``: share of prompts whose root group is mixed."""
    from agentmill.methods.tree_rollouts.advantages import node_advantages

    gen = sum(t.counters["gen_tokens"] for t in trees)
    nz_leaves = sum(len(t.scorable()) for t in trees if t.is_mixed())
    nz_tokens = 0
    for t in trees:
        if t.is_mixed():
            adv = node_advantages(t)
            nz_tokens += int(sum(1 for nid, a in adv.items() if nid != t.root.id and abs(a) > 1e-9))
    leaves = [lf for t in trees for lf in t.scorable()]
    return {
        "gen_tokens": float(gen),
        "forward_tokens": float(sum(t.counters["forward_tokens"] for t in trees)),
        "leaves": float(sum(len(t.leaves) for t in trees)),
        "nz_leaves": float(nz_leaves),
        "nz_tokens": float(nz_tokens),
        "nz_leaves_per_1k": 1000.0 * nz_leaves / gen if gen else 0.0,
        "nz_token_frac": nz_tokens / gen if gen else 0.0,
        "mixed_ratio": float(np.mean([t.is_mixed() for t in trees])) if trees else 0.0,
        "leaf_success_rate": float(np.mean([lf.success for lf in leaves])) if leaves else 0.0,
        "depth_mean": float(np.mean([lf.new_from for lf in leaves])) if leaves else 0.0,
    }
