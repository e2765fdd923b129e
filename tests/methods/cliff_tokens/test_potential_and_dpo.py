"""Fork-based scans against a naive per-prefix scan, taxonomy, interventions, pairs and the DPO losses."""

from __future__ import annotations

import warnings
from dataclasses import replace

import numpy as np
import pytest

from agentmill.lm.fork import BranchRequest, WhiteBoxForker
from agentmill.methods.cliff_tokens.dpo import (ComputeLedger, DPOConfig, eos_logp, single_token_dpo_loss,
                                                train_dpo, trajectory_dpo_loss)
from agentmill.methods.cliff_tokens.interventions import pass_at_k, random_delete_position
from agentmill.methods.cliff_tokens.pairs import TokenPair, build_pairs
from agentmill.methods.cliff_tokens.potential import PotentialConfig, PotentialEstimator
from agentmill.methods.cliff_tokens.taxonomy import h_star, type_token


def _tiny():
    from agentmill.lm.tiny import TinyConfig, TinyLM

    return TinyLM(TinyConfig(layers=1, d=32, heads=2, max_len=32, seed=3))


def _even(ids) -> bool:
    return bool(ids) and int(ids[-1]) % 2 == 0


def test_fork_scan_equals_naive_per_prefix_scan() -> None:
    lm = _tiny()
    prompt, trace, n = [256, 65, 66], [67, 68, 69, 70], 4
    cfg = PotentialConfig(n=n, max_total_len=8, early_stop_zeros=0, positions_per_batch=2, seed=5)
    scan = PotentialEstimator(WhiteBoxForker(lm), _even, cfg).scan(prompt, trace, seed_key=(9,))
    per_request = PotentialEstimator(WhiteBoxForker(lm), _even, replace(cfg, grouped=False)).scan(
        prompt, trace, seed_key=(9,))
    assert scan.k.tolist() == per_request.k.tolist()
    key = (5, 9)
    for t in range(len(trace)):
        f = WhiteBoxForker(lm)
        tree = f.start_tree(prompt + trace[:t], key)
        conts = f.expand(tree, [BranchRequest(None, 0, np.zeros(0, np.int32), t * n + j, 8 - t) for j in range(n)],
                         1.0)
        k = sum(_even(trace[:t] + c.token_ids.tolist()) for c in conts)
        assert scan.k[t] == k and scan.n[t] == n
    assert scan.k[len(trace)] == -1


def test_scan_rejects_long_traces_and_bad_verifiers() -> None:
    lm = _tiny()
    est = PotentialEstimator(WhiteBoxForker(lm), lambda ids: 1, PotentialConfig(n=2, max_total_len=3))
    with pytest.raises(ValueError):
        est.scan([256], [65, 66, 67, 68])
    with pytest.raises(TypeError):
        est.scan([256], [65])
    with pytest.raises(ValueError):
        PotentialConfig(n=1)


def test_verifier_crash_is_unscorable() -> None:
    def boom(ids):
        raise RuntimeError("x")

    est = PotentialEstimator(WhiteBoxForker(_tiny()), boom, PotentialConfig(n=3, max_total_len=4))
    assert est.at([256], [65], 3, seed_key=(0,)) == (0, 0) and est.unscorable == 3


def test_taxonomy_by_hand() -> None:
    assert abs(h_star() - 0.05600) < 1e-5
    with np.errstate(divide="ignore"):
        lp = np.log(np.array([0.995, 0.005, 0.0]))
    assert type_token(lp, 0)[0] == "DF" and type_token(lp, 1)[0] == "other"
    lp = np.log(np.array([0.6, 0.4]))
    assert type_token(lp, 0)[0] == "UC" and type_token(lp, 1)[0] == "SO"
    tie = np.log(np.array([0.5, 0.5]))
    assert type_token(tie, 1)[1] == 1  # ties share rank 1


def test_pass_at_k_against_brute_force() -> None:
    from itertools import combinations

    for n, c, k in [(5, 2, 2), (6, 1, 3), (4, 0, 2), (4, 4, 1)]:
        subsets = list(combinations(range(n), k))
        brute = sum(any(i < c for i in s) for s in subsets) / len(subsets)
        assert abs(pass_at_k(n, c, k) - brute) < 1e-12
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 1)


def test_random_delete_matches_potential() -> None:
    v = np.array([0.5, 0.52, 0.9, 0.1])
    u = random_delete_position(v, [2], 0.5, np.random.default_rng(0))
    assert u == 1  # position 1 (V̂_0 = 0.5); position 2 is the cliff; others too far


def test_pairs_strategies() -> None:
    c = {"prefix_ids": [1, 2], "token": 7, "type": "SO", "k_prev": 40, "n_prev": 64, "k_curr": 0, "n_curr": 64,
         "candidates": [(7, 0.2, 0, 64), (8, 0.7, 50, 64), (9, 0.1, 30, 64), (10, 0.0, 1, 64)]}
    p1 = build_pairs([c])
    assert [p.chosen for p in p1] == [8, 9]  # 10 is itself a cliff against 40/64
    assert [p.chosen for p in build_pairs([c], strategy="cliff_hard")] == [8]
    assert build_pairs([c], types=("DF",)) == []
    with pytest.raises(ValueError):
        TokenPair((1,), 3, 3, "SO", 1, 1, 1)


def test_single_token_dpo_golden_value_and_gradient() -> None:
    import torch

    lp = torch.log(torch.tensor([[0.5, 0.2, 0.3]], dtype=torch.float64)).requires_grad_(True)
    ref = torch.log(torch.tensor([[0.4, 0.3, 0.3]], dtype=torch.float64))
    loss = single_token_dpo_loss(lp, ref, torch.tensor([0]), torch.tensor([1]), 0.1)
    m = 0.1 * ((np.log(0.5) - np.log(0.4)) - (np.log(0.2) - np.log(0.3)))
    assert abs(m - 0.0628609) < 1e-7 and abs(loss.item() - 0.6622106) < 1e-7
    loss.backward()
    # dL/dm = -sigmoid(-m) = -0.48429; d m / d logp_w = beta
    assert abs(float(lp.grad[0, 0]) / 0.1 - (-0.4842900)) < 1e-6
    assert abs(float(lp.grad[0, 1]) / -0.1 - (-0.4842900)) < 1e-6 and float(lp.grad[0, 2]) == 0.0
    tl = trajectory_dpo_loss(torch.tensor([-1.0]), torch.tensor([-2.0]), torch.tensor([-1.0]), torch.tensor([-2.0]),
                             0.1)
    assert abs(float(tl) - np.log(2)) < 1e-7


def test_eos_masking_puts_gradient_on_one_position() -> None:
    import torch

    L, V, P, eos, xw, xl = 5, 6, 3, 5, 1, 2
    for masked, rows in ((True, {P - 1}), (False, {P - 1, P})):
        logits = torch.randn(L, V, dtype=torch.float64, requires_grad=True)   # sequence prefix(3) + x_w + ...
        logp = torch.log_softmax(logits, -1)
        ref = logp.detach()
        eos_terms = None
        if not masked:
            pw = logp[P, eos][None]
            eos_terms = (pw, pw.detach() * 0 - 3.0, pw.detach(), torch.tensor([-3.0], dtype=torch.float64))
        loss = single_token_dpo_loss(logp[P - 1][None], ref[P - 1][None] + 0.1, torch.tensor([xw]),
                                     torch.tensor([xl]), 0.1, eos_terms=eos_terms)
        loss.backward()
        moved = {i for i in range(L) if float(logits.grad[i].abs().sum()) > 0}
        assert moved == rows


def test_train_dpo_moves_parameters_and_fills_the_ledger() -> None:
    import torch

    lm = _tiny()
    before = [p.detach().clone() for p in lm.model.parameters()]
    pairs = [TokenPair((256, 65, 66), 67, 68, "SO", 30, 40, 0), TokenPair((256, 65), 70, 71, "UC", 30, 40, 0)]
    led = ComputeLedger()
    e0 = eos_logp(lm, pairs)
    with pytest.warns(UserWarning, match="stop right after"):
        train_dpo(lm, pairs, DPOConfig(mask_eos=False, lr=1e-2, epochs=2, batch_size=2), led)
    assert any(not torch.equal(a, b) for a, b in zip(before, lm.model.parameters()))
    assert led.optimizer_steps == 2 and led.train_loss_positions == 16  # 2 pairs x 4 positions x 2 epochs and led.total() > 0
    assert (eos_logp(lm, pairs) > e0).all()   # the EOS term trains "stop after the chosen token"
    with pytest.raises(ValueError):
        train_dpo(lm, [], DPOConfig())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        train_dpo(lm, pairs, DPOConfig(epochs=1))
