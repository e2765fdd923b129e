"""The simulation and metric caches give exactly what the uncached computations give.

E176's recovery runs remember theory-independent random streams, predictions, per-pair metric values, validity
ranks and hashes. Every cached path here is checked bit for bit against a plain copy of the code it replaced, so a
cache can never shift a seeded result.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest
from scipy.stats import rankdata

from agentmill.core.seeding import rng_for
from agentmill.methods.autocog import library as L
from agentmill.methods.autocog.agents.search import range_variants
from agentmill.methods.autocog.design import random_design
from agentmill.methods.autocog.metrics import (
    _PAIR_CACHE,
    _PRED_CACHE,
    TemplateMetric,
    _var,
    predicted_estimate,
    templates_for,
)
from agentmill.methods.autocog.simulate import Data, choose
from agentmill.methods.autocog.theory import lapse_logistic, sha256

SIM = sys.modules["agentmill.methods.autocog.simulate"]  # the package re-exports the function under this name


def _plain_simulate(theory, design, n_subjects, seed, *, action_noise=0.0):
    """The uncached simulate as it was: every stream drawn afresh, noise streams always drawn."""
    key = seed if isinstance(seed, tuple) else (seed,)
    ctx = design.context()
    pair_idx = design.schedules(rng_for(*key, "sched"), n_subjects)
    a, b = design.arrays()
    A, B = a[pair_idx], b[pair_idx]
    params = theory.params.sample(rng_for(*key, "params", theory.content_id), ctx, n_subjects)
    u = rng_for(*key, "choice").random(pair_idx.shape)
    noise_u = rng_for(*key, "noise").random(pair_idx.shape)
    coin = rng_for(*key, "coin").random(pair_idx.shape) < 0.5
    if not theory.history_dependent:
        p = theory.prob_batch(params, A, B, ctx)
        resp = np.where(noise_u < action_noise, coin.astype(int), choose(p, u, theory.policy))
    else:
        S, T = pair_idx.shape
        p, resp, prev = np.empty((S, T)), np.empty((S, T), int), np.full((S, 1), -1)
        for t in range(T):
            pt = theory.prob_batch(params, A[:, t:t + 1], B[:, t:t + 1], ctx, prev)[:, 0]
            rt = np.where(noise_u[:, t] < action_noise, coin[:, t].astype(int), choose(pt, u[:, t], theory.policy))
            p[:, t], resp[:, t] = pt, rt
            prev = rt[:, None]
    return Data(design, pair_idx, resp.astype(int), p)


def _same(x: Data, y: Data) -> bool:
    return (x.pair_idx.tobytes() == y.pair_idx.tobytes() and x.resp.tobytes() == y.resp.tobytes()
            and x.prob_a.tobytes() == y.prob_a.tobytes())


THEORIES = [L.ttb(), L.wadd(), L.dr_wadd(), L.program("identity", "rank", "additive"), L.perseveration(),
            L.program("identity", "validity", "mixture", policy="argmax")]


@pytest.mark.parametrize("eps", [0.0, 0.3])
def test_simulate_cache_hits_and_misses_match_the_plain_simulation(eps: float) -> None:
    rng = np.random.default_rng(5)
    for rating_max in (1, 5):
        design = random_design(rng, rating_max=rating_max)
        for seed in [(11, "cand"), 12, (12,), (True,), (1,)]:
            SIM._STREAMS.clear()
            for th in THEORIES:  # the first theory misses the stream cache, the others hit it
                got = SIM.simulate(th, design, 9, seed, action_noise=eps)
                assert _same(got, _plain_simulate(th, design, 9, seed, action_noise=eps)), (th.name, seed)


def test_stream_cache_keys_seed_reprs_and_arrays_are_read_only() -> None:
    design = random_design(np.random.default_rng(0))
    SIM._STREAMS.clear()
    one, true = SIM._streams((1,), design, 6), SIM._streams((True,), design, 6)  # 1 == True, yet other seeds
    assert one.u.tobytes() != true.u.tobytes()
    with pytest.raises(ValueError):
        one.u[0, 0] = 0.5


def test_predicted_estimate_memo_matches_a_fresh_evaluation() -> None:
    rng = np.random.default_rng(9)
    design = random_design(rng)
    own, opp = L.ttb(), L.program("identity", "dial", "tally")
    for m in templates_for(own, opp, cardinal=False):
        _PRED_CACHE.clear()
        first = predicted_estimate(own, design, m, 20, (3, "cand"))
        again = predicted_estimate(own, design, m, 20, (3, "cand"))  # a memo hit
        fresh = m(_plain_simulate(own, design, 20, (3, "cand")))
        assert again is first
        assert (first.value, first.variance) == (fresh.value, fresh.variance)
        if fresh.per_subject is None:
            assert first.per_subject is None
        else:
            assert first.per_subject.tobytes() == fresh.per_subject.tobytes()


def _plain_pair_template(name: str, data: Data):
    """The per-trial versions of the stimulus-only templates, as they were."""
    A, B = data.design.arrays()
    A, B = A[data.pair_idx], B[data.pair_idx]
    resp = data.resp
    if name == "top_cue_vs_majority":
        ctx = data.design.context()
        top, maj = np.sign(L.ttb_delta({}, A, B, ctx)), np.sign(L.tally_delta({}, A, B, ctx))
        hit = ((top > 0) & (resp == 0)) | ((top < 0) & (resp == 1))
        return hit, (top != 0) & (maj != 0) & (top != maj)
    R, d = data.design.rating_max, A - B
    low = np.minimum(A, B) < R / 2
    adv_a_low = ((d > 0) & low).sum(-1) > ((d > 0) & ~low).sum(-1)
    adv_b_low = ((d < 0) & low).sum(-1) > ((d < 0) & ~low).sum(-1)
    return np.where(adv_a_low, resp == 0, resp == 1), adv_a_low ^ adv_b_low


@pytest.mark.parametrize("name", ["top_cue_vs_majority", "low_range_advantage"])
def test_per_pair_templates_match_the_per_trial_computation(name: str) -> None:
    rng = np.random.default_rng(2)
    for _ in range(20):
        design = random_design(rng, rating_max=5)
        pair_idx = design.schedules(rng, 8)
        data = Data(design, pair_idx, rng.integers(0, 2, pair_idx.shape))
        _PAIR_CACHE.clear()
        for _ in range(2):  # miss, then hit
            est = TemplateMetric(name)(data)
            hit, mask = _plain_pair_template(name, data)
            if not mask.sum():
                assert est.value is None
                continue
            assert est.value == float((hit & mask).sum() / mask.sum())
            if (mask.sum(1) > 0).all():
                per = (hit & mask).sum(1) / mask.sum(1)
                assert est.per_subject.tobytes() == per.tobytes() and est.variance == float(per.var())


def test_var_is_numpys_var_bit_for_bit() -> None:
    rng = np.random.default_rng(1)
    for n in list(range(1, 40)) + [50, 200, 1000]:
        for x in (rng.random(n), rng.integers(0, 97, n) / 96, rng.normal(7.0, 1e-6, n)):
            assert np.float64(_var(x)).tobytes() == np.float64(x.var()).tobytes()


def test_cached_ranks_and_hashes_match_fresh_ones() -> None:
    rng = np.random.default_rng(4)
    for _ in range(3):
        v = np.array(random_design(rng).validities)
        lam = rng.random(5)
        for _ in range(2):  # miss, then hit
            fresh = lam[:, None] ** (rankdata(-v, method="average")[None, :] - 1)
            assert L.rank_weights(v, lam).tobytes() == fresh.tobytes()
    design = random_design(rng)
    j = design.to_json()
    j.pop("rationale")
    assert design.content_id() == design.content_id() == sha256(j)[:16]
    th = L.program("power_shift", "validity", "additive", {"alpha": (0.1, 0.55)})
    assert th.content_id == th.content_id == sha256({"spec": th.spec, "params": th.params.to_json(),
                                                     "policy": th.policy})[:16]
    m = TemplateMetric("agree", {"theory": {**th.spec, "label": th.name}})
    assert m.content_id == sha256({"name": m.name, "args": m.args})[:16]


def test_shared_range_variants_equal_freshly_built_ones() -> None:
    fam = ("power_shift", "validity", "additive")
    shared = range_variants(fam)
    assert range_variants(fam) == shared and range_variants(fam) is not shared  # callers get their own list
    fresh = [L.program(*fam, {k: tuple(v) for k, v in c.spec["ranges"].items()}) for c in shared]
    assert [c.content_id for c in shared] == [c.content_id for c in fresh]


def test_lapse_logistic_clips_as_np_clip_did() -> None:
    delta = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 400.0, -1e300, 3.3])
    beta, eps = np.array([[1.0], [2.0]]), np.array([[0.0], [0.2]])
    z = np.clip(beta * delta, -500, 500)
    expect = (1 - eps) / (1 + np.exp(-z)) + eps / 2
    assert lapse_logistic(delta, beta, eps).tobytes() == expect.tobytes()
