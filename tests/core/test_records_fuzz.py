"""Property-based fuzzing of record parsing (issue 20): whatever sits in a record's place, ``RunRecord.read`` either
returns a record whose every field has its documented type, or raises the one documented ``RecordError`` naming
the file and a field — never another exception. The runner's ``load_record`` on the same inputs never raises,
moves a malformed file to ``history/`` byte for byte, and reports it as not run.

Inputs: a valid record with fields replaced by random JSON of any type (NaN and infinities included), fields
dropped, unknown fields added, random top-level JSON, deep nesting, random bytes and invalid UTF-8 spliced into
valid text, truncation, and a directory. Budget: a few seconds (the examples write small files to a temp dir).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from agentmill.core import records
from agentmill.core.records import RecordError, RunRecord
from agentmill.core.stats import Estimate
from agentmill.experiments.runner import load_record, record_path

FIELDS = tuple(f.name for f in dataclasses.fields(RunRecord))
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow],
                    derandomize=True)  # derandomized: CI sees the same examples on every run


@pytest.fixture(scope="module")
def scratch(tmp_path_factory) -> Path:
    """One directory for every example (a fresh temp dir per example costs more than the parse)."""
    return tmp_path_factory.mktemp("records_fuzz")

scalars = (st.none() | st.booleans() | st.integers(min_value=-(10 ** 30), max_value=10 ** 30)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12))
json_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)


def _valid() -> dict:
    rec = RunRecord(experiment_id="x.y", profile="smoke", setup={"n": 3}, status="ok",
                    metrics={"m": Estimate(0.5, 0.4, 0.6, n=3, method="bootstrap"), "k": Estimate.exact(2, n=2)},
                    verdicts={"C-1": "supported", "C-2": "not_judged"}, data={"series": [1, 2, 3]},
                    model="hf:smollm2", version="1", git_commit="abc", packages={"numpy": "2.0"},
                    environment={"cpus": 2}, started_at="2026-06-22T10:00:00+00:00", wall_seconds=1.5,
                    setup_hash="h")
    return rec.to_dict()


@st.composite
def record_objects(draw) -> object:
    """A record dict with some fields swapped for random JSON, dropped or added; sometimes a metric or a verdict
    entry is broken instead; sometimes not a dict at all."""
    if draw(st.integers(0, 9)) == 0:
        return draw(json_values)
    d = _valid()
    for name in draw(st.lists(st.sampled_from(FIELDS), max_size=4, unique=True)):
        if draw(st.booleans()):
            d[name] = draw(json_values)
        else:
            d.pop(name)
    if draw(st.booleans()):
        d["metrics"] = dict(d.get("metrics") or {}) if isinstance(d.get("metrics"), dict) else d.get("metrics")
        if isinstance(d["metrics"], dict):
            entry = dict(_valid()["metrics"]["m"])
            key = draw(st.sampled_from(("value", "lo", "hi", "n", "level", "method", "extra")))
            entry[key] = draw(json_values)
            d["metrics"][draw(st.text(max_size=5))] = entry
    if draw(st.booleans()) and isinstance(d.get("verdicts"), dict):
        d["verdicts"] = {**d["verdicts"], draw(st.text(max_size=5)): draw(json_values)}
    for key in draw(st.lists(st.text(max_size=8), max_size=2)):
        d.setdefault(key, draw(json_values))
    return d


@st.composite
def file_contents(draw) -> bytes:
    """Bytes for a record file: JSON of a (possibly broken) record, maybe corrupted at the byte level."""
    raw = json.dumps(draw(record_objects()), allow_nan=True).encode("utf-8")
    how = draw(st.sampled_from(("as is", "as is", "as is", "truncate", "splice bytes", "invalid utf-8", "deep")))
    if how == "truncate":
        raw = raw[:draw(st.integers(0, len(raw)))]
    elif how == "splice bytes":
        at = draw(st.integers(0, len(raw)))
        raw = raw[:at] + draw(st.binary(min_size=1, max_size=8)) + raw[at:]
    elif how == "invalid utf-8":
        at = draw(st.integers(0, len(raw)))
        bad = draw(st.sampled_from((b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf8\x88\x80\x80\x80")))
        raw = raw[:at] + bad + raw[at:]
    elif how == "deep":
        depth = draw(st.sampled_from((10, 900, 5_000, 200_000)))
        inner = b"[" * depth + b"]" * depth
        raw = b'{"experiment_id": "x.y", "profile": "smoke", "setup": {}, "data": {"d": ' + inner + b"}}"
    return raw


def _assert_valid(rec: RunRecord) -> None:
    """Every field has its documented type, and the record survives its own write and read."""
    assert isinstance(rec.experiment_id, str) and rec.experiment_id.strip()
    assert isinstance(rec.profile, str) and rec.profile.strip()
    assert isinstance(rec.setup, dict) and isinstance(rec.data, dict) and isinstance(rec.environment, dict)
    assert rec.status in records.STATUSES
    assert isinstance(rec.metrics, dict) and all(isinstance(v, Estimate) for v in rec.metrics.values())
    for est in rec.metrics.values():
        assert all(isinstance(getattr(est, f), float) for f in ("value", "lo", "hi", "level"))
        assert isinstance(est.n, int) and not isinstance(est.n, bool) and isinstance(est.method, str)
    assert isinstance(rec.verdicts, dict) and all(v in records.VERDICTS for v in rec.verdicts.values())
    assert all(isinstance(v, str) for v in rec.packages.values())
    for name in ("error", "model", "git_commit"):
        assert getattr(rec, name) is None or isinstance(getattr(rec, name), str)
    assert isinstance(rec.version, str) and isinstance(rec.started_at, str) and isinstance(rec.setup_hash, str)
    assert isinstance(rec.wall_seconds, float) and math.isfinite(rec.wall_seconds) and rec.wall_seconds >= 0
    assert isinstance(rec.schema, int) and 1 <= rec.schema <= records.RECORD_SCHEMA


def _check_read(path: Path) -> RunRecord | None:
    try:
        rec = RunRecord.read(path)
    except RecordError as e:  # the one documented error: names the file and a field, on one line
        assert e.path == str(path) and str(path) in str(e) and "\n" not in str(e)
        assert e.field == records.WHOLE_FILE or e.field.split("[", 1)[0] in FIELDS
        assert e.field in str(e)
        event(f"RecordError at {e.field.split('[', 1)[0]}")
        return None
    event("a valid record")
    _assert_valid(rec)
    again = path.with_name("again.json")
    assert RunRecord.read(rec.write(again)).to_bytes() == rec.to_bytes()
    return rec


@SETTINGS
@given(content=file_contents())
@example(content=json.dumps(_valid()).encode())  # the property is not vacuous: a valid record passes
def test_read_returns_a_valid_record_or_the_one_documented_error(scratch, content: bytes) -> None:
    path = scratch / "r.json"
    path.write_bytes(content)
    _check_read(path)


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])  # capsys read per example
@given(content=file_contents() | st.just(None))
def test_load_record_never_raises_and_keeps_a_malformed_file_byte_for_byte(scratch, capsys,
                                                                           content: bytes | None) -> None:
    """``None`` stands for a directory in the record's place (with a file inside, so it is not just empty)."""
    runs = scratch / "runs"
    shutil.rmtree(runs, ignore_errors=True)
    path = record_path(runs, "smoke", "x.y")
    path.parent.mkdir(parents=True)
    if content is None:
        path.mkdir()
        (path / "inside.txt").write_text("kept")
    else:
        path.write_bytes(content)
    valid = _check_read(path) if content is not None else None
    capsys.readouterr()
    rec = load_record(runs, "smoke", "x.y")
    notice = capsys.readouterr().err
    moved = list((path.parent / "history").glob("x.y.malformed-*.json"))
    if valid is not None and valid.experiment_id == "x.y" and valid.profile == "smoke":
        assert rec is not None and rec.to_bytes() == valid.to_bytes() and not moved and not notice
    else:
        assert rec is None and not os.path.lexists(path) and len(moved) == 1
        assert notice.count("\n") == 1 and str(path) in notice and str(moved[0]) in notice
        if content is None:
            assert (moved[0] / "inside.txt").read_text() == "kept"
        else:
            assert moved[0].read_bytes() == content
