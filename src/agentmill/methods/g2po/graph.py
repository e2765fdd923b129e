"""The state-transition graph of trajectory groups (G2PO-style, reconstructed; g2po README, steps 1-5).

Every step row is a visit to node u = (group, key(o_t)) and an instance of edge e = (u, v), v = the node of o_{t+1}
(after the last step: an absorbing node of value 0, keyed by the final observation). A node's value is the mean
discounted return over its visits; an edge's TD error is delta_e = mean reward of e + gamma * V(v) - V(u), shared
by every instance of e. Nodes never span groups: different tasks share strings like "You are in the kitchen".

Everything is integer codes and ``np.bincount`` (no per-row Python beyond calling the key function), so building
is O(S) and bitwise deterministic. ``StateGraph.nodes``/``edges`` are dict views built on first access.
"""

from __future__ import annotations

import time
from collections.abc import Hashable
from dataclasses import dataclass
from functools import cached_property
from typing import Any, NamedTuple

import numpy as np

from agentmill.core.types import END_TRUNCATED, StepTable
from agentmill.methods.g2po.keys import StateKeyFn
from agentmill.methods.g2po.returns import discounted_returns
from agentmill.methods.g2po.segments import segment_mean_std


@dataclass(frozen=True)
class Terminal:
    """Key of an absorbing node: the final observation of a terminated episode (or, under the default truncation
    convention, of a truncated one). Its value is 0 - it has no visits - but it keeps the final observation's key,
    so that "A -> win" and "A -> dead end" stay different edges (the worked example in docs/methods/g2po.md: A->W and
    A->C get different TD errors). A dataclass, so it never compares equal to a user's tuple key."""

    key: Hashable

    def __repr__(self) -> str:
        return f"TERMINAL({self.key!r})"


NodeKey = tuple[str, Hashable]


class NodeStats(NamedTuple):
    n: int
    """Visits (rows whose observation is this node), whatever ``visit`` is."""
    m: int
    """Distinct trajectories that visit the node."""
    value: float
    """V(u): mean return over the counted visits (all, or each trajectory's first); 0 without visits."""
    std: float
    """Unbiased std of the counted returns (0 with fewer than 2)."""


class EdgeStats(NamedTuple):
    count: int
    """Step instances realising the transition u -> v."""
    r_mean: float
    """Mean reward over the instances."""
    td: float
    """delta_e = r_mean + gamma * V(v) - V(u)."""


def key_codes(table: StepTable, key_fn: StateKeyFn) -> tuple[np.ndarray, dict[NodeKey, int]]:
    """Node code of each row's observation (first-appearance order) and the (group, key) -> code index.

    A key function error (missing field, non-str observation) is re-raised naming the group, trajectory and row.
    """
    index: dict[NodeKey, int] = {}
    codes = np.empty(len(table), dtype=np.int64)
    gids = table.group_id.tolist()
    r = 0
    try:
        for r, (g, o, inf) in enumerate(zip(gids, table.obs, table.info)):
            codes[r] = index.setdefault((g, key_fn(o, inf)), len(index))
    except (KeyError, TypeError) as exc:
        raise type(exc)(f"{exc.args[0] if exc.args else exc} (at {table._where(r)})") from exc
    return codes, index


class StateGraph:
    """The merged graph of a StepTable. Arrays are indexed by node code, edge code or table row.

    Attributes (all numpy, float64 unless noted):
      ``node_keys`` list[NodeKey] (node code -> (group_id, key)); ``node_group`` int64 (n_nodes,);
      ``node_n``, ``node_m`` int64, ``node_value``, ``node_std`` (n_nodes,);
      ``edge_src``, ``edge_dst``, ``edge_count`` int64, ``edge_r_mean``, ``edge_td`` (n_edges,);
      ``node_of_row``, ``succ_of_row``, ``edge_of_row`` int64 (S,); ``returns`` G_{i,t} (S,); ``td_of_row`` (S,).
    Node codes: visited nodes first (in order of first visit), then nodes seen only as a successor of a last step
    (``Terminal`` nodes and, under "bootstrap", unvisited final states) in row order.
    """

    def __init__(self, *, node_keys: list[NodeKey], node_group: np.ndarray, node_n: np.ndarray, node_m: np.ndarray,
                 node_value: np.ndarray, node_std: np.ndarray, edge_src: np.ndarray, edge_dst: np.ndarray,
                 edge_count: np.ndarray, edge_r_mean: np.ndarray, edge_td: np.ndarray, node_of_row: np.ndarray,
                 succ_of_row: np.ndarray, edge_of_row: np.ndarray, returns: np.ndarray, gamma: float,
                 build_seconds: float) -> None:
        self.node_keys, self.node_group = node_keys, node_group
        self.node_n, self.node_m, self.node_value, self.node_std = node_n, node_m, node_value, node_std
        self.edge_src, self.edge_dst, self.edge_count = edge_src, edge_dst, edge_count
        self.edge_r_mean, self.edge_td = edge_r_mean, edge_td
        self.node_of_row, self.succ_of_row, self.edge_of_row = node_of_row, succ_of_row, edge_of_row
        self.returns, self.gamma, self.build_seconds = returns, gamma, build_seconds

    @property
    def td_of_row(self) -> np.ndarray:
        """delta of each row's edge, shape (S,)."""
        return self.edge_td[self.edge_of_row]

    @cached_property
    def nodes(self) -> dict[NodeKey, NodeStats]:
        return {k: NodeStats(int(self.node_n[c]), int(self.node_m[c]), float(self.node_value[c]),
                             float(self.node_std[c])) for c, k in enumerate(self.node_keys)}

    @cached_property
    def edges(self) -> dict[tuple[NodeKey, NodeKey], EdgeStats]:
        return {(self.node_keys[s], self.node_keys[d]): EdgeStats(int(c), float(rm), float(td))
                for s, d, c, rm, td in zip(self.edge_src.tolist(), self.edge_dst.tolist(), self.edge_count.tolist(),
                                           self.edge_r_mean.tolist(), self.edge_td.tolist())}

    def diagnostics(self) -> dict[str, float]:
        """Facts that predict whether G2PO can differ from GRPO [R]; always report them with results.

        Over visited nodes: ``merge_rate`` = 1 - n_nodes/n_visits; ``singleton_fraction`` = share of nodes with one
        visit; ``shared_visit_fraction`` = share of visits at nodes reached by >= 2 trajectories;
        ``mean_visits_per_node``; ``std_delta`` = unbiased std of delta over step instances; ``n_nodes``,
        ``n_edges``, ``n_visits``; ``build_seconds`` = wall time of ``build_state_graph``.
        """
        visited = self.node_n > 0
        n_nodes = int(visited.sum())
        n_visits = int(self.node_n.sum())
        td = self.td_of_row
        return {
            "n_nodes": float(n_nodes), "n_edges": float(len(self.edge_td)), "n_visits": float(n_visits),
            "merge_rate": 1.0 - n_nodes / n_visits,
            "singleton_fraction": float((self.node_n[visited] == 1).sum()) / n_nodes,
            "shared_visit_fraction": float(self.node_n[self.node_m >= 2].sum()) / n_visits,
            "mean_visits_per_node": n_visits / n_nodes,
            "std_delta": float(np.std(td, ddof=1)) if len(td) > 1 else 0.0,
            "build_seconds": self.build_seconds,
        }

    def to_dot(self, group: str | None = None, max_label: int = 40) -> str:
        """Graphviz DOT text of one group's graph (all groups when None): nodes labelled with their key, visit count
        and value, edges with count and TD error."""
        def esc(s: str) -> str:
            s = s if len(s) <= max_label else s[: max_label - 3] + "..."
            return s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

        keep = [c for c, (g, _) in enumerate(self.node_keys) if group is None or g == group]
        kept = set(keep)
        lines = ["digraph G {", "  rankdir=LR;"]
        for c in keep:
            g, k = self.node_keys[c]
            text = k if isinstance(k, str) else repr(k)
            shape = ", shape=doublecircle" if isinstance(k, Terminal) else ""
            lines.append(f'  n{c} [label="{esc(text)}\\nn={self.node_n[c]} V={self.node_value[c]:.3g}"{shape}];')
        for s, d, cnt, td in zip(self.edge_src.tolist(), self.edge_dst.tolist(), self.edge_count.tolist(),
                                 self.edge_td.tolist()):
            if s in kept:
                lines.append(f'  n{s} -> n{d} [label="x{cnt} td={td:.3g}"];')
        lines.append("}")
        return "\n".join(lines) + "\n"

    def to_networkx(self) -> Any:
        """A ``networkx.DiGraph`` with node attributes (group, key, n, m, value, std) and edge attributes (count,
        r_mean, td). Node ids are the integer node codes."""
        try:
            import networkx as nx
        except ImportError as exc:  # pragma: no cover - networkx ships with the hf extra (torch depends on it)
            raise ImportError("StateGraph.to_networkx needs networkx: pip install networkx "
                              "(or install agentmill[hf], which brings it)") from exc
        graph = nx.DiGraph()
        for c, (g, k) in enumerate(self.node_keys):
            graph.add_node(c, group=g, key=k, n=int(self.node_n[c]), m=int(self.node_m[c]),
                           value=float(self.node_value[c]), std=float(self.node_std[c]))
        for s, d, cnt, rm, td in zip(self.edge_src.tolist(), self.edge_dst.tolist(), self.edge_count.tolist(),
                                     self.edge_r_mean.tolist(), self.edge_td.tolist()):
            graph.add_edge(s, d, count=cnt, r_mean=rm, td=td)
        return graph


def build_state_graph(table: StepTable, key_fn: StateKeyFn, *, gamma: float, visit: str = "every",
                      truncation: str = "terminal") -> StateGraph:
    """Merge a table's trajectories into one graph per group (g2po README, steps 1-5).

    ``visit``: "every" (V(u) averages all visits) or "first" (each trajectory's first visit of u only).
    ``truncation``: the successor of a truncated last step is an absorbing ``Terminal`` node of value 0 ("terminal",
    as after a terminated step) or the ordinary node of the final observation ("bootstrap": its value is the mean
    of its visits elsewhere in the group, 0 if none).
    """
    if not (0.0 < gamma <= 1.0):
        raise ValueError(f"build_state_graph: gamma must be in (0, 1], got {gamma}")
    if visit not in ("every", "first"):
        raise ValueError(f"build_state_graph: visit must be 'every' or 'first', got {visit!r}")
    if truncation not in ("terminal", "bootstrap"):
        raise ValueError(f"build_state_graph: truncation must be 'terminal' or 'bootstrap', got {truncation!r}")
    t0 = time.perf_counter()
    S = len(table)
    # 1. keys -> node codes u_{i,t}
    node, index = key_codes(table, key_fn)
    n_visited = len(index)
    # 2. successors v_{i,t}: the next row's node inside a trajectory. After the last row: an absorbing node
    # (group, Terminal(key(o_T))) with value 0; under "bootstrap" a truncated episode's final observation is an
    # ordinary node (group, key(o_T)) instead, whose value is its visits' mean (0 if it was never visited).
    last = table.is_last
    succ = np.empty(S, dtype=np.int64)
    succ[:-1] = node[1:]
    group_index = table.group_index
    gids = table.group_id.tolist()
    new_groups: list[int] = []
    for r in np.flatnonzero(last).tolist():
        try:
            k = key_fn(table.next_obs[r], table.next_info[r])
        except (KeyError, TypeError) as exc:
            raise type(exc)(f"{exc.args[0] if exc.args else exc} (final observation at {table._where(r)})") from exc
        bootstrap = truncation == "bootstrap" and table.end[r] == END_TRUNCATED
        before = len(index)
        succ[r] = index.setdefault((gids[r], k if bootstrap else Terminal(k)), before)
        if succ[r] == before:  # a node seen only as a final observation: no visits, value 0
            new_groups.append(int(group_index[r]))
    node_keys: list[NodeKey] = list(index)
    n_nodes = len(node_keys)
    node_group = np.empty(n_nodes, dtype=np.int64)
    node_group[node] = group_index
    node_group[n_visited:] = new_groups
    # 3. returns G_{i,t}
    G = discounted_returns(table, gamma)
    # 4. node values over counted visits
    traj = table.traj_index
    first = np.zeros(S, dtype=bool)
    first[np.unique(traj * n_nodes + node, return_index=True)[1]] = True
    counted = first if visit == "first" else np.ones(S, dtype=bool)
    _, value, std = segment_mean_std(G[counted], node[counted], n_nodes)
    node_n = np.bincount(node, minlength=n_nodes)
    node_m = np.bincount(node[first], minlength=n_nodes)
    # 5. edges and their TD errors, delta_e = r_mean_e + gamma * V(v) - V(u)
    edge_ids, edge_of_row = np.unique(node * n_nodes + succ, return_inverse=True)
    edge_of_row = edge_of_row.reshape(-1).astype(np.int64)
    edge_src, edge_dst = edge_ids // n_nodes, edge_ids % n_nodes
    edge_count = np.bincount(edge_of_row, minlength=len(edge_ids))
    edge_r_mean = np.bincount(edge_of_row, weights=table.reward, minlength=len(edge_ids)) / edge_count
    edge_td = (edge_r_mean + gamma * value[edge_dst]) - value[edge_src]
    return StateGraph(node_keys=node_keys, node_group=node_group, node_n=node_n, node_m=node_m, node_value=value,
                      node_std=std, edge_src=edge_src, edge_dst=edge_dst, edge_count=edge_count,
                      edge_r_mean=edge_r_mean, edge_td=edge_td, node_of_row=node, succ_of_row=succ,
                      edge_of_row=edge_of_row, returns=G, gamma=gamma, build_seconds=time.perf_counter() - t0)
