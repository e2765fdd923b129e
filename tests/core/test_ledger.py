"""The hash-chained ledger: append, verify, tamper detection, resume at the head, torn-line repair, and a pinned head
hash so ledgers written before the move to core keep verifying and resuming."""

from __future__ import annotations

import hashlib
import json
import time

import numpy as np
import pytest

from agentmill.core.ledger import GENESIS, INLINE_MAX, Ledger, canonical, chain_hash


def _pinned_events(led: Ledger) -> None:
    led.append("config", "config", {"seed": 7, "name": "pinned", "x": [1.5, 2, None]})
    led.append("proposal", "r0/s1/propose", {"theory": "ttb", "params": np.array([0.25, 0.5])}, round=0, slot=1)
    led.append("data", "r0/s1/data", {"rows": list(range(600))}, round=0, slot=1, meta={"latency_s": 1.25})
    led.append("note", "r1/note", "ünïcode ✓", round=1)


# Computed with the ledger as it lived in methods/autocog/ledger.py, before it moved to core.
PINNED_HEAD = "15bc674e602d3320613a48e2bf17959fef6b2e2760540a2ff9b9e75c01ae2869"
PINNED_BLOB = "8dd163196e015555e583779de6f62713c678e31efa653f618ceb4006908c91e9"
PINNED_FILE_SHA256 = "86e5249dc56ca04048d3567754b5073994238458880a7d5f1ee5c9b0ddb845a2"  # with ts = 1750000000.5


def test_head_hash_and_line_bytes_are_pinned(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(time, "time", lambda: 1750000000.5)
    led = Ledger(tmp_path, run_id="pin")
    _pinned_events(led)
    assert led.head == PINNED_HEAD
    assert [p.name for p in (tmp_path / "blobs").iterdir()] == [PINNED_BLOB]
    assert hashlib.sha256((tmp_path / "ledger.jsonl").read_bytes()).hexdigest() == PINNED_FILE_SHA256


def test_head_does_not_depend_on_time(tmp_path) -> None:
    led = Ledger(tmp_path, run_id="pin")
    _pinned_events(led)
    assert led.head == PINNED_HEAD and led.verify() == []


def test_canonical_is_sorted_compact_and_numpy_aware() -> None:
    assert canonical({"b": 1, "a": [np.float64(0.5), np.arange(2)]}) == b'{"a":[0.5,[0,1]],"b":1}'
    with pytest.raises(TypeError, match="not JSON serialisable"):
        canonical({"x": object()})


def test_append_chains_and_stores_large_payloads_as_blobs(tmp_path) -> None:
    led = Ledger(tmp_path)
    assert led.head == GENESIS and not led.has("s1") and led.get("s1") is None
    e1 = led.append("a", "s1", {"x": 1})
    e2 = led.append("b", "s2", {"y": list(range(2000))}, round=3, slot=0)
    assert e1["prev_hash"] == GENESIS and e2["prev_hash"] == e1["hash"] == led.events[0]["hash"]
    assert e1["hash"] == chain_hash(GENESIS, "s1", "a", None, None, hashlib.sha256(b'{"x":1}').hexdigest())
    assert "payload" in e1 and "blob" in e2 and len(canonical({"y": list(range(2000))})) > INLINE_MAX
    assert led.get("s2") == {"y": list(range(2000))} and led.has("s2")
    assert led.verify() == []
    with pytest.raises(ValueError, match="duplicate"):
        led.append("a", "s1", {"x": 1})


def test_tampering_is_detected(tmp_path) -> None:
    led = Ledger(tmp_path)
    led.append("a", "s1", {"x": 1})
    led.append("b", "s2", {"y": list(range(2000))})
    lines = (tmp_path / "ledger.jsonl").read_text().splitlines()
    ev = json.loads(lines[0])

    edited = dict(ev, payload={"x": 2})
    (tmp_path / "ledger.jsonl").write_text(json.dumps(edited) + "\n" + lines[1] + "\n")
    problems = Ledger(tmp_path).verify()
    assert any("payload hash mismatch" in p for p in problems) and any("chain broken" in p for p in problems)

    relabelled = dict(ev, kind="forged")
    (tmp_path / "ledger.jsonl").write_text(json.dumps(relabelled) + "\n" + lines[1] + "\n")
    assert Ledger(tmp_path).verify() == ["seq 0: hash chain broken"]

    (tmp_path / "ledger.jsonl").write_text("\n".join(lines) + "\n")
    assert Ledger(tmp_path).verify() == []
    (tmp_path / "blobs" / json.loads(lines[1])["blob"]).unlink()
    assert Ledger(tmp_path).verify() == [f"seq 1: blob {json.loads(lines[1])['blob']} missing"]


def test_reopening_resumes_at_the_head(tmp_path) -> None:
    ref = Ledger(tmp_path / "ref")
    _pinned_events(ref)
    first = Ledger(tmp_path / "d")
    first.append("config", "config", {"seed": 7, "name": "pinned", "x": [1.5, 2, None]})
    first.append("proposal", "r0/s1/propose", {"theory": "ttb", "params": [0.25, 0.5]}, round=0, slot=1)
    resumed = Ledger(tmp_path / "d")  # as after a kill: a fresh object on the same directory
    assert resumed.head == first.head and len(resumed.events) == 2 and resumed.repaired is None
    assert resumed.get("r0/s1/propose") == {"theory": "ttb", "params": [0.25, 0.5]}
    for kind, step, payload, kw in [("data", "r0/s1/data", {"rows": list(range(600))}, {"round": 0, "slot": 1}),
                                    ("note", "r1/note", "ünïcode ✓", {"round": 1})]:
        if not resumed.has(step):
            resumed.append(kind, step, payload, **kw)
    assert resumed.head == ref.head == PINNED_HEAD and resumed.verify() == []


def test_torn_last_line_is_truncated_and_reported(tmp_path) -> None:
    led = Ledger(tmp_path)
    led.append("a", "s1", {"x": 1})
    led.append("b", "s2", {"x": 2})
    intact = (tmp_path / "ledger.jsonl").read_bytes()
    with open(tmp_path / "ledger.jsonl", "ab") as f:
        f.write(b'{"seq": 2, "trunc')  # a crash mid-write
    led2 = Ledger(tmp_path)
    assert led2.repaired and "torn" in led2.repaired and len(led2.events) == 2 and led2.verify() == []
    assert (tmp_path / "ledger.jsonl").read_bytes() == intact
    led2.append("c", "s3", {"x": 3})
    assert Ledger(tmp_path).verify() == [] and Ledger(tmp_path).repaired is None


def test_a_corrupt_line_before_the_last_is_refused(tmp_path) -> None:
    led = Ledger(tmp_path)
    led.append("a", "s1", {"x": 1})
    led.append("b", "s2", {"x": 2})
    lines = (tmp_path / "ledger.jsonl").read_bytes().split(b"\n")
    (tmp_path / "ledger.jsonl").write_bytes(lines[0][:-5] + b"\n" + lines[1] + b"\n")
    with pytest.raises(ValueError, match="line 1 is corrupt"):
        Ledger(tmp_path)
