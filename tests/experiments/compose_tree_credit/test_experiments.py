"""Every C-tree-credit experiment's smoke measure() and plots(), plus the registration and the claim rules."""

from __future__ import annotations

import importlib

import pytest

from agentmill.experiments.compose_tree_credit import MODULES
from agentmill.experiments.protocol import RunContext

KEYDOOR = ("signal_keydoor", "learning_keydoor", "unique_obs_control")
TEXTWORLD = ("signal_textworld", "learning_textworld")


def _run(name: str, tmp_path):
    exp = importlib.import_module(f"agentmill.experiments.compose_tree_credit.{name}").EXPERIMENT
    ctx = RunContext(profile="smoke", model="none", executor=None, work_dir=tmp_path)
    metrics = exp.measure(exp.setups["smoke"], ctx)
    for c in exp.claims:
        assert c.metric in metrics, (name, c.metric)
    paths = exp.plots(ctx.data, tmp_path)
    assert paths and all(p.exists() and p.stat().st_size > 0 for p in paths)
    assert set(exp.judge("smoke", metrics, ctx.data).values()) == {"not_judged"}
    return exp, metrics, ctx


def test_modules_registered() -> None:
    assert set(MODULES) == set(KEYDOOR + TEXTWORLD + ("learning_lm",))
    ids = {importlib.import_module(f"agentmill.experiments.compose_tree_credit.{m}").EXPERIMENT.id for m in MODULES}
    assert ids == {f"compose_tree_credit.{m}" for m in MODULES}


@pytest.mark.parametrize("name", KEYDOOR)
def test_keydoor_smoke(name: str, tmp_path) -> None:
    _run(name, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("name", TEXTWORLD)
def test_textworld_smoke(name: str, tmp_path) -> None:
    pytest.importorskip("textworld")
    _run(name, tmp_path)


def test_unique_obs_control_reports_where_the_difference_sits(tmp_path) -> None:
    _, m, _ = _run("unique_obs_control", tmp_path)
    assert m["indep_max_abs_diff"].value == 0.0  # no shared prefix, no repeated state: exactly GRPO
    assert m["tree_max_abs_diff_nonbranch_rows"].value <= 1e-12
    assert m["tree_max_abs_diff"].value == m["tree_max_abs_diff_branch_rows"].value


def test_learning_claim_arms_are_required() -> None:
    from dataclasses import replace

    from agentmill.experiments.compose_tree_credit.learning import Setup, measure_learning

    ctx = RunContext(profile="smoke", model="none", executor=None, work_dir=None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="include the claim's two"):
        measure_learning(replace(Setup(), arms=("tree_g2po",)), ctx)


def test_claims_are_the_preregistered_rules() -> None:
    from agentmill.experiments.compose_tree_credit import learning_keydoor, signal_keydoor, unique_obs_control

    rules = {c.id: (c.metric, c.direction, c.threshold, c.ci_bound, c.rule)
             for e in (signal_keydoor, learning_keydoor, unique_obs_control) for c in e.EXPERIMENT.claims}
    assert rules["TC-KD-a-merge"] == ("merge_ratio", ">=", 1.0, 1.0, "two_part")
    assert rules["TC-KD-a-informative"] == ("informative_ratio", ">=", 1.0, 1.0, "two_part")
    assert rules["TC-KD-b-noninferior"] == ("auroc_diff_tree_indep_g2po", ">=", -0.02, -0.02, "two_part")
    assert rules["TC-KD-b-graph"] == ("auroc_diff_indep_g2po_grpo", ">=", 0.0, 0.0, "two_part")
    assert rules["TC-KD-c"] == ("wilcoxon_p", "<=", 0.05, None, "exact")
    assert rules["TC-NC"] == ("tree_max_abs_diff", "<=", 0.0, None, "exact")
