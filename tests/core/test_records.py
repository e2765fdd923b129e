from __future__ import annotations

import json
import os

import pytest

from agentmill.core import records
from agentmill.core.records import RunRecord, write_json_atomic
from agentmill.core.stats import Estimate


def _rec(**kw) -> RunRecord:
    return RunRecord(experiment_id="x.y", profile="smoke", setup={"n": 3},
                     metrics={"m": Estimate(0.5, 0.4, 0.6, n=3, method="bootstrap")}, verdicts={"C": "supported"},
                     **kw)


def test_roundtrip(tmp_path) -> None:
    path = _rec().write(tmp_path / "r.json")
    back = RunRecord.read(path)
    assert back.metrics["m"] == Estimate(0.5, 0.4, 0.6, n=3, method="bootstrap")
    assert back.verdicts == {"C": "supported"} and back.setup == {"n": 3}


def test_failed_write_keeps_old_file_and_leaves_no_temp(tmp_path, monkeypatch) -> None:
    path = tmp_path / "r.json"
    _rec().write(path)
    before = path.read_bytes()

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(records.os, "fsync", boom)  # fails after the temp file is written
    with pytest.raises(OSError):
        _rec(status="error").write(path)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["r.json"]


def test_numpy_values_serialise(tmp_path) -> None:
    import numpy as np

    write_json_atomic(tmp_path / "a.json", {"a": np.float32(1.5), "b": np.arange(3), "c": np.int64(2)})
    assert json.loads((tmp_path / "a.json").read_text()) == {"a": 1.5, "b": [0, 1, 2], "c": 2}
