"""The composition's adapter: InfoTree rollouts over a text environment → G2PO's step table → per-step advantages
(G2PO-style graph credit, optionally plus the progress advantage β·log(π/π_ref)) for one GRPO step.

Read top to bottom it is one GRPO step:

1. :class:`EnvForker` — an environment-step ``ForkableLM`` (``agentmill.lm.fork``'s protocol): one "token" is one
   environment action. A branch from depth ``t`` of a leaf restores the environment state after that leaf's first
   ``t`` actions (deterministic replay; the replayed steps are counted as ``recompute`` tokens, never as generated
   ones) and samples a fresh continuation from the policy. InfoTree's own sampler (``tree_rollouts.build_tree``,
   UUCB selector) decides where to branch; the ``independent`` selector gives the baseline of i.i.d. rollouts with
   the same generated-token budget, through the same code path.
2. :func:`tree_to_table` — every leaf of a tree becomes one trajectory of one GRPO group (the tree). Leaves that share
   a prefix share its rows' observations, so the shared prefix is the same state node in G2PO's graph: the state
   graph arises by construction, and states revisited along different branches (loops in KeyDoor) merge too.
3. :func:`step_advantages` — GRPO (outcome only), G2PO-style (episode + graph term) and, with ``beta > 0``, the
   progress advantage β·[log π(a|s) − log π_ref(a|s)] over the admissible set added per step (E173's candidate
   form, ``progress_advantage.core.candidate_step_score``).
4. :func:`tree_rollout_func` — the TRL face: a ``rollout_func`` whose groups are trees (its ``agentmill_steps`` field
   is what G2PO's TRL adapter, ``g2po.adapters.trl_adapter.G2POGRPOTrainer``, reads), so the existing trainer
   computes graph credit over the tree's leaves.

Nothing here changes a method: it only connects their public faces (the methods never import each other).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agentmill.core.seeding import derive_seed
from agentmill.core.types import END_CONTINUES, END_TERMINATED, END_TRUNCATED, LabelTable, StepTable
from agentmill.envs.base import ORACLE_KEY
from agentmill.lm.fork import BranchRequest, Continuation, TokenCounters, stream_rng
from agentmill.methods.g2po import G2POConfig, build_state_graph, g2po_advantages, grpo_advantages
from agentmill.methods.g2po.config import GRPOConfig
from agentmill.methods.g2po.keys import FieldsKey, StateKeyFn
from agentmill.methods.progress_advantage.core import candidate_step_score
from agentmill.methods.tree_rollouts import TreeConfig, TreeGrower, build_tree, make_selector
from agentmill.methods.tree_rollouts.tree import Reward, RolloutTree, every_k

KEY = FieldsKey(("description", "inventory"))
"""State key of KeyDoor and TextWorld: (description, inventory), the key E165 uses for both (docs/methods/g2po.md)."""

INFORMATIVE_TOL = 1e-9
"""A step is informative when |advantage| > this [R]: G2PO gives exact zeros for constant groups, but a TD error on
a shared prefix can be a floating-point residue (~1e-16) rather than signal."""


def _strip(info: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in info.items() if k != ORACLE_KEY}


def action_distribution(policy: Any, obs: str, info: Mapping[str, Any]) -> tuple[tuple[str, ...], np.ndarray]:
    """(admissible commands, π(·|s)) of a numpy policy: one with ``probs(info)`` (the ε-oracle behaviour policy, which
    reads the oracle) or ``log_probs(obs, info)`` (``envs.policies`` softmax policies, which never see it)."""
    if callable(getattr(policy, "probs", None)):
        d = policy.probs(info)
        cands = tuple(d)
        p = np.array([d[c] for c in cands], dtype=np.float64)
    else:
        seen = info if getattr(policy, "uses_oracle", False) else _strip(info)
        cands = tuple(seen.get("admissible_commands") or ())
        p = np.exp(policy.log_probs(obs, seen, cands))
    return cands, p / p.sum()


@dataclass
class _EnvTree:
    task: Any
    env: Any
    key: tuple[int, ...]
    rows: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    """expansion id (= the leaf id: one leaf per expansion) → the leaf's step rows, shared prefix included."""
    outcome: dict[tuple[int, ...], bool] = field(default_factory=dict)
    counters: TokenCounters = field(default_factory=TokenCounters)


class EnvForker:
    """A ``ForkableLM`` whose tokens are environment actions (see the module docstring).

    ``env_factory(task)`` makes the task's environment (KeyDoor, TextWorld, possibly under ``UniqueObsWrapper``);
    ``policy`` is a numpy policy (:func:`action_distribution`). Every request samples from
    ``stream_rng(tree_key, expansion_id)``, so the ``independent`` arm's first leaves equal the tree's seed leaves
    (common random numbers). An environment is reset with a seed derived from (tree key, expansion id): under
    ``UniqueObsWrapper`` each generated step gets a fresh tag, while a branch keeps the observations its prefix
    already showed (they are the parent's recorded rows: one state, seen once).
    """

    supports_prefix_sharing = True

    def __init__(self, env_factory: Callable[[Any], Any], policy: Any) -> None:
        self.env_factory, self.policy = env_factory, policy
        self.vocab: dict[str, int] = {}
        self.actions: list[str] = []
        self.current: _EnvTree | None = None

    def token(self, action: str) -> int:
        if action not in self.vocab:
            self.vocab[action] = len(self.actions)
            self.actions.append(action)
        return self.vocab[action]

    def decode(self, ids: Sequence[int]) -> str:
        return " ; ".join(self.actions[int(i)] for i in ids)

    def start_tree(self, prompt: Any, tree_key: tuple[int, ...]) -> _EnvTree:
        self.current = _EnvTree(prompt, self.env_factory(prompt), tuple(int(k) for k in tree_key))
        return self.current

    def end_tree(self, tree: _EnvTree) -> TokenCounters:
        tree.env.close()
        return tree.counters

    def verify(self, tokens: np.ndarray, text: str = "") -> Reward:
        """The verifier ``build_tree`` needs: 1 if the leaf's episode was won, else 0."""
        if self.current is None:
            raise RuntimeError("EnvForker.verify called outside a tree")
        return Reward(float(self.current.outcome[tuple(int(t) for t in tokens)]))

    def expand(self, tree: _EnvTree, requests: Sequence[BranchRequest], temperature: float = 1.0
               ) -> list[Continuation]:
        if temperature != 1.0:
            raise ValueError("EnvForker samples the policy's own distribution: temperature must be 1.0")
        return [self._one(tree, req) for req in requests]

    def _one(self, tree: _EnvTree, req: BranchRequest) -> Continuation:
        env = tree.env
        obs, info = env.reset(seed=derive_seed("tree-credit-env", *tree.key, req.expansion_id))
        prefix = tree.rows[req.parent_leaf][: req.pos] if req.parent_leaf is not None else []
        for row in prefix:  # restore the branch state by replaying the parent's actions (not generated tokens)
            env.step(row["action"])
        if prefix:
            tree.counters.recompute_tokens += len(prefix)
            tree.counters.forks += 1
            obs, info = prefix[-1]["next_obs"], prefix[-1]["next_info"]
        rng = stream_rng(tree.key, req.expansion_id)
        rows = [dict(r) for r in prefix]
        ids: list[int] = []
        lps: list[float] = []
        ents: list[float] = []
        finish, won = "length", False
        for _ in range(req.max_new_tokens):
            cands, p = action_distribution(self.policy, obs, info)
            k = int(min(np.searchsorted(np.cumsum(p), rng.random(), side="right"), len(p) - 1))
            action = cands[k]
            nobs, reward, terminated, truncated, ninfo = env.step(action)
            done = bool(terminated or truncated)
            rows.append({"t": len(rows), "obs": obs, "info": info, "action": action, "candidates": cands,
                         "reward": float(reward), "next_obs": nobs, "next_info": ninfo,
                         "end": END_TERMINATED if terminated else (END_TRUNCATED if truncated else END_CONTINUES),
                         "logp": float(np.log(p[k]))})
            ids.append(self.token(action))
            lps.append(float(np.log(p[k])))
            nz = p[p > 0]
            ents.append(float(-(nz * np.log(nz)).sum()))
            obs, info = nobs, ninfo
            if done:
                finish, won = "stop", bool(ninfo.get("won", False))
                break
        if rows and rows[-1]["end"] == END_CONTINUES:  # cut by the token budget: a truncated episode
            rows[-1]["end"] = END_TRUNCATED
        tree.rows[req.expansion_id] = rows
        tree.counters.gen_tokens += len(ids)
        full = tuple(int(r) for r in req.prefix_ids.tolist()) + tuple(ids)
        tree.outcome[full] = won
        return Continuation(np.asarray(ids, np.int32), np.asarray(lps, np.float32), np.asarray(ents, np.float32),
                            ents[0] if ents else math.nan, finish, "")


# ------------------------------------------------------------------------------------------ 1. rollouts


@dataclass(frozen=True)
class RolloutSpec:
    """How one group is sampled. Defaults [R]: InfoTree's UUCB defaults (``UUCBConfig``), 2 seed rollouts, a branch
    point at every environment step."""

    budget: int = 160
    """Generated environment steps (actions) per group: equal for the tree and the independent arm."""
    max_steps: int = 30
    """Longest episode (KeyDoor's default ``max_steps``)."""
    seed_rollouts: int = 2
    """m0 of InfoTree's sampler: independent root samples before any branching."""
    selector: str = "uucb"
    """``"uucb"`` (InfoTree), or ``"independent"`` (the baseline: i.i.d. rollouts)."""


def grow_group(forker: EnvForker, task: Any, spec: RolloutSpec, tree_key: tuple[int, ...]) -> RolloutTree:
    """One group: a tree (``spec.selector="uucb"``) or independent rollouts (``"independent"``) grown by InfoTree's
    sampler, then topped up to exactly ``spec.budget`` generated actions.

    InfoTree's sampler stops once no candidate's expected cost (mean leaf length minus its depth) fits the remaining
    budget, which leaves root-only sampling ~7 % short of the budget while deep branches fill it. So that both arms
    spend exactly the same generated actions, the rest is spent on fresh root rollouts cut at the budget (truncated
    episodes, as a budget-cut branch is), added with the tree's public ``add_leaf``.
    """
    cfg = TreeConfig(budget_tokens=spec.budget, seed_rollouts=spec.seed_rollouts, max_new_tokens=spec.max_steps,
                     max_branch_points_per_leaf=spec.max_steps, max_expansions=spec.budget)
    grower = TreeGrower(task, forker, forker.verify, make_selector(spec.selector), cfg, tree_key=tree_key,
                        prompt_key=str(getattr(task, "task_id", task)), branch_policy=every_k(1))
    grower.seed()
    while grower.step():
        pass
    handle, tree = grower.handle, grower.tree
    next_id = grower.next_id
    while handle.counters.gen_tokens < spec.budget:
        cap = min(spec.max_steps, spec.budget - handle.counters.gen_tokens)
        req = BranchRequest(None, 0, np.zeros(0, np.int32), next_id, cap)
        next_id += 1
        (c,) = forker.expand(handle, [req])
        tree.add_leaf(c.token_ids, new_from=0, parent_leaf=None, logprobs=c.logprobs, entropies=c.entropies,
                      branch_entropy=c.branch_entropy, reward=forker.verify(c.token_ids), finish=c.finish,
                      gen_tokens=len(c.token_ids))
    return grower.finish()


# ------------------------------------------------------------------------------------------ 2. the step table


@dataclass(frozen=True)
class GroupRows:
    """The step table of some groups plus what the claims read beside it (all (S,) in table row order)."""

    table: StepTable
    labels: LabelTable
    generated: np.ndarray
    """bool: the row's action was sampled by this leaf (False: a copy of a shared prefix row)."""
    logp: np.ndarray
    """log π_behaviour(a|s) of the row's action when it was sampled."""
    gen_tokens: int
    """Environment actions generated for these groups (the budget actually spent)."""


def tree_to_table(tree: RolloutTree, handle_rows: Mapping[int, list[dict[str, Any]]], group_id: str) -> GroupRows:
    """One tree (or independent group) → G2PO's step table: one trajectory per leaf, prefix rows repeated in every leaf
    through them (as each leaf is one completion of a GRPO group). ``handle_rows`` is ``EnvForker.current.rows``."""
    cols: dict[str, list[Any]] = {n: [] for n in ("group_id", "traj_id", "t", "obs", "next_obs", "info",
                                                  "next_info", "action", "candidates", "reward", "end", "success")}
    before: list[int] = []
    after: list[int] = []
    generated: list[bool] = []
    logp: list[float] = []
    for leaf in tree.leaves:
        rows = handle_rows[leaf.id]
        won = bool(leaf.success)
        for t, row in enumerate(rows):
            cols["group_id"].append(group_id)
            cols["traj_id"].append(f"leaf{leaf.id}")
            cols["t"].append(t)
            for name in ("obs", "next_obs", "action", "candidates", "reward", "end"):
                cols[name].append(row[name])
            cols["info"].append(_strip(row["info"]))
            cols["next_info"].append(_strip(row["next_info"]))
            cols["success"].append(won)
            before.append(_distance(row["info"]))
            after.append(_distance(row["next_info"]))
            generated.append(t >= leaf.new_from)
            logp.append(row["logp"])
    gen = int(tree.counters["gen_tokens"]) if getattr(tree, "counters", None) else int(sum(generated))
    return GroupRows(StepTable(**cols), LabelTable.from_distances(before, after), np.asarray(generated),
                     np.asarray(logp), gen)


def _distance(info: Mapping[str, Any]) -> int:
    d = (info.get(ORACLE_KEY) or {}).get("distance_to_goal")
    return -1 if d is None else int(d)


def concat_groups(parts: Sequence[GroupRows]) -> GroupRows:
    return GroupRows(StepTable.concat([p.table for p in parts]), LabelTable.concat([p.labels for p in parts]),
                     np.concatenate([p.generated for p in parts]), np.concatenate([p.logp for p in parts]),
                     int(sum(p.gen_tokens for p in parts)))


def sample_groups(env_factory: Callable[[Any], Any], policy: Any, tasks: Sequence[Any], spec: RolloutSpec,
                  seed: int) -> GroupRows:
    """One group per task (tree or independent per ``spec.selector``), group k keyed by (seed, k): both arms of a
    seed draw from the same random streams."""
    forker = EnvForker(env_factory, policy)
    parts = []
    for k, task in enumerate(tasks):
        tree = grow_group(forker, task, spec, tree_key=(int(seed), k))
        parts.append(tree_to_table(tree, forker.current.rows, f"s{seed}/g{k}"))  # type: ignore[union-attr]
    return concat_groups(parts)


# ------------------------------------------------------------------------------------------ 3. advantages


@dataclass(frozen=True)
class CreditConfig:
    """Which credit a GRPO step gets. Defaults: the methods' own (``G2POConfig()``, β = 1 as E173's ``PAConfig``)."""

    estimator: str = "g2po"
    """``"g2po"`` (episode + graph term, G2PO-style) or ``"grpo"`` (outcome only)."""
    beta: float = 0.0
    """Weight of the progress advantage β·log(π/π_ref) added per step; 0 = off. Needs ``policy`` and ``reference``."""
    g2po: G2POConfig = G2POConfig()
    grpo: GRPOConfig = GRPOConfig()


def progress_terms(table: StepTable, policy: Any, reference: Any, beta: float) -> np.ndarray:
    """β·[log π(a|s) − log π_ref(a|s)] per row, each normalised over the row's admissible set (E173's candidate
    form). Shape (S,)."""
    out = np.empty(len(table))
    memo: dict[tuple, float] = {}  # a tree repeats its prefix rows in every leaf through them: score each once
    for i in range(len(table)):
        obs, info, cands, action = table.obs[i], table.info[i], table.candidates[i], table.action[i]
        key = (obs, str(info.get("task_id")), info.get("description"), info.get("inventory"),
               str(info.get("objective")), cands, action)
        if key not in memo:
            lp = policy.log_probs(obs, info, cands)
            lr = reference.log_probs(obs, info, cands)
            memo[key] = candidate_step_score(lp, lr, cands.index(action), beta=beta)
        out[i] = memo[key]
    return out


def step_advantages(table: StepTable, cfg: CreditConfig = CreditConfig(), *, key_fn: StateKeyFn = KEY,
                    policy: Any = None, reference: Any = None) -> dict[str, np.ndarray]:
    """Per-step advantages of one GRPO step, (S,) float64 each: ``"advantages"`` (what the update uses), and its
    parts ``"episode"``, ``"graph"`` (0 under GRPO) and ``"progress"`` (0 when β = 0)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the low-merge-rate warning is expected under UniqueObs
        if cfg.estimator == "g2po":
            res = g2po_advantages(table, key_fn, cfg.g2po)
            episode, graph = res.episode, res.step
        elif cfg.estimator == "grpo":
            res = grpo_advantages(table, cfg.grpo)
            episode, graph = res.episode, np.zeros(len(table))
        else:
            raise ValueError(f"CreditConfig.estimator must be 'g2po' or 'grpo', got {cfg.estimator!r}")
    adv = np.array(res.advantages, dtype=np.float64)
    progress = np.zeros(len(table))
    if cfg.beta > 0:
        if policy is None or reference is None:
            raise ValueError("the progress advantage (beta > 0) needs policy and reference")
        progress = progress_terms(table, policy, reference, cfg.beta)
        adv = adv + progress
    return {"advantages": adv, "episode": np.asarray(episode, dtype=np.float64), "graph": np.asarray(graph),
            "progress": progress}


def merge_mask(table: StepTable, key_fn: StateKeyFn = KEY) -> np.ndarray:
    """True for rows whose state node (group, key) has >= 2 visits in the group's graph. Shape (S,) bool."""
    g = build_state_graph(table, key_fn, gamma=G2POConfig().gamma)
    return g.node_n[g.node_of_row] >= 2


# ------------------------------------------------------------------------------------------ 4. the TRL face


def tree_rollout_func(env_factory: Callable[[str], Any], policy_factory: Callable[[Any], Any], *,
                      max_steps: int = 30, budget: int = 160, seed: int = 0,
                      render: Callable[[str, Mapping[str, Any], int], str] | None = None
                      ) -> Callable[[list, Any], dict[str, list]]:
    """A TRL ``rollout_func(prompts, trainer)`` whose groups are InfoTree trees of environment episodes.

    TRL passes ``num_generations`` consecutive copies of each prompt (the tree_rollouts README, deviation 10); the
    copies of one prompt become the first ``num_generations`` leaves of one tree grown with ``max_leaves =
    num_generations`` (and at most ``budget`` generated actions). ``policy_factory(trainer)`` returns the acting
    policy (a numpy policy with ``probs``/``log_probs``; an LM-backed candidate policy works the same way).
    Each completion's tokens are its actions rendered as text (``render(obs, info, turn)`` for the feedback, default
    none), ``env_mask`` marks action tokens, and ``agentmill_steps`` carries the step rows in exactly the layout
    ``g2po.adapters.trl_adapter.steps_to_table`` reads, so ``G2POGRPOTrainer`` computes graph credit over the tree.
    """

    def rollout_func(prompts: list, trainer: Any) -> dict[str, list]:
        if getattr(trainer.args, "use_vllm", False):
            raise ValueError("tree_rollout_func returns no sampling log-probs (TRL reads them only for vLLM's "
                             "importance-sampling correction): set use_vllm=False")
        tok = trainer.processing_class
        n_gen = int(trainer.num_generations)
        step_no = int(getattr(trainer.state, "global_step", 0))
        forker = EnvForker(env_factory, policy_factory(trainer))
        out: dict[str, list] = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": [],
                                "agentmill_steps": []}
        for g in range(0, len(prompts), n_gen):
            task = prompts[g]
            cfg = TreeConfig(budget_tokens=budget, max_leaves=n_gen, seed_rollouts=min(2, n_gen),
                             max_new_tokens=max_steps, max_branch_points_per_leaf=max_steps)
            tree = build_tree(task, forker, forker.verify, make_selector("uucb"), cfg,
                              tree_key=(derive_seed(seed, "trl-tree", step_no), g), prompt_key=str(task),
                              branch_policy=every_k(1))
            rows_of = forker.current.rows  # type: ignore[union-attr]
            leaves = list(tree.leaves)
            while len(leaves) < n_gen:  # a budget-exhausted tree repeats its last leaf (a zero-variance copy)
                leaves.append(leaves[-1])
            for leaf in leaves[:n_gen]:
                rows = rows_of[leaf.id]
                first_obs, first_info = rows[0]["obs"], _strip(rows[0]["info"])
                prompt_text = render(first_obs, first_info, 0) if render else first_obs
                completion: list[int] = []
                mask: list[int] = []
                steps = []
                for t, row in enumerate(rows):
                    ids = tok(row["action"] + "\n", add_special_tokens=False).input_ids
                    span = [len(completion), len(completion) + len(ids)]
                    completion += ids
                    mask += [1] * len(ids)
                    if render and row["end"] == END_CONTINUES:
                        fb = tok(render(row["next_obs"], _strip(row["next_info"]), t + 1),
                                 add_special_tokens=False).input_ids
                        completion += fb
                        mask += [0] * len(fb)
                    steps.append({"t": t, "obs": row["obs"], "info": _strip(row["info"]), "action": row["action"],
                                  "reward": row["reward"], "next_obs": row["next_obs"],
                                  "next_info": _strip(row["next_info"]), "span": span, "end": row["end"],
                                  "won": bool(row["next_info"].get("won", False))})
                out["prompt_ids"].append(tok(prompt_text, add_special_tokens=False).input_ids)
                out["completion_ids"].append(completion)
                out["logprobs"].append([0.0] * len(completion))
                out["env_mask"].append(mask)
                out["agentmill_steps"].append(steps)
        return out

    return rollout_func
