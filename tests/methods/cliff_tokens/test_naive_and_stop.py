"""The naive re-prefill path (PF-1's reference), the stop predicate, trace sampling and bisection's bookkeeping."""

from __future__ import annotations

from dataclasses import replace

import pytest

from agentmill.lm.fork import WhiteBoxForker
from agentmill.methods.cliff_tokens.potential import PotentialConfig, PotentialEstimator


def _tiny():
    from agentmill.lm.tiny import TinyConfig, TinyLM

    return TinyLM(TinyConfig(layers=1, d=32, heads=2, max_len=32, seed=3))


def _even(ids) -> bool:
    return bool(ids) and int(ids[-1]) % 2 == 0


CFG = PotentialConfig(n=6, max_total_len=10, early_stop_zeros=0, seed=5)
PROMPT, TRACE = [256, 65, 66], [67, 68, 69, 70, 71, 72]


def test_naive_path_gives_the_fork_counts_and_re_encodes_n_copies() -> None:
    lm = _tiny()
    positions = [0, 2, 5]
    fork = PotentialEstimator(WhiteBoxForker(lm), _even, CFG)
    naive = PotentialEstimator(WhiteBoxForker(lm), _even, CFG)
    kf = fork.fork_counts(PROMPT, TRACE, positions, 6, (5, 1))
    kn = naive.naive_counts(PROMPT, TRACE, positions, 6, (5, 1))
    assert kf == kn and all(m == 6 for _, m in kf)
    # fork: one pass over prompt + trace[:5]; naive: n copies of prompt + prefix per position
    assert fork.counters.prefill_tokens == 3 + 5
    assert naive.counters.prefill_tokens == 6 * ((3 + 0) + (3 + 2) + (3 + 5))
    assert fork.counters.gen_tokens == naive.counters.gen_tokens
    assert len(fork.last_timings["per_position_s"]) == 3 and len(naive.last_timings["per_position_s"]) == 3
    # the fork path is also what scan uses: same counts at the same positions
    scan = PotentialEstimator(WhiteBoxForker(lm), _even, CFG).scan(PROMPT, TRACE, seed_key=(1,))  # key (5, 1)
    assert [int(scan.k[t]) for t in positions] == [k for k, _ in kf]


def test_stop_predicate_ends_rows_and_needs_the_grouped_path() -> None:
    lm = _tiny()
    est = PotentialEstimator(WhiteBoxForker(lm), _even, CFG, stop=lambda ids: len(ids) >= 3)
    est.fork_counts(PROMPT, TRACE, [1], 6, (1,))
    # from prefix length 1 every row stops after 2 new tokens unless EOS comes first
    assert est.counters.gen_tokens <= 6 * 2
    free = PotentialEstimator(WhiteBoxForker(lm), _even, CFG)
    free.fork_counts(PROMPT, TRACE, [1], 6, (1,))
    assert free.counters.gen_tokens > est.counters.gen_tokens
    with pytest.raises(ValueError, match="stop predicate"):
        PotentialEstimator(WhiteBoxForker(lm), _even, replace(CFG, grouped=False), stop=lambda ids: True)


def test_sample_draws_the_t0_rollouts() -> None:
    lm = _tiny()
    est = PotentialEstimator(WhiteBoxForker(lm), _even, CFG)
    rows = est.sample(PROMPT, 6, (1,))
    assert len(rows) == 6 and all(f in ("eos", "length", "stop") for *_, f in rows)
    assert all(len(tk) <= CFG.max_total_len for tk, _, _ in rows)
    k0 = PotentialEstimator(WhiteBoxForker(lm), _even, CFG).fork_counts(PROMPT, TRACE, [0], 6, (1,))[0][0]
    assert sum(bool(g) for _, g, _ in rows) == k0


def test_bisection_reports_its_estimates_and_candidates() -> None:
    from agentmill.methods.cliff_tokens.bisect import bisect_drops
    from agentmill.methods.cliff_tokens.core import chainadd_verifier
    from agentmill.methods.cliff_tokens.planted import ChainAddOracle, prompt_ids

    o, ops = ChainAddOracle(), (23, 45, 17)
    tr = o.leaves(ops)[1].ids.tolist()          # the carry dropped: the cliff is token 18
    est = PotentialEstimator(o, chainadd_verifier(ops), PotentialConfig(n=64))
    evaluated: dict[int, tuple[int, int]] = {}
    cands: list[int] = []
    cliffs, cost = bisect_drops(est, prompt_ids(ops), tr, n=32, confirm_n=64, evaluated=evaluated, candidates=cands)
    assert [c.pos for c in cliffs] == [18] and 18 in cands
    assert len(evaluated) == cost["estimates"] - 2 * len(cands) and 0 in evaluated and len(tr) - 1 in evaluated
    assert all(m == 32 for _, m in evaluated.values())
