"""Valley depth and the defense comparison on hand-built score and outcome arrays."""

from __future__ import annotations

import numpy as np
import pytest

from agentmill.methods.first_token_probe.defenses import compare_arm, gate_outcomes, make_arm
from agentmill.methods.first_token_probe.synthetic import profile_amplitude
from agentmill.methods.first_token_probe.valley import valley_depth


def test_valley_depth_of_perfect_and_dipping_scores() -> None:
    y = np.tile([0, 1], 20)
    g = np.repeat(np.arange(10), 4)
    perfect = np.tile(y[:, None].astype(float), (1, 3))
    curve, d = valley_depth(perfect, y, g, (0.0, 0.5, 1.0), n_boot=50)
    assert curve == [1.0, 1.0, 1.0] and d.value == 0.0
    dip = perfect.copy()
    dip[:, 1] = 0.5  # mid-trace scores carry nothing: AUROC 0.5
    curve, d = valley_depth(dip, y, g, (0.0, 0.5, 1.0), n_boot=50)
    assert curve[1] == 0.5 and d.value == pytest.approx(0.5)
    with pytest.raises(ValueError):
        valley_depth(perfect, y, g, (0.0, 0.2, 1.0))
    assert profile_amplitude("valley", 0.5) == pytest.approx(0.0) and profile_amplitude("flat", 0.5) == 1.0


def test_compare_arm_pareto_rule_and_gate() -> None:
    cats = np.array(["C"] * 20 + ["B"] * 20)
    g = np.repeat(np.arange(10), 4)
    base = np.array([0.0] * 20 + [0.0] * 20)          # complies with everything: HC = 1, BR = 0
    better = np.array([1.0] * 20 + [0.0] * 20)        # refuses every C, no B: a Pareto improvement
    worse = np.array([1.0] * 20 + [1.0] * 20)         # refuses everything: HC down, BR up
    r = compare_arm("better", base, better, cats, g, n_boot=200)
    assert r.pareto and r.d_hc.value == -1.0 and r.d_br.value == 0.0
    r2 = compare_arm("worse", base, worse, cats, g, n_boot=200)
    assert not r2.pareto and r2.raises_br and r2.moves_hc
    same = compare_arm("same", base, base, cats, g, n_boot=50)
    assert not same.pareto and not same.moves_hc and not same.moves_br
    assert gate_outcomes(base, np.linspace(0, 1, 40), 1.01).tolist() == base.tolist()
    assert make_arm("probe_gate:tau=0.3").gate_tau == 0.3
    with pytest.raises(ValueError):
        make_arm("pray")
