"""J-3: the within-domain permutation control (it removes item-level agreement but keeps domain-level agreement),
the line-swap corruption, registration, and a smoke run of measure() and plots()."""

from __future__ import annotations

import numpy as np
import pytest

from agentmill.experiments.e167_world_model import MODULES
from agentmill.experiments.e167_world_model.judge_tracks_truth import (
    CLAIMS,
    EXPERIMENT,
    SETUPS,
    _swap_lines,
    permuted_spearman,
)


def test_registered_and_pre_registered() -> None:
    assert MODULES[-1] == "judge_tracks_truth" and EXPERIMENT.id == "e167.wm_judge_tracks_truth"
    assert EXPERIMENT.quick_check and not EXPERIMENT.parallel_safe
    ep, perm = CLAIMS
    assert (ep.metric, ep.direction, ep.threshold) == ("j3_spearman_endpoint", ">=", 0.6)
    assert (perm.metric, perm.direction, perm.threshold, perm.upper) == ("j3_spearman_permuted", "in", -0.05, 0.05)
    assert SETUPS["full"].judge == "hf:smollm2" and SETUPS["full"].judged and not SETUPS["quick"].judged


def test_permuted_spearman_removes_item_level_agreement() -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=400)
    groups = np.array(["a", "b"] * 200)
    assert abs(permuted_spearman(x, x + 0.1 * rng.normal(size=400), groups, 30, rng)) < 0.03
    # one item per group: nothing to permute, the agreement stays
    assert permuted_spearman(x[:5], x[:5], np.arange(5), 3, rng) == pytest.approx(1.0)


def test_permuted_spearman_keeps_domain_level_agreement() -> None:
    """Judge and rule both higher in domain b, unrelated within domains: the control does not reach 0 (it can
    fail), while a permutation across all items would."""
    rng = np.random.default_rng(1)
    groups = np.repeat(["a", "b"], 200)
    judge = rng.normal(size=400) + 2 * (groups == "b")
    rule = rng.normal(size=400) + 2 * (groups == "b")
    assert permuted_spearman(judge, rule, groups, 50, rng) > 0.4
    assert abs(permuted_spearman(judge, rule, np.zeros(400), 50, rng)) < 0.05


def test_swap_lines() -> None:
    rng = np.random.default_rng(0)
    obs, donor = "a\nb\nc", "x\ny\nb"
    out = _swap_lines(obs, donor, 2, rng).split("\n")
    assert len(out) == 3 and sum(ln in ("x", "y") for ln in out) == 2
    assert _swap_lines("a", "a", 1, rng) == "Nothing happens."


@pytest.mark.slow
def test_smoke_measure_and_plots(tmp_path, monkeypatch) -> None:
    pytest.importorskip("torch")
    from agentmill.core.executor import make_executor
    from agentmill.experiments.protocol import RunContext

    monkeypatch.setenv("AGENTMILL_CACHE", str(tmp_path / "cache"))
    ctx = RunContext(profile="smoke", model="none", executor=make_executor("serial"), work_dir=tmp_path)
    out = EXPERIMENT.measure(SETUPS["smoke"], ctx)
    assert "j3_spearman_permuted_observed" in out and "j3_spearman_smollm2_observed" in out
    assert ctx.data["n_items"] == sum(v["n"] for v in ctx.data["by_variant"].values())
    assert {"truth", "corrupt1"} <= set(ctx.data["by_variant"])
    assert ctx.data["by_variant"]["truth"]["rule_mean"] == 5.0
    paths = EXPERIMENT.plots(ctx.data, tmp_path)
    assert paths and all(p.is_file() for p in paths)
