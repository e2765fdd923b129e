"""E175 perf: the early-exit capture equals the full forward's hidden state, the decode arms do equal work, and the
smoke profile runs end to end (measure, judge, plots) through the CLI as a user runs it."""

from __future__ import annotations

import json

import pytest

from agentmill.experiments.e175_crosscoder import perf


@pytest.fixture(scope="module")
def tiny():
    from agentmill.lm import load_lm

    return load_lm("tiny:new?d=32&layers=3&heads=2&max_len=128&seed=3")


def test_early_exit_capture_equals_the_full_forward_and_leaves_no_hook(tiny) -> None:
    import torch

    ids = torch.tensor([[1, 5, 9, 200, 7, 3], [4, 4, 8, 16, 23, 42]])
    for layer in range(3):
        want = tiny.forward(ids, hidden_states=True).hidden_states[layer + 1]
        got = perf.capture_early(tiny, ids, layer)
        assert torch.equal(got, want)
    before = tiny.forward(ids).logits
    assert torch.equal(tiny.forward(ids).logits, before)  # the stopping hook was removed


def test_greedy_steps_decodes_exactly_n_tokens_like_a_full_reencode(tiny) -> None:
    import torch

    ids = list(tiny.render("hello there"))
    toks = perf.greedy_steps(tiny, ids, 6)
    assert len(toks) == 6
    seq = list(ids)
    for t in toks:  # each cached step's argmax is the argmax of re-encoding the whole sequence
        assert int(tiny.forward(torch.tensor([seq])).logits[0, -1].argmax()) == t
        seq.append(t)


@pytest.mark.slow
def test_smoke_through_the_cli_records_every_metric_and_a_plot(tmp_path) -> None:
    from agentmill.cli.main import main

    assert main(["run", "e175.crosscoder_perf", "--profile", "smoke", "--runs-dir", str(tmp_path)]) == 0
    rec = json.loads((tmp_path / "smoke" / "e175.crosscoder_perf.json").read_text())
    metrics = rec["metrics"] if "metrics" in rec else rec["result"]["metrics"]
    for name in ("pf7_step_s", "pf9_read_mb_s", "pf4_hook_overhead_observed", "pf5_route_overhead_observed",
                 "pf6_time_ratio_observed", "pf6_max_abs_diff"):
        assert name in metrics, name
    assert rec["data"]["decode"]["hook_tokens_identical"] is True
    assert rec["data"]["capture"]["max_abs_diff"] == 0.0
    assert "precondition" not in rec["data"]
    assert perf.plots(rec["data"], tmp_path)
