"""The state graph (g2po README, steps 1-5, and its diagnostics)."""

from __future__ import annotations

import numpy as np
import pytest

from agentmill.core.types import StepTable
from agentmill.methods.g2po import build_state_graph
from agentmill.methods.g2po.graph import Terminal
from agentmill.methods.g2po.keys import ExactKey
from tests.helpers.step_tables import golden_table, random_step_table

KEY = ExactKey()


def test_golden_nodes_edges_and_diagnostics() -> None:
    g = build_state_graph(golden_table(), KEY, gamma=0.5)
    assert g.nodes[("g", "S")].value == 0.25 and g.nodes[("g", "S")].n == 3 and g.nodes[("g", "S")].m == 3
    assert g.nodes[("g", "A")].value == pytest.approx(2 / 3, abs=1e-15) and g.nodes[("g", "B")].value == 0.5
    assert g.nodes[("g", Terminal("W"))].value == 0.0 and g.nodes[("g", Terminal("C"))].n == 0
    td = {(u[1], v[1]): e.td for (u, v), e in g.edges.items()}
    assert td == pytest.approx({("S", "A"): 1 / 12, ("A", Terminal("W")): 1 / 3, ("S", "B"): 0.0,
                                ("B", "A"): -1 / 6, ("A", Terminal("C")): -2 / 3}, abs=1e-15)
    assert g.edges[(("g", "S"), ("g", "A"))].count == 2
    assert g.node_of_row.tolist() == [0, 1, 0, 2, 1, 0, 1]
    d = g.diagnostics()
    assert d["n_nodes"] == 3 and d["n_edges"] == 5 and d["n_visits"] == 7
    assert d["merge_rate"] == pytest.approx(1 - 3 / 7) and d["singleton_fraction"] == pytest.approx(1 / 3)
    assert d["shared_visit_fraction"] == pytest.approx(6 / 7) and d["mean_visits_per_node"] == pytest.approx(7 / 3)
    assert d["std_delta"] == pytest.approx(0.343592, abs=1e-6)


def test_nodes_never_span_groups() -> None:
    tb = StepTable.concat([golden_table(), StepTable.from_episodes(
        [dict(group_id="h", traj_id="x", obs=["S", "A", "W"], actions=["u", "v"], rewards=[0, 0], success=False)])])
    g = build_state_graph(tb, KEY, gamma=0.5)
    assert g.nodes[("g", "S")].value == 0.25 and g.nodes[("h", "S")].value == 0.0
    assert g.node_group[g.node_of_row].tolist() == tb.group_index.tolist()


def test_truncation_bootstrap_uses_the_final_state_value() -> None:
    tb = StepTable.from_episodes([
        dict(group_id="g", traj_id="a", obs=["S", "A", "W"], actions=["x", "y"], rewards=[0, 1]),
        dict(group_id="g", traj_id="b", obs=["S", "A"], actions=["x"], rewards=[0], end="truncated", success=False),
    ])
    term = build_state_graph(tb, KEY, gamma=0.5)
    boot = build_state_graph(tb, KEY, gamma=0.5, truncation="bootstrap")
    # terminal: V(A) = mean(1) = 1 (one visit); the truncated S->A edge goes to Terminal("A"), value 0
    assert term.td_of_row[2] == pytest.approx(0 - 0.25)
    # bootstrap: the truncated S->A joins the S->A edge of trajectory a, successor A has value 1
    assert boot.edge_of_row[2] == boot.edge_of_row[0] and boot.td_of_row[2] == pytest.approx(0.5 * 1 - 0.25)


def test_first_visit_values_count_each_trajectory_once() -> None:
    tb = StepTable.from_episodes([
        dict(group_id="g", traj_id="a", obs=["S", "A", "A", "W"], actions="xyz", rewards=[0, 0, 1]),
        dict(group_id="g", traj_id="b", obs=["S", "A", "C"], actions="xy", rewards=[0, 0], success=False),
    ])
    every = build_state_graph(tb, KEY, gamma=0.5)
    first = build_state_graph(tb, KEY, gamma=0.5, visit="first")
    assert every.nodes[("g", "A")].value == pytest.approx((0.5 + 1 + 0) / 3)
    assert first.nodes[("g", "A")].value == pytest.approx((0.5 + 0) / 2)
    assert every.nodes[("g", "A")].n == first.nodes[("g", "A")].n == 3 and first.nodes[("g", "A")].m == 2


def test_to_dot_and_to_networkx() -> None:
    g = build_state_graph(golden_table(), KEY, gamma=0.5)
    dot = g.to_dot()
    assert dot.startswith("digraph G {") and dot.count("->") == 5 and "doublecircle" in dot
    mixed = build_state_graph(StepTable.concat([golden_table(), random_step_table(np.random.default_rng(0))]), KEY,
                              gamma=0.5).to_dot(group="g")
    assert mixed.count("->") == 5 and mixed.count("label=") == 10 and "start0" not in mixed
    nxg = g.to_networkx()
    assert nxg.number_of_nodes() == 5 and nxg.number_of_edges() == 5
    assert nxg.edges[0, 1]["td"] == pytest.approx(1 / 12)


def test_build_is_bitwise_deterministic_and_validates_arguments() -> None:
    tb = random_step_table(np.random.default_rng(3), n_groups=4, group_size=8)
    a, b = build_state_graph(tb, KEY, gamma=0.9), build_state_graph(tb, KEY, gamma=0.9)
    assert a.edge_td.tobytes() == b.edge_td.tobytes() and a.node_keys == b.node_keys
    with pytest.raises(ValueError, match="gamma"):
        build_state_graph(tb, KEY, gamma=0)
    with pytest.raises(ValueError, match="visit"):
        build_state_graph(tb, KEY, gamma=0.9, visit="all")


def test_time_estimators_reports_every_phase() -> None:
    from agentmill.methods.g2po.bench import time_estimators
    tb = random_step_table(np.random.default_rng(4), n_groups=2, group_size=8)
    t = time_estimators(tb, KEY, repeats=1)
    for k in ("keys", "graph", "g2po", "gigpo", "grpo"):
        assert t[f"{k}_s"] > 0 and t[f"{k}_ms_per_1k"] == pytest.approx(t[f"{k}_s"] * 1e6 / len(tb))
    assert t["n_rows"] == len(tb) and t["graph_s"] >= t["keys_s"] * 0.5
    with pytest.raises(ValueError, match="repeats"):
        time_estimators(tb, KEY, repeats=0)
