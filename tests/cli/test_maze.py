from __future__ import annotations

import json

import pytest

from agentmill.cli.main import main


def test_solve_prints_exact_and_closed_form(capsys) -> None:
    assert main(["maze", "solve", "--W", "4", "--K", "6", "--L", "2", "--policy", "sft"]) == 0
    out = capsys.readouterr().out
    assert "exact E[T]          2190" in out and "SFT closed form     2190" in out and "T* = K(2W-1) 42" in out


def test_solve_base_with_monte_carlo(capsys) -> None:
    assert main(["maze", "solve", "--W", "4", "--K", "5", "--L", "2", "--mc", "500"]) == 0
    out = capsys.readouterr().out
    assert "371.5" in out and "Monte Carlo" in out and "500 episodes" in out


def test_train_sft_and_write_policy(capsys, tmp_path) -> None:
    out_file = tmp_path / "p.json"
    assert main(["maze", "train", "--method", "sft", "--W", "3", "--K", "4", "--L", "2", "--sft-steps", "300",
                 "--out", str(out_file)]) == 0
    out = capsys.readouterr().out
    assert "backward-facing logits over all steps: 0" in out
    blob = json.loads(out_file.read_text())
    assert blob["config"]["sft_steps"] == 300 and len(blob["theta"]) == 3
    assert all(v == 0.0 for row in blob["theta"] for v in row[1])   # bwd logits untouched


def test_train_rlvr_exact(capsys) -> None:
    assert main(["maze", "train", "--method", "rlvr-exact", "--W", "3", "--K", "3", "--L", "2"]) == 0
    out = capsys.readouterr().out
    assert "optimum T* 15 (ratio 1.0" in out


@pytest.mark.parametrize("argv,needle", [
    (["maze", "solve", "--W", "1"], "W must be an integer >= 2"),
    (["maze", "solve", "--L", "0"], "L must be an integer >= 1"),
    (["maze", "solve", "--mc", "1"], "--mc must be >= 2"),
    (["maze", "train", "--method", "rlvr", "--reinforce-batch", "0"], "--reinforce-batch must be > 0"),
])
def test_bad_input_exits_2(capsys, argv, needle) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1


def test_unknown_method_is_an_argparse_error() -> None:
    with pytest.raises(SystemExit) as e:
        main(["maze", "train", "--method", "ppo"])
    assert e.value.code == 2
