"""The repeat-consistency metric's per-(subject, pair) counts (bincount over flat cells) against a plain loop."""

from __future__ import annotations

import numpy as np

from agentmill.methods.autocog.design import random_design
from agentmill.methods.autocog.metrics import TemplateMetric
from agentmill.methods.autocog.simulate import Data


def _loop_repeat_consistency(data: Data) -> float:
    same = pairs = 0.0
    for s in range(data.resp.shape[0]):
        for u in range(data.design.n_unique):
            r = data.resp[s][data.pair_idx[s] == u]
            n, na = len(r), int((r == 0).sum())
            pairs += n * (n - 1) / 2
            same += na * (na - 1) / 2 + (n - na) * (n - na - 1) / 2
    return same / pairs


def test_repeat_consistency_matches_a_plain_count() -> None:
    rng = np.random.default_rng(3)
    for _ in range(5):
        design = random_design(rng)
        pair_idx = design.schedules(rng, 7)
        data = Data(design, pair_idx, rng.integers(0, 2, pair_idx.shape))
        est = TemplateMetric("repeat_consistency")(data)
        assert est.value == _loop_repeat_consistency(data)  # integer counts: exactly equal, not approximately
        assert est.per_subject.shape == (7,)
