"""``agentmill crosscoder``: toy training, collect → train → diagnose → steer on tiny models."""

from __future__ import annotations

import json

import pytest

from agentmill.cli.main import main


def test_toy_trains_and_prints_diagnostics(tmp_path, capsys) -> None:
    out = tmp_path / "cc"
    assert main(["crosscoder", "toy", "--steps", "5", "--rows", "1000", "--dict-size", "16", "--k", "2",
                 "--partition", "0.1,0.1", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert '"partition_violation": 0.0' in text and (out / "config.json").exists()


@pytest.mark.slow  # ~4 s: two random tiny models, a store, a crosscoder and two greedy runs
def test_collect_train_diagnose_steer(tmp_path, capsys) -> None:
    texts = tmp_path / "t.txt"
    texts.write_text("\n".join(f"User: message number {i}" for i in range(20)))
    store, cc = tmp_path / "store", tmp_path / "cc"
    a, b = "tiny:new?layers=2&d=16&heads=2&max_len=64", "tiny:new?layers=2&d=16&heads=2&max_len=64&seed=1"
    assert main(["crosscoder", "collect", "--a", a, "--b", b, "--layer", "1", "--texts", str(texts), "--out",
                 str(store)]) == 0
    assert main(["crosscoder", "train", "--store", str(store), "--dict-size", "32", "--k", "4", "--steps", "20",
                 "--out", str(cc)]) == 0
    assert main(["crosscoder", "diagnose", "--cc", str(cc), "--store", str(store)]) == 0
    capsys.readouterr()
    assert main(["crosscoder", "steer", "--lm", a, "--cc", str(cc), "--layer", "1", "--features", "0,1",
                 "--alpha", "1", "--prompt", "User: hi", "--max-new", "4"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["clean"] == res["steered"]  # α = 1 is a no-op


def test_sibling_show_reads_the_card_without_loading_a_model(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("AGENTMILL_CACHE", str(tmp_path / "cache"))
    assert main(["crosscoder", "sibling", "--show"]) == 0
    assert "not trained and gated on this machine" in capsys.readouterr().out
