"""Lossless verification, tested statistically end to end: speculative decoding of a toy Markov target with a
different Markov drafter must reproduce the target's exact distribution over whole sequences, whatever the draft
and the verify lengths — unless the verify length peeks at the drafted token, the anticipation counterexample
(non-anticipation, paper App. A [A]), which the same test must catch."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from scipy import stats

torch = pytest.importorskip("torch")

from agentmill.methods.dspark.rejection import Proposal, verify

V, N_TOK = 3, 4
P = torch.tensor([[0.6, 0.3, 0.1], [0.2, 0.2, 0.6], [0.3, 0.4, 0.3]], dtype=torch.float64)   # target, row = prev
Q = torch.tensor([[0.1, 0.1, 0.8], [0.5, 0.4, 0.1], [0.34, 0.33, 0.33]], dtype=torch.float64)  # drafter


def exact_dist(start=0):
    out = {}
    for seq in itertools.product(range(V), repeat=N_TOK):
        prob, prev = 1.0, start
        for t in seq:
            prob *= float(P[prev, t])
            prev = t
        out[seq] = prob
    return out


def spec_decode(g, gamma=3, length_rule=None, deterministic=False):
    hist = [0]
    while len(hist) - 1 < N_TOK:
        prev, toks, qs = hist[-1], [], []
        for _ in range(gamma):
            if deterministic:   # a fixed guess, like n-gram lookup: one-hot q
                x = (prev + 1) % V
                qs.append(torch.nn.functional.one_hot(torch.tensor(x), V).double())
            else:
                qs.append(Q[prev])
                x = int(torch.multinomial(Q[prev], 1, generator=g))
            toks.append(x)
            prev = x
        ell = gamma if length_rule is None else length_rule(toks, g)
        rows = [P[hist[-1]]] + [P[t] for t in toks[:ell]]
        prop = Proposal(tokens=torch.tensor([toks]), q=None if deterministic else torch.stack(qs)[None],
                        avail=np.array([gamma]))
        _, committed = verify([torch.stack(rows)], prop, np.array([ell]), [g])
        hist.extend(committed[0])
    return tuple(hist[1: 1 + N_TOK])


def chi2_pvalue(samples):
    exact = exact_dist()
    keys = list(exact)
    counts = np.array([sum(1 for s in samples if s == k) for k in keys], dtype=float)
    expected = np.array([exact[k] for k in keys]) * len(samples)
    return stats.chisquare(counts, expected).pvalue


@pytest.mark.slow
@pytest.mark.parametrize("rule", ["full", "random", "deterministic"])
def test_speculative_sampling_is_lossless(rule):
    g = torch.Generator().manual_seed({"full": 1, "random": 2, "deterministic": 3}[rule])
    if rule == "random":   # verify length from fresh randomness: allowed (non-anticipating)
        length_rule = lambda toks, g: int(torch.randint(0, 4, (), generator=g))
    else:
        length_rule = None
    samples = [spec_decode(g, length_rule=length_rule, deterministic=rule == "deterministic") for _ in range(12000)]
    assert chi2_pvalue(samples) > 1e-3


@pytest.mark.slow
def test_anticipating_verify_length_is_caught():
    """Verify the first draft only when it is token 2 (the length reads x_1 itself): no longer lossless."""
    g = torch.Generator().manual_seed(4)
    samples = [spec_decode(g, length_rule=lambda toks, g: 1 if toks[0] == 2 else 0) for _ in range(12000)]
    assert chi2_pvalue(samples) < 1e-6


def test_greedy_is_argmax_agreement():
    p = torch.tensor([[0.1, 0.9, 0.0], [0.7, 0.2, 0.1], [0.0, 0.0, 1.0]], dtype=torch.float64)
    one_hot = lambda i: torch.nn.functional.one_hot(torch.tensor(i), 3).double()
    g = torch.Generator().manual_seed(0)
    # target argmaxes are 1, 0, 2; drafts 1 (agree), 2 (disagree) -> commit 1, then the target's 0
    prop = Proposal(tokens=torch.tensor([[1, 2]]), q=torch.stack([one_hot(1), one_hot(2)])[None], avail=np.array([2]))
    greedy_p = torch.stack([one_hot(int(r.argmax())) for r in p])
    m, out = verify([greedy_p], prop, np.array([2]), [g])
    assert m.tolist() == [1] and out == [[1, 0]]


def test_bonus_token_and_zero_length():
    p = torch.tensor([[0.0, 1.0], [1.0, 0.0]], dtype=torch.float64)
    g = torch.Generator().manual_seed(0)
    prop = Proposal(tokens=torch.tensor([[1, -1]]), q=None, avail=np.array([1]))
    m, out = verify([p], prop, np.array([1]), [g])
    assert m.tolist() == [1] and out == [[1, 0]]            # accepted, then the bonus from the last row
    m, out = verify([p[:1]], prop, np.array([0]), [g])
    assert m.tolist() == [0] and out == [[1]]                # ℓ = 0 is one plain AR step


def test_bad_inputs_raise():
    p = torch.full((2, 3), 1 / 3, dtype=torch.float64)
    g = torch.Generator().manual_seed(0)
    prop = Proposal(tokens=torch.tensor([[0]]), q=torch.tensor([[[0.0, 0.5, 0.5]]]), avail=np.array([1]))
    with pytest.raises(ValueError, match="q = 0"):
        verify([p], prop, np.array([1]), [g])
    with pytest.raises(ValueError, match="exceeds"):
        verify([p], prop, np.array([2]), [g])
    with pytest.raises(ValueError, match="target rows"):
        verify([p[:1]], prop, np.array([1]), [g])
