"""StepTable / LabelTable : construction, validation, JSONL round trip."""

from __future__ import annotations

import io

import numpy as np
import pytest

from agentmill.core.types import DEAD_END_DISTANCE, LabelTable, StepTable


def _golden() -> StepTable:
    return StepTable.from_episodes([
        dict(group_id="g", traj_id="t1", obs="SAW", actions=["a", "w"], rewards=[0, 1]),
        dict(group_id="g", traj_id="t2", obs="SBAW", actions=["b", "a", "w"], rewards=[0, 0, 1]),
        dict(group_id="g", traj_id="t3", obs="SAC", actions=["a", "c"], rewards=[0, 0], end="truncated",
             success=False),
    ])


def test_from_episodes_builds_columns_by_hand() -> None:
    tb = _golden()
    assert len(tb) == 7 and tb.n_trajectories == 3 and tb.n_groups == 1
    assert tb.t.tolist() == [0, 1, 0, 1, 2, 0, 1]
    assert tb.obs.tolist() == ["S", "A", "S", "B", "A", "S", "A"]
    assert tb.next_obs.tolist() == ["A", "W", "B", "A", "W", "A", "C"]
    assert tb.end.tolist() == [0, 1, 0, 0, 1, 0, 2]
    assert tb.success.tolist() == [True] * 5 + [False] * 2
    assert tb.traj_starts.tolist() == [0, 2, 5] and tb.traj_index.tolist() == [0, 0, 1, 1, 1, 2, 2]
    assert tb.reward.dtype == np.float64 and tb.t.dtype == np.int32 and tb.end.dtype == np.int8


def test_jsonl_round_trip_with_labels_candidates_and_meta(tmp_path) -> None:
    tb = StepTable.from_episodes([
        dict(group_id="g1", traj_id="a", obs=["o0", "o1", "o2"], actions=["go", "open"], rewards=[0.0, 1.0],
             infos=[{"description": "d0"}, {"description": "d1"}, {"description": "d2", "won": True}],
             candidates=[("go", "look"), None]),
        dict(group_id="g0", traj_id="b", obs=["o0", "x"], actions=["look"], rewards=[-0.1], end="truncated",
             success=False),
    ])
    labels = LabelTable.from_distances([2, 1, 2], [1, 0, DEAD_END_DISTANCE])
    path = tmp_path / "r.jsonl"
    tb.to_jsonl(path, labels, traj_fields={("g1", "a"): {"task_id": "layout7", "seed": 3, "env": "keydoor-v0"}})
    tb2, lab2 = StepTable.from_jsonl(path)
    assert tb2.equals(tb) and lab2 is not None
    for n in ("dist_before", "dist_after", "progress", "dead_end"):
        assert np.array_equal(getattr(lab2, n), getattr(labels, n))
    assert labels.progress.tolist() == [1, 1, 0] and labels.dead_end.tolist() == [False, False, True]
    lines = path.read_text().splitlines()
    assert len(lines) == 2 and '"schema": "agentmill.rollout/1"' in lines[0] and '"task_id": "layout7"' in lines[0]
    # a next_obs that is not the following obs (e.g. a wrapper rewrote it) still round-trips
    odd = StepTable(**{**{n: getattr(tb, n) for n in ("group_id", "traj_id", "t", "obs", "action", "reward", "end",
                                                       "success", "info", "next_info", "candidates")},
                       "next_obs": ["o1*", "o2", "x"]})
    buf = io.StringIO()
    odd.to_jsonl(buf)
    buf.seek(0)
    odd2, none = StepTable.from_jsonl(buf)
    assert odd2.equals(odd) and none is None


def _cols(**over):
    base = dict(group_id=["g", "g"], traj_id=["a", "a"], t=[0, 1], obs=["x", "y"], next_obs=["y", "z"],
                action=["u", "v"], reward=[0.0, 1.0], end=[0, 1], success=[True, True])
    base.update(over)
    return base


@pytest.mark.parametrize("over, match", [
    (dict(reward=[0.0, float("nan")]), "non-finite reward"),
    (dict(t=[0, 2]), "non-contiguous t"),
    (dict(t=[0, 0]), "non-contiguous t"),
    (dict(end=[1, 1]), "before the last row"),
    (dict(end=[0, 0]), "must be terminated"),
    (dict(obs=["x"]), "mismatched column lengths"),
    (dict(success=[True, False]), "success differs"),
    (dict(info=[{}, {"oracle": {"distance_to_goal": 1}}]), "oracle"),
    (dict(group_id=[], traj_id=[], t=[], obs=[], next_obs=[], action=[], reward=[], end=[], success=[]), "empty"),
])
def test_bad_tables_raise_naming_the_row(over, match) -> None:
    with pytest.raises(ValueError, match=match):
        StepTable(**_cols(**over))


def test_errors_name_group_trajectory_and_row() -> None:
    with pytest.raises(ValueError, match=r"group 'g', trajectory 'a', row 1"):
        StepTable(**_cols(reward=[0.0, float("inf")]))
    with pytest.raises(TypeError, match="obs must be str"):
        StepTable(**_cols(obs=["x", 3]))


def test_split_or_duplicated_trajectory_is_refused() -> None:
    tb = _golden()
    with pytest.raises(ValueError, match="not contiguous or duplicated"):
        StepTable.concat([tb, tb])
    with pytest.raises(ValueError, match="contiguous"):
        tb.take_trajectories([0, 1, 2, 0])


def test_take_trajectories_permutes_whole_trajectories() -> None:
    tb = _golden().take_trajectories([2, 0, 1])
    assert tb.traj_id.tolist() == ["t3", "t3", "t1", "t1", "t2", "t2", "t2"]


def test_label_table_helpers() -> None:
    lab = LabelTable.from_distances([3, 2, -1, 1], [2, 2, 0, DEAD_END_DISTANCE])
    assert lab.progress.tolist() == [1, 0, -1, 0] and lab.dead_end.tolist() == [False, False, False, True]
    assert len(LabelTable.concat([lab, LabelTable.unknown(2)])) == 6
    assert lab.take([3, 0]).dist_after.tolist() == [DEAD_END_DISTANCE, 2]
    assert LabelTable.from_rows([lab.row(0)]).row(0) == {"dist_before": 3, "dist_after": 2, "progress": 1,
                                                         "dead_end": False}
    with pytest.raises(ValueError, match="progress"):
        LabelTable([0], [0], [2], [False])
    with pytest.raises(ValueError, match="equal length"):
        LabelTable([0, 1], [0], [1], [False])
