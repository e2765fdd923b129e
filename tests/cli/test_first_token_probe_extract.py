"""``agentmill probe extract``: rollouts sampled by the real ``probe sample`` command become a store whose states
equal a direct capture; ``probe fit --acts`` reads stores; bad input exits 2 naming the line."""

from __future__ import annotations

import json
import shlex

import numpy as np
import pytest

from agentmill.cli.first_token_probe import EXTRACT_EXAMPLES
from agentmill.cli.main import build_parser, main


def test_examples_parse() -> None:
    parser = build_parser()
    for line in EXTRACT_EXAMPLES.splitlines()[1:]:
        if line.strip():
            parser.parse_args(shlex.split(line.strip())[1:])


@pytest.mark.slow
def test_extract_sampled_rollouts_equals_capture(tmp_path, capsys) -> None:
    from agentmill.methods.first_token_probe.capture import capture
    from agentmill.methods.first_token_probe.organism import load_organism
    from agentmill.methods.first_token_probe.relabel import rows_to_rollouts
    from agentmill.methods.first_token_probe.store import read_store

    rollouts = tmp_path / "rollouts.jsonl"
    assert main(["probe", "sample", "--allow-unvalidated", "--n-c", "1", "--n-n", "1", "--n-b", "1", "--n-d", "0",
                 "--k", "1", "--out", str(rollouts)]) == 0
    out = tmp_path / "acts"
    assert main(["probe", "extract", str(rollouts), "--positions", "think_open,frac:0:1:0.5", "--layers", "1,3",
                 "--out", str(out), "--allow-unvalidated"]) == 0
    assert "3 rollouts x 4 positions x 2 layers x d=64" in capsys.readouterr().out
    acts, rows, m = read_store(out)
    assert m["model"] == "tiny:tiny-refusal-locked" and m["positions"] == ["think_open", "frac:0", "frac:0.5",
                                                                            "frac:1"]
    lm = load_organism("locked", allow_unvalidated=True)[0]
    direct = capture(lm, rows_to_rollouts(rows), m["positions"], [1, 3])
    assert np.allclose(acts.H, direct.H, atol=2e-2, rtol=1e-2, equal_nan=True)
    # fitting needs both splits: this store holds probe_test only -> bad input
    assert main(["probe", "fit", "--acts", str(out)]) == 2
    assert "both probe_train and probe_test" in capsys.readouterr().err


def test_bad_rollouts_exit_2_naming_the_line(tmp_path, capsys) -> None:
    f = tmp_path / "r.jsonl"
    f.write_text(json.dumps({"rollout_id": "a", "template_id": "t", "split": "probe_test", "prompt_ids": [256, 65],
                             "sampled_ids": [66], "text": "x"}) + "\n\n" + '{"rollout_id": "b"}\n')
    assert main(["probe", "extract", str(f), "--out", str(tmp_path / "acts"), "--allow-unvalidated"]) == 2
    assert "line 3 lacks" in capsys.readouterr().err
    assert main(["probe", "extract", str(f), "--positions", "frac:1:0:0.1", "--out", str(tmp_path / "acts")]) == 2
    assert not (tmp_path / "acts").exists()
