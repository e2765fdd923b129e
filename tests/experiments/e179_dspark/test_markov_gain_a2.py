"""E179-A2 from per-prompt position counts: α_k = accepted_k / reached_k summed over the prompts picked, so a
bootstrap over prompts resamples whole decodes (issue 24: the drop ratio was judged on its point alone)."""

from __future__ import annotations

import math

import numpy as np

from agentmill.experiments.e179_dspark.markov_gain import alpha_drop, drop_ratio


def test_alpha_drop_by_hand() -> None:
    reached = np.array([[4, 4, 2], [4, 2, 0]])   # prompt 2 never reached position 3
    accepted = np.array([[4, 2, 1], [2, 1, 0]])
    # α_1 = 6/8, α_3 = 1/2 → drop 0.25
    assert alpha_drop(reached, accepted) == 0.25
    assert alpha_drop(reached[1:], accepted[1:]) == 0.5 - 0.5       # α_1 = 2/4, α_2 = 1/2; position 3 unreached
    assert math.isnan(alpha_drop(np.array([[3, 0]]), np.array([[1, 0]])))  # a single reached position


def test_drop_ratio_keeps_prompt_pairs_and_refuses_a_flat_baseline() -> None:
    a = {"reached": [[4, 4], [4, 4]], "accepted": [[4, 2], [4, 2]]}   # drop 0.5 without the head
    b = {"reached": [[4, 4], [4, 4]], "accepted": [[4, 3], [4, 4]]}   # drop 0.125 with it
    assert drop_ratio(a, b, np.array([0, 1])) == 0.25
    assert drop_ratio(a, b, np.array([1, 1])) == 0.0                  # a resample of prompt 2 only
    flat = {"reached": [[4, 4]], "accepted": [[4, 4]]}
    assert math.isnan(drop_ratio(flat, flat, np.array([0])))
