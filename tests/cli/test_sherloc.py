"""``agentmill sherloc`` and ``agentmill envs pyrepo``: real commands through ``main`` on the fixture package
(private cache, no network)."""

from __future__ import annotations

import json

import pytest

from agentmill.cli.main import main


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("AGENTMILL_CACHE", str(tmp_path / "cache"))


@pytest.mark.slow  # builds and mines the fixture package in a fresh cache
def test_localize_validate_inject(tmp_path, capsys) -> None:
    out = tmp_path / "cf.jsonl"
    assert main(["sherloc", "localize", "--package", "fixture", "--n", "2", "--out", str(out)]) == 0
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == 2 and all(r["status"] == "success" for r in rows)
    assert main(["sherloc", "localize", "--package", "fixture", "--n", "2", "--out", str(out)]) == 0
    assert len(out.read_text().splitlines()) == 2  # ids already written are skipped
    assert main(["sherloc", "validate", str(out), "--package", "fixture", "--n", "2"]) == 0
    assert main(["sherloc", "inject", str(out), "--mode", "locations"]) == 0
    assert "Suspect locations:" in capsys.readouterr().out
    assert main(["envs", "pyrepo", "mutate", "--package", "fixture", "--n", "2", "--out",
                 str(tmp_path / "t.jsonl")]) == 0
    assert len((tmp_path / "t.jsonl").read_text().splitlines()) == 2
    ren = tmp_path / "cf-renamed.jsonl"  # the memorisation control: same instances, renamed code and issue
    assert main(["sherloc", "localize", "--package", "fixture", "--n", "2", "--renamed", "--out", str(ren)]) == 0
    rrows = [json.loads(x) for x in ren.read_text().splitlines()]
    assert [r["instance_id"] for r in rrows] == [r["instance_id"] + "+renamed" for r in rows]
    assert all(r["trace"]["tool_calls"].get("codebase_search") for r in rrows)  # it searched the renamed code


def test_validate_names_the_bad_field(tmp_path, capsys) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema": "agentmill.casefile/1", "instance_id": "x", "repo": {"name": "r",
                               "commit": ""}, "issue_sha256": "", "locations": [{"id": "L1", "file": "../etc",
                               "start": 0, "end": 1}], "findings": [], "notes": []}))
    assert main(["sherloc", "validate", str(bad)]) == 1
    out = capsys.readouterr().out
    assert "/locations/0/file" in out and "/locations/0/start" in out


def test_schema_and_list(capsys) -> None:
    assert main(["sherloc", "schema"]) == 0
    assert json.loads(capsys.readouterr().out)["properties"]["schema"]["const"] == "agentmill.casefile/1"
    assert main(["envs", "pyrepo", "list"]) == 0
    rows = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert {r["package"] for r in rows} == {"cachetools==8.0.1", "cachetools==8.0.0", "toolz==1.2.0",
                                                "boltons==26.2.0"}
    assert not any(r["cached"] for r in rows)  # a fresh cache: nothing fetched
