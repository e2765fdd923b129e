"""CrossCoder algebra: partition integrity, the derived identities D1–D3, batch-independent BatchTopK inference,
the L1 loss formula, raw-unit decoding, persistence and bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from agentmill.methods.crosscoder import CrossCoder, CrossCoderConfig, Partition, train_crosscoder
from agentmill.methods.crosscoder.interventions import delta_update, scale
from agentmill.methods.crosscoder.train import recon_loss


def _rows(n: int = 3000, d: int = 8, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 2, d)).astype(np.float32)


def test_partition_forbidden_weights_and_grads_are_exactly_zero_after_training() -> None:
    cfg = CrossCoderConfig(dict_size=40, k=4, steps=50, partition=Partition(0.1, 0.1), warmup=5, dead_window=500)
    cc, _ = train_crosscoder(_rows(), cfg)
    assert cc.partition_violation() == 0.0
    n_a, n_b = cfg.partition.sizes(40)  # type: ignore[union-attr]
    assert (n_a, n_b) == (4, 4)
    assert torch.all(cc.W_dec[:n_a, 1] == 0) and torch.all(cc.W_enc[1, :, :n_a] == 0)
    assert torch.all(cc.W_dec[n_a:n_a + n_b, 0] == 0) and torch.all(cc.W_enc[0, :, n_a:n_a + n_b] == 0)
    # gradients of forbidden entries are exactly 0 because the forward multiplies by the masks
    for p in cc.parameters():
        p.requires_grad_(True)
    x = torch.as_tensor(_rows(64, seed=1))
    f = cc.encode(x, inference=False, allow_batch_dependent=True)
    (cc.decode(f) - x).pow(2).sum().backward()
    assert torch.all(cc.W_enc.grad[1, :, :n_a] == 0) and torch.all(cc.W_dec.grad[:n_a, 1] == 0)
    assert cc.W_enc.grad[0, :, :n_a].abs().sum() > 0  # allowed entries do learn


def test_d1_a_exclusive_edits_never_reach_b_and_d3_identity_is_exact() -> None:
    cfg = CrossCoderConfig(dict_size=40, k=8, steps=30, partition=Partition(0.2, 0.1), warmup=3, dead_window=500)
    cc, _ = train_crosscoder(_rows(), cfg)
    x = torch.as_tensor(_rows(200, seed=2) * np.asarray(cc.scales, np.float32)[None, :, None])
    f = cc.encode(x)
    a_excl = list(range(8))
    f = f.clone()
    f[:, a_excl] += 1.0  # make sure the edited latents are active
    for alpha in (0.0, 3.0, 32.0):
        assert delta_update(cc, f, scale(a_excl, alpha)(f), view=1).abs().max().item() == 0.0
        assert delta_update(cc, f, scale(a_excl, alpha)(f), view=0).abs().max().item() > 0.0
    assert delta_update(cc, f, f.clone(), view=0).abs().max().item() == 0.0


def test_d2_preactivation_scaling_keeps_the_topk_support() -> None:
    cc = CrossCoder(CrossCoderConfig(dict_size=16, sparsity="topk", k=3), d=4)
    a = torch.rand(10, 16)
    s1, s2 = cc.select(a), cc.select(2.5 * a)
    assert torch.equal(s1 > 0, s2 > 0) and torch.allclose(s2, 2.5 * s1)


def test_batchtopk_inference_is_batch_independent_and_needs_a_threshold() -> None:
    cfg = CrossCoderConfig(dict_size=32, k=4, steps=40, warmup=4, dead_window=500, threshold_start_frac=0.0)
    cc, log = train_crosscoder(_rows(), cfg)
    assert cc.threshold is not None and log.threshold == cc.threshold
    x = torch.as_tensor(_rows(50, seed=3))
    together = cc.encode(x)
    alone = torch.cat([cc.encode(x[i:i + 1]) for i in range(50)])
    # same support; values equal up to GEMM summation order (a 1-row product takes another BLAS path)
    assert torch.equal(together > 0, alone > 0) and torch.allclose(together, alone, atol=1e-5)
    cc.threshold = None
    with pytest.raises(ValueError, match="threshold"):
        cc.encode(x)
    assert cc.encode(x, allow_batch_dependent=True).shape == (50, 32)


def test_threshold_ema_matches_a_hand_computation() -> None:
    beta, mins = 0.9, [0.5, 0.2, 0.8]
    theta = None
    for m in mins:
        theta = m if theta is None else beta * theta + (1 - beta) * m
    assert theta == pytest.approx(0.9 * (0.9 * 0.5 + 0.1 * 0.2) + 0.1 * 0.8)


def test_l1_loss_equals_its_formula_on_two_latents() -> None:
    cfg = CrossCoderConfig(dict_size=2, sparsity="l1", l1_coeff=2.0, steps=100, code_norm="crosscoder_sum")
    cc = CrossCoder(cfg, d=1)
    with torch.no_grad():
        cc.W_dec.copy_(torch.tensor([[[3.0], [4.0]], [[1.0], [0.0]]]))
    x = torch.tensor([[[1.0], [2.0]]])
    f = torch.tensor([[0.5, 2.0]])
    x_hat = cc.decode(f)  # A: 0.5*3 + 2*1 = 3.5, B: 0.5*4 = 2.0
    rec, sparse = recon_loss(cc, x, x_hat, f, step=10)  # past the 5-step ramp
    assert rec.item() == pytest.approx((1 - 3.5) ** 2 + (2 - 2.0) ** 2)
    assert sparse.item() == pytest.approx(2.0 * (0.5 * (3 + 4) + 2.0 * (1 + 0)))


def test_decode_to_residual_divides_by_the_view_scale() -> None:
    cc = CrossCoder(CrossCoderConfig(dict_size=8, k=2), d=3, scales=(2.0, 4.0))
    f = torch.rand(5, 8)
    assert torch.allclose(cc.decode_to_residual(f, 0), cc.decode(f, 0) / 2.0)
    assert torch.allclose(cc.decode_to_residual(f, 1), cc.decode(f, 1) / 4.0)
    sae = cc.sae_view(1)
    assert np.allclose(f.numpy() @ sae["W_dec"] + sae["b_dec"], cc.decode(f, 1).detach().numpy(), atol=1e-6)


def test_training_moves_parameters_and_save_load_roundtrips(tmp_path) -> None:
    cfg = CrossCoderConfig(dict_size=24, k=4, steps=30, partition=Partition(0.1, 0.1), warmup=3, dead_window=500)
    init = CrossCoder(cfg, d=8)
    cc, _ = train_crosscoder(_rows(), cfg)
    assert not torch.equal(init.W_enc, cc.W_enc)
    cc.identity = {"layer": 2}
    cc.save(tmp_path / "cc")
    back = CrossCoder.load(tmp_path / "cc", expect_identity={"layer": 2})
    assert torch.equal(back.W_dec, cc.W_dec) and back.threshold == cc.threshold and back.scales == cc.scales
    with pytest.raises(ValueError, match="another store"):
        CrossCoder.load(tmp_path / "cc", expect_identity={"layer": 3})


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="k must"):
        CrossCoderConfig(dict_size=8, k=8)
    with pytest.raises(ValueError, match="sparsity"):
        CrossCoderConfig(sparsity="relu")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="a_excl"):
        CrossCoderConfig(partition=Partition(0.6, 0.5))
    with pytest.raises(ValueError, match="tied_shared"):
        CrossCoderConfig(dict_size=10, k=2, partition=Partition(0.1, 0.1, tied_shared=9))
    bad = _rows(10)
    bad[3, 0, 0] = np.nan
    with pytest.raises(ValueError, match="first at row 3"):
        train_crosscoder(bad, CrossCoderConfig(dict_size=8, k=2, steps=1))
    with pytest.raises(ValueError, match="shape"):
        train_crosscoder(np.zeros((4, 3, 2), np.float32), CrossCoderConfig(dict_size=8, k=2, steps=1))


def test_e175_recipe_and_tied_shared_decoders() -> None:
    cfg = CrossCoderConfig.e175(p=0.1, k=4, dict_size=40)
    assert (cfg.sparsity, cfg.code_norm, cfg.loss, cfg.normalize, cfg.auxk_alpha) == ("topk", "none", "e175", False,
                                                                                   0.0)
    cc, _ = train_crosscoder(_rows(), cfg.scaled(steps=20))
    assert cc.partition_violation() == 0.0
    tied = CrossCoderConfig(dict_size=20, k=2, steps=10, warmup=1, partition=Partition(0.1, 0.1, tied_shared=3))
    tc, _ = train_crosscoder(_rows(), tied)
    w = tc.dec_weight()
    assert torch.equal(w[4:7, 0], w[4:7, 1])
