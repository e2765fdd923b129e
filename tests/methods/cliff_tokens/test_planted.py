"""The chained-addition oracle: its traces, exact potentials (tower identity, Monte Carlo), its ForkableLM face."""

from __future__ import annotations

import numpy as np
import pytest

from agentmill.lm.fork import BranchRequest
from agentmill.methods.cliff_tokens.core import chainadd_verifier
from agentmill.methods.cliff_tokens.planted import (ChainAddOracle, enumerate_leaves, grade_text, prompt_ids,
                                                    sample_problem, site_kind)
from agentmill.methods.cliff_tokens.potential import PotentialConfig, PotentialEstimator


def test_site_kinds_and_leaves_by_hand() -> None:
    assert site_kind(23, 45) is None and site_kind(68, 17) == "UC" and site_kind(29, 39) == "DF"
    assert site_kind(18, 15) == "SO"
    lv = enumerate_leaves((23, 45, 17))
    texts = {bytes(lf.ids.tolist()).decode(): (lf.prob, lf.correct) for lf in lv}
    assert texts == {"A:23+45=68;68+17=85;#85": (0.4, True), "A:23+45=68;68+17=75;#75": (0.6, False)}
    # the error token is the tens digit of the second sum: index 17 of the trace
    assert lv[1].sites[0].pos == 17 and lv[1].sites[0].erred
    assert abs(sum(lf.prob for lf in enumerate_leaves((29, 39, 47))) - 1) < 1e-12


def test_tower_identity_is_exact() -> None:
    o = ChainAddOracle()
    rng = np.random.default_rng(0)
    for _ in range(30):
        ops = sample_problem(rng)
        tr = o.sample_trace(ops, rng).ids.tolist()
        for t in range(len(tr)):
            p = o.next_token_dist(ops, tr[:t])
            rhs = sum(p[x] * o.exact_potential(ops, tr[:t] + [int(x)]) for x in np.flatnonzero(p))
            assert abs(rhs - o.exact_potential(ops, tr[:t])) <= 1e-12


def test_exact_potential_against_monte_carlo() -> None:
    o = ChainAddOracle()
    ops = (29, 39, 47)
    q = prompt_ids(ops)
    for prefix in ([], list(b"A:29+39=6")):
        v = o.exact_potential(ops, prefix)
        k, n = o.rollout_counts(q, prefix, 100_000, np.random.default_rng(1))
        assert abs(k / n - v) <= 3 * np.sqrt(max(v * (1 - v), 1e-6) / n)


def test_token_by_token_sampling_agrees_with_whole_trace_draws() -> None:
    o = ChainAddOracle()
    ops = (23, 45, 17)
    q = prompt_ids(ops)
    prefix = list(b"A:23+45=68;68+17=")
    tree = o.start_tree(q, (3,))
    leaf = o.add_leaf(tree, prefix)
    reqs = [BranchRequest(leaf, len(prefix), np.asarray(prefix), j, 30) for j in range(400)]
    conts = o.expand(tree, reqs, 1.0)
    k = sum(grade_text(bytes(prefix + c.token_ids.tolist()).decode(), ops) for c in conts)
    assert all(c.finish == "eos" for c in conts)
    assert abs(k / 400 - 0.4) <= 3 * np.sqrt(0.24 / 400)


def test_fork_path_and_vectorised_path_give_the_same_law() -> None:
    class Forkable:  # the oracle without its rollout_counts shortcut
        def __init__(self, o): self.o = o

        def __getattr__(self, a):
            if a == "rollout_counts":
                raise AttributeError(a)
            return getattr(self.o, a)

    o, ops = ChainAddOracle(), (23, 45, 17)
    est = PotentialEstimator(Forkable(o), chainadd_verifier(ops), PotentialConfig(n=200))
    k, n = est.at(prompt_ids(ops), list(b"A:23+45=68;68+17="), 200, seed_key=(0,))
    assert n == 200 and abs(k / n - 0.4) <= 3 * np.sqrt(0.24 / 200)


def test_off_support_prefix_and_wrong_prompt_raise() -> None:
    o = ChainAddOracle()
    with pytest.raises(ValueError):
        o.exact_potential((23, 45, 17), list(b"A:99"))
    with pytest.raises(ValueError):
        o.ops_of(list(b"hello"))


def test_problem_mix() -> None:
    rng = np.random.default_rng(0)
    kinds = []
    for _ in range(400):
        ops = sample_problem(rng)
        lf = [lf for lf in enumerate_leaves(ops) if not any(s.erred for s in lf.sites)][0]
        ks = {s.kind for s in lf.sites}
        kinds.append("DF" if "DF" in ks else "UC" if "UC" in ks else "none")
    share = {k: kinds.count(k) / 400 for k in ("DF", "UC", "none")}
    assert abs(share["DF"] - 0.2) < 0.07 and abs(share["UC"] - 0.3) < 0.07


def test_bisection_finds_the_planted_drop_with_fewer_rollouts() -> None:
    from agentmill.methods.cliff_tokens.bisect import bisect_drops

    o, ops = ChainAddOracle(), (23, 45, 17)
    tr = o.leaves(ops)[1].ids.tolist()          # dropped the carry at index 17 → token 18
    est = PotentialEstimator(o, chainadd_verifier(ops), PotentialConfig(n=64))
    cliffs, cost = bisect_drops(est, prompt_ids(ops), tr, n=32, confirm_n=64)
    assert [c.pos for c in cliffs] == [18]
    assert cost["rollouts"] < (len(tr) - 1) * 64
