"""Pareto frontier and matched-throughput ratios on hand-made load points."""

from __future__ import annotations

import math

import pytest

from agentmill.methods.dspark.bench import LoadPoint, envelope, matched_throughput_ratios, pareto


def _p(x, y, c=1):
    return LoadPoint("x", c, x, y, 1, 1, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0)


def test_pareto_drops_dominated_points():
    front = pareto([_p(10, 5), _p(20, 4), _p(15, 3), _p(30, 1), _p(5, 4)])
    assert front == [(10, 5), (20, 4), (30, 1)]


def test_envelope_interpolates_inside_and_refuses_outside():
    f = [(10.0, 5.0), (20.0, 4.0)]
    assert envelope(f, 15) == pytest.approx(4.5)
    assert math.isnan(envelope(f, 25))


def test_matched_ratio_of_a_uniformly_faster_policy():
    a = [_p(10, 6), _p(20, 4.8), _p(30, 2.4)]
    b = [_p(10, 5), _p(20, 4), _p(30, 2)]
    m = matched_throughput_ratios(a, b)
    assert m["n"] == 20 and m["geomean"] == pytest.approx(1.2) and m["min"] == pytest.approx(1.2)


def test_no_overlap_gives_nan():
    m = matched_throughput_ratios([_p(1, 1)], [_p(5, 1), _p(6, 0.5)])
    assert m["n"] == 0 and math.isnan(m["geomean"])


def test_simulator_by_hand():
    import numpy as np

    from agentmill.methods.dspark.costmodel import SPSTable
    from agentmill.methods.dspark.policies import make_policy
    from agentmill.methods.dspark.simulate import TraceSet, simulate

    B = list(range(1, 129))
    sps = SPSTable(B, [1], [256], {"r=1,ctx=256": [1.0 + 0.1 * (b - 1) for b in B]})
    tr = TraceSet(np.full((10, 4), 0.9), np.array([2] * 10), 0.0, [5])
    # fixed:3 on rounds that accept 2: each round commits 3 tokens; one user, 31 tokens per request
    pt = simulate(tr, make_policy("fixed:3"), sps, concurrency=1, max_tokens=31, n_requests=3)
    assert pt.tau == pytest.approx(3.0)
    off = simulate(tr, make_policy("off"), sps, concurrency=1, max_tokens=31, n_requests=3)
    # plain: 1 token per 1.0 s step after a 5-token prefill step (1.4 s); fixed:3: 3 tokens per 1.3 s step
    assert off.tau == 1.0 and pt.throughput > off.throughput
