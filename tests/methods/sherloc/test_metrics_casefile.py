"""Metric semantics on hand-checked cases; the case-file parser, validator and renderer."""

from __future__ import annotations

import numpy as np
import pytest

from agentmill.methods.sherloc import (CaseFileError, Location, RepoSnapshot, aggregate, gold_locations, new_case_file,
                                       render, score, validate)
from agentmill.methods.sherloc.casefile import parse_final
from agentmill.methods.sherloc.evaluate import InstanceScores


def test_pure_insertion_and_adjacent_merge() -> None:
    diff = "--- a/x.py\n+++ b/x.py\n@@ -5,2 +5,4 @@\n ctx\n+a\n+b\n ctx\n@@ -9,3 +11,2 @@\n-r1\n ctx\n-r2\n"
    # insertion point 6 (counter after one context line); removals at 9 and 11 are not adjacent (10 is context)
    assert gold_locations(diff) == [Location("x.py", 6, 6), Location("x.py", 9, 9), Location("x.py", 11, 11)]
    diff2 = "--- a/x.py\n+++ b/x.py\n@@ -3,2 +3,1 @@\n-r1\n-r2\n"
    assert gold_locations(diff2) == [Location("x.py", 3, 4)]


def test_aggregate_excludes_no_gold_and_counts_failures() -> None:
    ok = score([Location("a.py", 1, 1)], [Location("a.py", 1, 2)])
    failed = score([Location("a.py", 1, 1)], [Location("a.py", 1, 1)], status="failed")
    no_gold = score([], [Location("a.py", 1, 1)])
    agg = aggregate([ok, failed, no_gold])
    assert agg["samples_no_gt"].value == 1
    assert agg["file_recall"].value == pytest.approx(0.5)
    assert agg["avg_prediction_tightness"].value == pytest.approx(0.25)  # (1/2 + 0) / 2
    assert isinstance(ok, InstanceScores) and ok.chunk_precision == 1.0


def test_location_rejects_bad_ranges() -> None:
    with pytest.raises(ValueError):
        Location("a.py", 0, 1)
    with pytest.raises(ValueError):
        Location("a.py", 5, 4)


ANSWER = """<findings>
- Location explanation: the check uses <=
- Root cause: off-by-one
- Solution idea: use <
- Dependencies: pkg/b.py:L2; the docs
- Testing impact: test_bound
- Location explanation: second spot
- Root cause: same
- Solution idea: same
- Dependencies: none
- Testing impact: none
- a stray bullet
</findings>
<locations>
pkg/a.py:L2-L3
pkg/b.py:2
pkg/a.py:3-9
not a location
</locations>"""
SNAP = RepoSnapshot.from_mapping({"pkg/a.py": "a\nb\nc\nd\n", "pkg/b.py": "x\ny\n"})


def test_parse_validate_render_round_trip() -> None:
    cf = parse_final(ANSWER, instance_id="i1", issue="bug")
    assert [(x["file"], x["start"], x["end"]) for x in cf["locations"]] == \
        [("pkg/a.py", 2, 3), ("pkg/b.py", 2, 2), ("pkg/a.py", 3, 9)]
    assert len(cf["findings"]) == 2 and cf["findings"][0]["dependencies"] == ["L2", "the docs"]
    assert "a stray bullet" in cf["notes"] and any("not a location" in n for n in cf["notes"])
    fixed, flags = validate(cf, SNAP)
    assert [(x["id"], x["start"], x["end"]) for x in fixed["locations"]] == [("L1", 2, 4), ("L2", 2, 2)]
    assert any("clamped from 9 to 4" in f for f in flags) and any("merged into L1" in f for f in flags)
    text = render(fixed, "full")
    assert "[L1] pkg/a.py:L2-L4" in text and "Root cause: off-by-one" in text
    assert "Root cause" not in render(fixed, "locations")
    again, _ = validate(parse_final(__import__("json").dumps(fixed)), SNAP)
    assert again["locations"] == fixed["locations"]


@pytest.mark.parametrize("field,value,pointer", [
    ("schema", "other/9", "/schema"), ("locations", [{"id": "L1", "file": "/etc/x", "start": 1, "end": 1}],
                                      "/locations/0/file"),
    ("locations", [{"id": "X", "file": "a.py", "start": 1, "end": 1}], "/locations/0/id"),
    ("findings", [{"location_ids": "L1"}], "/findings/0"),
    ("confidence", {"score": 1.5}, "/confidence/score")])
def test_malformed_case_file_names_the_field(field, value, pointer) -> None:
    cf = new_case_file("i1")
    cf[field] = value
    with pytest.raises(CaseFileError) as e:
        validate(cf)
    assert any(p.startswith(pointer) for p, _ in e.value.problems) and pointer in str(e.value)


def test_unknown_location_id_and_missing_file() -> None:
    cf = new_case_file("i1")
    cf["locations"] = [{"id": "L1", "file": "pkg/zz.py", "start": 1, "end": 1}]
    cf["findings"] = [{"location_ids": ["L7"], "explanation": "", "root_cause": "", "solution_idea": "",
                       "dependencies": [], "testing_impact": []}]
    with pytest.raises(CaseFileError) as e:
        validate(cf, SNAP)
    s = str(e.value)
    assert "/locations/0/file" in s and "/findings/0/location_ids/0" in s


def test_parse_needs_locations() -> None:
    with pytest.raises(ValueError, match="no <locations>"):
        parse_final("<findings>- Root cause: x</findings>")
    assert np.isfinite(len(parse_final("<locations>\n</locations>")["locations"]))
