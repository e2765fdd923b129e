"""The tiny halves of CT-2…CT-5: hand-checkable counting, site matching and judges that can fail (their smoke runs
are in ``test_experiments``)."""

from __future__ import annotations

import numpy as np

from agentmill.core.stats import Estimate
from agentmill.experiments import get
from agentmill.experiments.e172_cliff_tokens.tiny_halves import _var, localization_counts, site_list


def _rec(correct, sites, k, n, cliffs):
    return {"correct": correct, "sites": sites, "k": k, "n": n, "cliffs": cliffs}


def _cl(pos, ty, t20=None):
    return {"pos": pos, "type": ty, "type_top20": t20 or ty}


def test_localization_counts_by_hand() -> None:
    so = {"pos": 2, "kind": "SO", "erred": True}
    uc = {"pos": 1, "kind": "UC", "erred": True}
    df = {"pos": 3, "kind": "DF", "erred": True}
    recs = [
        # SO error at index 2 (V̂ before it 40/64 ≥ 0.3), cliff on it (pos 3) typed SO: recalled, first cliff right
        _rec(False, [so], [64, 64, 40, 0, 0], [64] * 5, [_cl(3, "SO")]),
        # UC error at index 1 with V̂ 10/64 < 0.3: not qualifying; its cliff (pos 2) typed SO: UC share 0/1;
        # a DF error at index 3 flagged (pos 4) typed DF, top-20 type differs
        _rec(False, [uc, df], [64, 10, 0, 0, 0], [64] * 5, [_cl(2, "SO"), _cl(4, "DF", "UC")]),
        # off-law failing trace with a cliff: a first-cliff miss
        _rec(False, None, [64, 30, 0], [64] * 3, [_cl(2, "UC")]),
        # correct trace, nothing
        _rec(True, [], [64, 64], [64, 64], []),
    ]
    c = localization_counts(recs)
    assert (c["qualifying"], c["recalled"]) == (1, 1)
    assert (c["failing"], c["failing_with_cliff"], c["first_cliff_correct"]) == (3, 3, 2)
    assert c["SO"] == [1, 1] and c["UC"] == [0, 1]
    assert (c["DF_erred"], c["DF_flagged"], c["off_oracle"]) == (1, 1, 1)
    assert (c["cliffs"], c["top20_agree"]) == (4, 3)


def test_site_list_matches_the_planted_law() -> None:
    from agentmill.methods.cliff_tokens.chainadd import enumerate_chain

    ops = (38, 27, 10)  # 38 + 27 = 65 (carry: a site), then 65 + 10
    leaves = enumerate_chain(ops, "lsd")
    wrong = next(lf for lf in leaves if any(s.erred for s in lf.sites))
    sites = site_list(ops, list(wrong.ids))
    assert sites is not None and any(s["erred"] for s in sites)
    assert site_list(ops, list(wrong.ids[:-1]) + [ord("0") if wrong.ids[-1] != ord("0") else ord("1")]) is None


def test_laplace_variance_never_zero() -> None:
    assert _var(64, 64) > 0 and _var(0, 64) > 0
    assert np.isclose(_var(31, 62), 0.5 * 0.5 / 62)  # p̃ = 32/64


def test_tiny_judges_can_fail() -> None:
    loc = get("e172.cliff_tiny_localization")
    bad = {"ct3_tiny_recall": Estimate(0.6, 0.5, 0.7, n=100, method="x"),
           "ct3_tiny_first_cliff_precision": Estimate(0.5, 0.4, 0.6, n=100, method="x"),
           "ct4_tiny_so_typed_so": Estimate(0.5, 0.4, 0.6, n=100, method="x"),
           "ct4_tiny_uc_typed_uc": Estimate(0.5, 0.4, 0.6, n=100, method="x"),
           "ct4_tiny_df_flagged": Estimate(0.2, 0.1, 0.3, n=100, method="x")}
    assert set(loc.judge("full", bad).values()) == {"not_supported"}
    est = get("e172.cliff_tiny_estimator")
    assert est.judge("full", {"ct2_tiny_share_within_3se": Estimate.exact(0.9, n=50)}) == {
        "E172-CT2-tiny": "not_supported"}
    assert est.judge("full", {"ct2_tiny_share_within_3se": Estimate.exact(0.96, n=50)}) == {
        "E172-CT2-tiny": "supported"}
