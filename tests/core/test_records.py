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


# -- reading: one validator, one error naming the file and the field (issue 20, finding 4 and the "fast" record) --

def _write_with(tmp_path, **changes) -> str:
    d = _rec().to_dict()
    for k, v in changes.items():
        if v is _DROP:
            d.pop(k)
        else:
            d[k] = v
    path = tmp_path / "r.json"
    path.write_text(json.dumps(d))
    return str(path)


_DROP = object()


@pytest.mark.parametrize("changes,field,needle", [
    ({"metrics": None}, "metrics", "expected an object, got null"),
    ({"verdicts": []}, "verdicts", "expected an object, got an array"),
    ({"wall_seconds": "fast"}, "wall_seconds", "expected a finite number of seconds >= 0, got a string ('fast')"),
    ({"wall_seconds": True}, "wall_seconds", "got a boolean"),
    ({"wall_seconds": float("nan")}, "wall_seconds", "got a number (nan)"),
    ({"wall_seconds": 10 ** 400}, "wall_seconds", "got a number (1000"),  # float() of it overflows
    ({"verdicts": {"C": "very supported"}}, "verdicts['C']", "expected one of supported, not_supported"),
    ({"status": "finished"}, "status", "expected one of ok, error"),
    ({"setup": "n=3"}, "setup", "expected an object"),
    ({"packages": {"numpy": 2}}, "packages", "an object of strings"),
    ({"error": 7}, "error", "a string or null"),
    ({"experiment_id": _DROP}, "experiment_id", "missing"),
    ({"schema": 99}, "schema", "newer than this agentmill reads"),
    ({"metrics": {"m": [0.5]}}, "metrics['m']", "expected an object (value, lo, hi"),
    ({"metrics": {"m": {"value": "0.5", "lo": 0, "hi": 1}}}, "metrics['m'].value", "expected a number"),
    ({"metrics": {"m": {"value": 0.5, "lo": 0}}}, "metrics['m'].hi", "missing"),
    ({"metrics": {"m": {"value": 5, "lo": 0, "hi": 1}}}, "metrics['m']", "lo <= value <= hi"),
    ({"metrics": {"m": {"value": 1, "lo": 0, "hi": 2, "n": 1.5}}}, "metrics['m'].n", "an integer >= 0"),
])
def test_a_wrong_field_raises_one_error_naming_the_file_and_the_field(tmp_path, changes, field, needle) -> None:
    path = _write_with(tmp_path, **changes)
    with pytest.raises(records.RecordError) as info:
        RunRecord.read(path)
    err = info.value
    assert err.path == path and err.field == field and needle in err.problem
    assert str(err) == f"{path}: field {field}: {err.problem}" and "\n" not in str(err)


@pytest.mark.parametrize("content,needle", [
    (b"", "not valid JSON"),
    (b'{"experiment_id": "x.y", ', "not valid JSON"),
    (b"[1, 2]", "expected a JSON object, got an array"),
    (b"null", "expected a JSON object, got null"),
    (b'{"experiment_id": "\xff\xfe"}', r"not UTF-8 \(byte 19\)"),
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    (b'{"schema": ' + b"9" * 5000 + b"}", "not readable JSON"),
])
def test_a_file_that_is_not_a_record_raises_the_same_error(tmp_path, content, needle) -> None:
    path = tmp_path / "r.json"
    path.write_bytes(content)
    with pytest.raises(records.RecordError, match=needle) as info:
        RunRecord.read(path)
    assert info.value.field == records.WHOLE_FILE and str(path) in str(info.value)


def test_a_directory_or_fifo_in_a_records_place_is_named_without_blocking(tmp_path) -> None:
    (tmp_path / "d.json").mkdir()
    with pytest.raises(records.RecordError, match="a directory, not a record file"):
        RunRecord.read(tmp_path / "d.json")
    os.mkfifo(tmp_path / "f.json")  # opening it for reading would wait for a writer forever
    with pytest.raises(records.RecordError, match="not a regular file"):
        RunRecord.read(tmp_path / "f.json")
    with pytest.raises(FileNotFoundError):  # absent is a disk condition, not bad content
        RunRecord.read(tmp_path / "absent.json")


def test_older_records_take_defaults_and_unknown_fields_are_ignored(tmp_path) -> None:
    path = tmp_path / "r.json"
    path.write_text(json.dumps({"experiment_id": "x.y", "profile": "smoke", "setup": {}, "from_the_future": [1]}))
    rec = RunRecord.read(path)
    assert rec.status == "ok" and rec.metrics == {} and rec.wall_seconds == 0.0 and rec.schema == records.RECORD_SCHEMA


def test_nan_metrics_and_integer_seconds_read_back(tmp_path) -> None:
    """NaN is how an undefined statistic is stored (``core.stats``): it must read back, not be called malformed."""
    rec = _rec(wall_seconds=3)
    rec.metrics["auroc"] = Estimate(float("nan"), float("nan"), float("nan"), n=4, method="bootstrap")
    back = RunRecord.read(rec.write(tmp_path / "r.json"))
    assert back.wall_seconds == 3.0 and isinstance(back.wall_seconds, float)
    assert back.metrics["auroc"].value != back.metrics["auroc"].value


def test_an_unwritable_place_names_the_target_not_a_temporary_file(tmp_path) -> None:
    (tmp_path / "runs").write_text("a file where a directory should be")
    with pytest.raises(OSError) as info:
        _rec().write(tmp_path / "runs" / "smoke" / "x.y.json")
    assert info.value.filename == str(tmp_path / "runs" / "smoke" / "x.y.json")
    assert "cannot write" in info.value.strerror


def test_jsonl_checkpoint_round_trips_and_skips_a_torn_line(tmp_path) -> None:
    from agentmill.core.records import append_jsonl_checkpoint, read_jsonl_checkpoint

    p = tmp_path / "ckpt.jsonl"
    assert read_jsonl_checkpoint(p) == []
    with open(p, "a", encoding="utf-8") as f:
        append_jsonl_checkpoint(f, {"k": 1, "x": 0.1 + 0.2})
        append_jsonl_checkpoint(f, {"k": 2})
    assert read_jsonl_checkpoint(p) == [{"k": 1, "x": 0.1 + 0.2}, {"k": 2}]  # floats round-trip exactly
    with open(p, "a", encoding="utf-8") as f:
        f.write('{"k": 3, "v": [1.5')  # killed mid-append
    assert read_jsonl_checkpoint(p) == [{"k": 1, "x": 0.1 + 0.2}, {"k": 2}]


def test_append_jsonl_makes_the_folder_and_appends_one_durable_row_per_call(tmp_path) -> None:
    import numpy as np

    from agentmill.core.records import append_jsonl, read_jsonl_checkpoint

    p = tmp_path / "new" / "log.jsonl"
    append_jsonl(p, {"id": "a", "score": np.float32(0.5)})  # numpy scalars serialise like in records
    append_jsonl(p, {"id": "b"})
    assert p.read_text(encoding="utf-8") == '{"id": "a", "score": 0.5}\n{"id": "b"}\n'
    assert read_jsonl_checkpoint(p) == [{"id": "a", "score": 0.5}, {"id": "b"}]
