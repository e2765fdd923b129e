"""``agentmill g2po``: the KeyDoor pipeline rollout -> advantages -> graph, the no-repeat control, bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from agentmill.cli.main import main
from agentmill.core.types import StepTable
from agentmill.methods.g2po.config import G2POConfig, GiGPOConfig
from agentmill.methods.g2po.core import g2po_advantages, gigpo_advantages, grpo_advantages
from agentmill.methods.g2po.keys import ExactKey, FieldsKey


def _json_after(text: str) -> dict:
    return json.loads(text[text.index("{\n"):])


@pytest.fixture(scope="module")
def rollouts(tmp_path_factory):
    path = tmp_path_factory.mktemp("r") / "r.jsonl"
    assert main(["envs", "rollout", "--env", "keydoor-v0", "--groups", "3", "--n", "8", "--out", str(path)]) == 0
    return path


def _adv_file(path):
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    head, trajs = lines[0], lines[1:]
    assert head["schema"] == "agentmill.advantages/1" and head["kind"] == "header"
    return head, trajs


@pytest.mark.parametrize("estimator", ["grpo", "gigpo", "g2po"])
def test_advantages_equal_the_library_row_for_row(rollouts, tmp_path, capsys, estimator):
    out = tmp_path / "adv.jsonl"
    assert main(["g2po", "advantages", "--in", str(rollouts), "--estimator", estimator, "--out", str(out)]) == 0
    printed = _json_after(capsys.readouterr().out)
    table, _ = StepTable.from_jsonl(str(rollouts))
    key = FieldsKey(("description", "inventory"))
    ref = {"grpo": lambda: grpo_advantages(table), "gigpo": lambda: gigpo_advantages(table, key),
           "g2po": lambda: g2po_advantages(table, key)}[estimator]()
    head, trajs = _adv_file(out)
    assert [(t["group_id"], t["traj_id"]) for t in trajs] == list(dict.fromkeys(zip(table.group_id, table.traj_id)))
    for name in ("advantages", "episode", "step", "returns"):
        got = np.concatenate([t[name] for t in trajs])
        assert np.array_equal(got, getattr(ref, name)), name
    assert np.concatenate([t["t"] for t in trajs]).tolist() == table.t.tolist()
    assert head["estimator"] == estimator and head["key"] == "fields:description,inventory"
    # the graph diagnostics are printed for every estimator (they say whether G2PO can differ from GRPO)
    diag = printed["diagnostics"] if estimator == "g2po" else printed["diagnostics"]["graph"]
    assert 0.5 < diag["merge_rate"] < 1 and diag["n_visits"] == len(table)
    assert printed["rows"] == len(table) and printed["groups"] == 3


def test_flags_and_set_reach_the_config(rollouts, tmp_path, capsys):
    out = tmp_path / "adv.jsonl"
    assert main(["g2po", "advantages", "--in", str(rollouts), "--estimator", "g2po", "--key", "exact", "--gamma", "0.9",
                 "--omega", "0.5", "--set", "graph_norm=mean", "--set", "visit=first", "--out", str(out)]) == 0
    head, trajs = _adv_file(out)
    cfg = G2POConfig(gamma=0.9, omega=0.5, graph_norm="mean", visit="first")
    assert head["config"] == {**cfg.__dict__}
    table, _ = StepTable.from_jsonl(str(rollouts))
    ref = g2po_advantages(table, ExactKey(), cfg)
    assert np.array_equal(np.concatenate([t["advantages"] for t in trajs]), ref.advantages)
    out2 = tmp_path / "adv2.jsonl"
    assert main(["g2po", "advantages", "--in", str(rollouts), "--estimator", "gigpo", "--key", "similar:0.9",
                 "--out", str(out2)]) == 0
    ref2 = gigpo_advantages(table, ExactKey(), GiGPOConfig(similarity=0.9))
    assert np.array_equal(np.concatenate([t["advantages"] for t in _adv_file(out2)[1]]), ref2.advantages)


def test_no_repeat_control_g2po_equals_grpo_and_the_scrubber_restores_merging(tmp_path, capsys):
    """P1 through the CLI: under UniqueObs (p = 1, unique start) nothing merges, so G2PO's graph term is 0 and its
    advantages equal GRPO's exactly; the low merge rate is warned about. ``scrub:unique`` undoes the wrapper."""
    r = tmp_path / "u.jsonl"
    assert main(["envs", "rollout", "--env", "keydoor-unique-v0", "--groups", "2", "--n", "8", "--out", str(r)]) == 0
    capsys.readouterr()
    g2, gr = tmp_path / "g2.jsonl", tmp_path / "gr.jsonl"
    assert main(["g2po", "advantages", "--in", str(r), "--estimator", "g2po", "--key", "exact", "--out", str(g2)]) == 0
    cap = capsys.readouterr()
    assert _json_after(cap.out)["diagnostics"]["merge_rate"] == 0.0
    assert "agentmill: warning: g2po: merge_rate" in cap.err
    assert main(["g2po", "advantages", "--in", str(r), "--estimator", "grpo", "--out", str(gr)]) == 0
    a = np.concatenate([t["advantages"] for t in _adv_file(g2)[1]])
    b = np.concatenate([t["advantages"] for t in _adv_file(gr)[1]])
    assert np.max(np.abs(a - b)) < 1e-12
    capsys.readouterr()
    assert main(["g2po", "advantages", "--in", str(r), "--estimator", "g2po", "--key", "scrub:unique",
                 "--out", str(g2)]) == 0
    assert _json_after(capsys.readouterr().out)["diagnostics"]["merge_rate"] > 0.5


def test_graph_writes_dot_of_one_group(rollouts, tmp_path, capsys):
    dot = tmp_path / "g.dot"
    table, _ = StepTable.from_jsonl(str(rollouts))
    gid = str(table.group_id[-1])
    assert main(["g2po", "graph", "--in", str(rollouts), "--group", gid, "--dot", str(dot)]) == 0
    printed = _json_after(capsys.readouterr().out)
    text = dot.read_text()
    assert text.startswith("digraph G {") and text.rstrip().endswith("}")
    d = printed["diagnostics"]
    assert printed["group"] == gid and d["n_visits"] == int((table.group_id == gid).sum())
    # every visited node and every edge of the group is drawn (terminal nodes are drawn too, not counted as visited)
    assert text.count(" -> ") == d["n_edges"]
    assert text.count(" [label=") - text.count(" -> ") >= d["n_nodes"]
    dot2 = tmp_path / "g2.dot"
    assert main(["g2po", "graph", "--in", str(rollouts), "--group", "2", "--dot", str(dot2)]) == 0  # by index
    assert dot2.read_text() == text


@pytest.mark.parametrize("argv,needle", [
    (["advantages", "--estimator", "ppo"], "--estimator must be one of"),
    (["advantages", "--estimator", "g2po", "--key", "regex:x"], "unknown key spec"),
    (["advantages", "--estimator", "g2po", "--key", "scrub:("], "bad regex"),
    (["advantages", "--estimator", "gigpo", "--key", "similar:1.5"], "(0, 1)"),
    (["advantages", "--estimator", "g2po", "--key", "similar:0.9"], "GiGPO's similarity grouping"),
    (["advantages", "--estimator", "g2po", "--gamma", "0"], "gamma must be in (0, 1]"),
    (["advantages", "--estimator", "g2po", "--gamma", "nan"], "--gamma must be a finite number"),
    (["advantages", "--estimator", "gigpo", "--omega", "-1"], "omega must be >= 0"),
    (["advantages", "--estimator", "grpo", "--gamma", "0.9"], "--gamma does not apply to grpo"),
    (["advantages", "--estimator", "g2po", "--set", "visits=first"], "has no field 'visits'"),
    (["advantages", "--estimator", "g2po", "--set", "visit=last"], "visit must be one of"),
    (["advantages", "--estimator", "g2po", "--set", "epsilon=tiny"], "expected a number"),
    (["advantages", "--estimator", "g2po", "--key", "fields:room"], "room"),
    (["graph", "--group", "nope"], "no such group"),
    (["graph", "--group", "7"], "no such group"),
    (["graph", "--group", "0", "--key", "similar:0.9"], "not a state key"),
])
def test_bad_input_exits_2_with_one_line_and_writes_nothing(rollouts, tmp_path, capsys, argv, needle):
    target = ["--dot", str(tmp_path / "o.dot")] if argv[0] == "graph" else ["--out", str(tmp_path / "o.jsonl")]
    assert main(["g2po", *argv, "--in", str(rollouts), *target]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1 and "Traceback" not in err
    assert not list(tmp_path.iterdir())


def test_bad_rollout_files(tmp_path, capsys):
    bad = tmp_path / "in"
    bad.mkdir()
    cases = {"missing.jsonl": None, "notjson.jsonl": "{oops\n", "empty.jsonl": "",
             "schema.jsonl": json.dumps({"schema": "other/1", "steps": []}) + "\n",
             "nosteps.jsonl": json.dumps({"schema": "agentmill.rollout/1", "group_id": "g", "traj_id": "a"}) + "\n",
             "nan.jsonl": json.dumps({"schema": "agentmill.rollout/1", "group_id": "g", "traj_id": "a",
                                      "success": False, "end": "terminated", "final_obs": "x",
                                      "steps": [{"t": 0, "obs": "o", "action": "a", "reward": float("nan")}]}) + "\n"}
    good = {"schema": "agentmill.rollout/1", "group_id": "g", "traj_id": "a", "success": False, "final_obs": "x"}
    cases["end.jsonl"] = json.dumps({**good, "end": "exploded", "steps": []}) + "\n"
    cases["step.jsonl"] = json.dumps({**good, "end": "truncated", "steps": [{"t": 0, "obs": "o"}]}) + "\n"
    for name, text in cases.items():
        if text is not None:
            (bad / name).write_text(text)
    for name in cases:
        assert main(["g2po", "advantages", "--in", str(bad / name), "--estimator", "grpo",
                     "--out", str(tmp_path / "o.jsonl")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == len(cases) and all(line.startswith("agentmill: error:") for line in err)
    assert "no such file" in err[0] and "not JSON" in err[1] and "empty file" in err[2] and "schema" in err[3]
    assert "nosteps.jsonl:1: the rollout record lacks ['success', 'end', 'steps']" in err[4]
    assert "non-finite reward" in err[5] and "end must be 'terminated' or 'truncated'" in err[6]
    assert "steps must be a list of objects with ['t', 'obs', 'action', 'reward']" in err[7]
    assert not (tmp_path / "o.jsonl").exists()
