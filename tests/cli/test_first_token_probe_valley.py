"""``agentmill probe valley`` through main([...]) on the shipped tiny locked organism: sampled in-process, or read
back from ``probe sample`` files (after ``probe label``); exit 3 on too few labels per class, 2 on bad input."""

from __future__ import annotations

import pytest

from agentmill.cli.main import main

SMALL = ["--allow-unvalidated", "--n-c", "3", "--n-n", "3", "--n-b", "2", "--n-d", "2", "--k", "1",
         "--k-contested", "2"]


@pytest.mark.slow
def test_valley_sampled_and_from_files(tmp_path, capsys) -> None:
    assert main(["probe", "valley", *SMALL, "--min-per-class", "2", "--bootstrap", "20",
                 "--plot", str(tmp_path / "v.png")]) == 0
    out = capsys.readouterr().out
    assert "valley depth D =" in out and (tmp_path / "v.png").exists()
    assert main(["probe", "valley", *SMALL, "--bootstrap", "20", "--min-per-class", "500"]) == 3
    assert "precondition not met" in capsys.readouterr().out
    for split in ("probe_train", "probe_test"):
        assert main(["probe", "sample", *SMALL, "--split", split, "--out", str(tmp_path / f"{split}.jsonl")]) == 0
    assert main(["probe", "label", str(tmp_path / "probe_train.jsonl"), "--judge", "rule:regex_b",
                 "--out", str(tmp_path / "train_relabelled.jsonl")]) in (0, 3)
    capsys.readouterr()
    assert main(["probe", "valley", *SMALL, "--train", str(tmp_path / "train_relabelled.jsonl"), "--test",
                 str(tmp_path / "probe_test.jsonl"), "--labels", "truth", "--min-per-class", "2",
                 "--bootstrap", "20"]) == 0
    assert "labels: truth" in capsys.readouterr().out
    assert main(["probe", "valley", *SMALL, "--train", str(tmp_path / "probe_train.jsonl")]) == 2
    assert main(["probe", "valley", *SMALL, "--fractions", "0,a"]) == 2
