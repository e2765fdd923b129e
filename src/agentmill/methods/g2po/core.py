"""GRPO, GiGPO and G2PO-style (reconstructed) step advantages over one ``StepTable`` (g2po README, The estimator).

All three share the same table, the same episode term and the same vectorised bookkeeping, so a comparison between
them (in ``experiments/``) differs only in the step term:

- GRPO: no step term; every step of trajectory i gets the group-relative episode score.
- GiGPO: the step's discounted return relative to the other visits of the same observation (anchor group).
- G2PO-style (reconstructed): the TD error of the step's edge in the merged state graph, standardised over the
  whole group graph. No public code exists for G2PO (arXiv 2606.22995); see README.md for the deviations.

Shapes: S = rows of the table. Every returned array is float64 (S,), in table row order.
"""

from __future__ import annotations

import time
import warnings

import numpy as np

from agentmill.core.types import AdvantageResult, StepTable
from agentmill.methods.g2po.config import G2POConfig, GiGPOConfig, GRPOConfig
from agentmill.methods.g2po.graph import build_state_graph, key_codes
from agentmill.methods.g2po.keys import StateKeyFn, cluster_similar
from agentmill.methods.g2po.returns import discounted_returns, episode_scores
from agentmill.methods.g2po.segments import factorize, segment_constant, segment_mean_std, standardize, \
    standardize_against

MERGE_RATE_WARN = 0.02
"""Below this merge rate the graph is nearly a set of chains and G2PO behaves like GRPO (a warning [R])."""


def _check_table(table: StepTable) -> None:
    """Type check and the copied-terminal-reward trap [R]: if every step of a multi-step trajectory carries
    the same nonzero reward, the outcome reward was probably copied onto each step (seen in Trinity-RFT)."""
    if not isinstance(table, StepTable):
        raise TypeError(f"expected a StepTable, got {type(table).__name__}")
    traj = table.traj_index
    n_traj = int(traj[-1]) + 1
    length = np.bincount(traj, minlength=n_traj)
    const = segment_constant(table.reward, traj, n_traj)
    nonzero = table.reward[table.traj_starts] != 0
    bad = np.flatnonzero(const & nonzero & (length >= 2))
    if bad.size:
        r = int(table.traj_starts[bad[0]])
        warnings.warn(f"{bad.size} trajectories carry the same nonzero reward on every step (first: "
                      f"{table._where(r)}); was the terminal reward copied onto each step?", stacklevel=3)


def _episode_term(table: StepTable, norm: str, epsilon: float) -> np.ndarray:
    """A^ep_i = (R_i - mean_g R)/(std_g R + eps) or R_i - mean_g R, broadcast to the trajectory's rows.
    Unbiased std (n-1, as ``torch.std`` in verl). A group of one trajectory gets 0 (verl-agent returns the raw
    score there: a documented deviation)."""
    R = episode_scores(table)
    traj_group = table.group_index[table.traj_starts]
    per_traj = standardize(R, traj_group, int(traj_group[-1]) + 1, norm, epsilon)
    return per_traj[table.traj_index]


def grpo_advantages(table: StepTable, cfg: GRPOConfig = GRPOConfig()) -> AdvantageResult:
    """GRPO: A_{i,t} = A^ep_i. ``returns`` is the undiscounted return-to-go (GRPO has no gamma)."""
    _check_table(table)
    ep = _episode_term(table, cfg.norm, cfg.epsilon)
    traj_group = table.group_index[table.traj_starts]
    n_per_group = np.bincount(traj_group)
    diagnostics = {"n_groups": float(len(n_per_group)), "n_trajectories": float(len(traj_group)),
                   "singleton_groups": float((n_per_group == 1).sum())}
    return AdvantageResult(ep, ep.copy(), np.zeros(len(table)), discounted_returns(table, 1.0), diagnostics)


def _anchor_groups(table: StepTable, key_fn: StateKeyFn, similarity: float | None) -> np.ndarray:
    """Anchor-group code of every row: exact (group, key) matches, or greedy similarity clusters inside each group
    over the keys' text (g2po README deviation 7)."""
    codes, index = key_codes(table, key_fn)
    if similarity is None:
        return codes
    keys = list(index)  # code -> (group_id, key)
    texts = [k if isinstance(k, str) else repr(k) for _, k in keys]
    node_group = np.empty(len(keys), dtype=np.int64)
    node_group[codes] = table.group_index
    cluster = np.empty(len(keys), dtype=np.int64)
    for g in range(int(node_group.max()) + 1):
        members = np.flatnonzero(node_group == g)  # distinct keys of group g, in row order of first appearance
        cluster[members] = cluster_similar([texts[c] for c in members], similarity)
    anchor, _ = factorize(zip(node_group.tolist(), cluster.tolist()))
    return anchor[codes]


def gigpo_advantages(table: StepTable, key_fn: StateKeyFn, cfg: GiGPOConfig = GiGPOConfig()) -> AdvantageResult:
    """GiGPO (arXiv 2505.10978 Eqs. 3-8): A = A^ep + omega * A^S.

    A^S_{i,t} = G_{i,t} - mean_anchor(G) (``norm="mean"``) or that over (std_anchor + eps) (``"mean_std"``), where
    the anchor group is every step of the same group whose key equals (or, with ``similarity``, is similar to)
    this step's. The grouped quantity is the discounted return G, not the immediate reward (verl-agent issue #182,
    maintainer's answer). Singleton anchors get A^S = 0 (verl-agent returns the raw G there: a deviation).
    """
    _check_table(table)
    # 1. episode term, with GiGPO's single mode switching both terms
    ep = _episode_term(table, cfg.norm, cfg.epsilon)
    # 2. anchor groups
    anchor = _anchor_groups(table, key_fn, cfg.similarity)
    n_anchor = int(anchor.max()) + 1
    # 3. step term on discounted returns
    G = discounted_returns(table, cfg.gamma)
    step = standardize(G, anchor, n_anchor, cfg.norm, cfg.epsilon)
    # 4. combination
    adv = ep + cfg.omega * step
    size = np.bincount(anchor, minlength=n_anchor)
    diagnostics = {"n_anchor_groups": float(n_anchor), "singleton_anchor_fraction": float((size == 1).mean()),
                   "mean_anchor_size": float(size.mean()), "merge_rate": 1.0 - n_anchor / len(table)}
    return AdvantageResult(adv, ep, step, G, diagnostics)


def g2po_advantages(table: StepTable, key_fn: StateKeyFn, cfg: G2POConfig = G2POConfig()) -> AdvantageResult:
    """G2PO-style (reconstructed) graph advantages (g2po README, The estimator): A = A^ep + omega * A_hat, or A_hat
    alone.

    Steps 1-5 (keys, successors, returns, node values, edge TD errors) are ``build_state_graph``; here come the
    global standardisation (step 6) and the combination (step 7). ``step`` in the result is A_hat; diagnostics are
    the graph's (``merge_rate``, ``shared_visit_fraction``, ...) plus ``mu_delta`` and ``sigma_delta`` (mean over
    scopes of the standardisation statistics) and ``seconds`` (graph + advantages).
    """
    t0 = time.perf_counter()
    _check_table(table)
    # steps 1-5: the graph and each step's edge TD error delta
    graph = build_state_graph(table, key_fn, gamma=cfg.gamma, visit=cfg.visit, truncation=cfg.truncation)
    delta = graph.td_of_row
    # step 6: standardise delta over the scope: each group's graph, or the whole batch
    seg = table.group_index if cfg.scope == "group" else np.zeros(len(table), dtype=np.int64)
    n_seg = int(seg[-1]) + 1 if cfg.scope == "group" else 1
    if cfg.std_over == "steps":
        pop, pop_seg = delta, seg
    else:  # each distinct edge once; edges never span groups because nodes do not
        pop = graph.edge_td
        pop_seg = graph.node_group[graph.edge_src] if cfg.scope == "group" else np.zeros(len(pop), dtype=np.int64)
    a_hat = standardize_against(delta, seg, pop, pop_seg, n_seg, cfg.graph_norm, cfg.epsilon)
    # step 7: combination with the GRPO episode term
    if cfg.combine == "episode+graph":
        ep = _episode_term(table, cfg.episode_norm, cfg.epsilon)
        adv = ep + cfg.omega * a_hat
    else:
        ep = np.zeros(len(table))
        adv = a_hat.copy()
    _, mu, sigma = segment_mean_std(pop, pop_seg, n_seg)
    diagnostics = graph.diagnostics()
    diagnostics.update({"mu_delta": float(mu.mean()), "sigma_delta": float(sigma.mean()),
                        "seconds": time.perf_counter() - t0})
    if diagnostics["merge_rate"] < MERGE_RATE_WARN:
        warnings.warn(f"g2po: merge_rate {diagnostics['merge_rate']:.4f} < {MERGE_RATE_WARN}: almost no state "
                      "repeats, so G2PO will behave like GRPO (check the state key)", stacklevel=2)
    return AdvantageResult(adv, ep, a_hat, graph.returns, diagnostics)


def token_advantages(step_adv: np.ndarray, response_mask: np.ndarray) -> np.ndarray:
    """Broadcast one advantage per step row onto that row's response tokens: (S,), (S, L) -> (S, L) float64.

    Tokens outside the mask (prompt, padding, environment text) get 0.
    """
    a = np.asarray(step_adv, dtype=np.float64)
    m = np.asarray(response_mask)
    if a.ndim != 1 or m.ndim != 2 or m.shape[0] != a.shape[0]:
        raise ValueError(f"token_advantages: expected step_adv (S,) and response_mask (S, L), got {a.shape} and "
                         f"{m.shape}")
    return a[:, None] * (m != 0)
