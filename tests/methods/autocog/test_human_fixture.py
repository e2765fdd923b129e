"""The vendored AutoCog human-data fixture (README deviation 11): uses 1 (integrity), 2 (scorer regression), 3 (the
committed metric sources rerun in the sandbox). The fixture is part of this repository, so nothing here skips."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from agentmill.methods.autocog import fixtures
from agentmill.methods.autocog.frame_metric import check_frame_source, run_frame_metric
from agentmill.methods.autocog.sandbox import SandboxViolation, TheoryRejected

FIX = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "autocog_human"

# Scorer regression: the authors' final leaderboards (leaderboard.md, last post-admit block) [C].
BINARY = {"pi_4": 0.760, "pi_5": 0.514, "pi_7": 0.510, "pi_6": 0.483, "pi_2": 0.402, "pi_3": 0.242, "pi_1": 0.000}
CARDINAL = {"pi_6": 0.570, "pi_7": 0.556, "pi_5": 0.522, "pi_3": 0.513, "pi_4": 0.287, "pi_1": 0.095, "pi_2": 0.000}


def test_fixture_is_vendored_and_verifies() -> None:
    assert fixtures.verify_fixture(FIX) == []
    man = fixtures.load_manifest(FIX)
    assert man["commit"].startswith("6761c69e") and man["source"] == "https://github.com/akjagadish/autocog"
    assert "Copyright (c) 2026 Akshay Kumar Jagadish" in (FIX / "LICENSE").read_text()
    notice = (FIX / "NOTICE.md").read_text()
    assert "6761c69e" in notice and "2026-11-25" in notice and notice.count("`results/") >= 24
    size = sum(p.stat().st_size for p in FIX.rglob("*") if p.is_file())
    assert size < 1_500_000  # about 1 MB [R]


def test_nothing_forbidden_is_vendored() -> None:
    names = [p.name for p in FIX.rglob("*")]
    assert not [n for n in names if "participants" in n or "excluded" in n or "_og" in n or n == "exp1.txt"]
    for run in ("binary", "cardinal"):
        assert sorted(p.name for p in (FIX / run / "data").iterdir()) == [
            f"round_{r:03d}_obs_{o:02d}.jsonl.gz" for r in range(5) for o in range(2)]
        keys = {k for p in (FIX / run / "data").iterdir() for row in fixtures.read_rows(p) for k in row}
        assert keys == {"subject_id", "option_a_ratings", "option_b_ratings", "response", "online_experiment_idx",
                        "online_subject_slot"}  # no identifiers, no browser flags


def test_data_counts_match_the_spec() -> None:
    # [D]: binary 247 participants / 23,712 rows; cardinal 218 / 20,544.
    assert fixtures.data_summary(FIX, "binary") == {"files": 10, "rows": 23712, "participants": 247}
    assert fixtures.data_summary(FIX, "cardinal") == {"files": 10, "rows": 20544, "participants": 218}


@pytest.mark.parametrize("run,expected", [("binary", BINARY), ("cardinal", CARDINAL)])
def test_scorer_regression_reproduces_the_authors_leaderboards(run, expected) -> None:
    r = fixtures.replay_scores(FIX, run)
    assert r["passed"] and r["expected"] == expected
    assert [k for k, _ in r["leaderboard"]] == list(expected)  # same order
    assert {k: round(v, 3) for k, v in r["leaderboard"]} == expected


def test_missing_real_value_rule_matters_on_the_cardinal_run() -> None:
    """Pitfall 16: the cardinal run has one null real value; dropping it (the project default) does NOT give the
    authors' numbers, which keep it with everyone at distance 1."""
    r = fixtures.replay_scores(FIX, "cardinal", on_missing_real="exclude")
    assert r["n_missing_real"] == 1 and not r["passed"]
    assert round(dict(r["leaderboard"])["pi_6"], 3) == 0.817


def test_scorer_regression_fails_on_a_wrong_number(tmp_path) -> None:
    fx = tmp_path / "fx"
    shutil.copytree(FIX, fx)
    (fx / "binary" / "leaderboard_final.json").write_text(json.dumps({**BINARY, "pi_5": 0.515}))
    assert not fixtures.replay_scores(fx, "binary")["passed"]
    assert fixtures.verify_fixture(fx) == ["binary/leaderboard_final.json: sha256 differs from the manifest"]


def test_gzipped_data_are_the_original_bytes() -> None:
    """NOTICE.md lists the sha256 of each original file; gunzip must give exactly those bytes."""
    import hashlib

    orig = fixtures.load_manifest(FIX)["originals"]
    p = FIX / "binary" / "data" / "round_000_obs_00.jsonl.gz"
    key = "results/human_decision_making_binary/ttb+wadd/observations/data/round_000_obs_00.jsonl"
    assert hashlib.sha256(gzip.decompress(p.read_bytes())).hexdigest() == orig[key]


@pytest.mark.slow
@pytest.mark.parametrize("run", ["binary", "cardinal"])
def test_committed_metric_sources_reproduce_real_values(run) -> None:
    """AC-13: 18 of 20 reproduce within 1e-9 (variances too); the two cardinal round-1 observations
    are listed as non-reproducible (their canonical files were rewritten after the metric ran)."""
    rows = fixtures.reproduce_metrics(FIX, run)
    assert len(rows) == 10
    bad = {r["obs_id"]: r for r in rows if r["status"] != "reproduced"}
    if run == "binary":
        assert bad == {}
    else:
        assert set(bad) == {"round_001_obs_00", "round_001_obs_01"}
        assert all(r["status"] == "non_reproducible" and "_og.jsonl" in r["reason"] for r in bad.values())
        assert abs(bad["round_001_obs_00"]["value"] - 0.6618055555555555) < 1e-12
    for r in rows:
        if r["status"] == "reproduced":
            assert r["abs_diff"] <= 1e-9 and r["variance_abs_diff"] <= 1e-9


def test_frame_metric_on_hand_checkable_rows() -> None:
    src = ("def metric(data: pd.DataFrame) -> float:\n"
           "    import pandas as pd\n"
           "    hits = [r['response'] == 0 for _, r in data.iterrows() if sum(r['option_a_ratings']) > 1]\n"
           "    return float(sum(hits) / len(hits))\n")
    rows = [{"subject_id": s, "option_a_ratings": a, "option_b_ratings": [0, 0], "response": r}
            for s, a, r in [(0, [1, 1], 0), (0, [1, 0], 1), (1, [1, 1], 1), (1, [1, 1], 0)]]
    res = run_frame_metric(src, rows)
    # pooled: 3 qualifying rows, 2 chose A -> 2/3; per subject 1.0 and 0.5 -> variance .0625
    assert abs(res["value"] - 2 / 3) < 1e-12 and abs(res["variance"] - 0.0625) < 1e-12 and res["error"] is None


def test_frame_metric_policy_refuses_pandas_io_and_contains_files() -> None:
    with pytest.raises(TheoryRejected, match="read_csv"):
        check_frame_source("def metric(data):\n    return pd.read_csv('x').shape[0]\n")
    with pytest.raises(TheoryRejected, match="to_csv"):
        check_frame_source("def metric(data):\n    data.to_csv('x')\n    return 0.0\n")
    with pytest.raises(TheoryRejected, match="import of 'os'"):
        check_frame_source("def metric(data):\n    import os\n    return 0.0\n")
    with pytest.raises(TheoryRejected, match="'io'"):  # the path to pandas' readers names a module of the OS layer
        check_frame_source("def metric(data):\n    return float(len(pd.io.parsers.readers.TextFileReader('x')))\n")
    with pytest.raises(SandboxViolation):  # a file read the static policy does not know: the audit hook refuses it
        run_frame_metric("def metric(data):\n    return float(len(np.fromregex('x', 'a', [('a', int)])))\n",
                         [{"subject_id": 0, "response": 0}])
