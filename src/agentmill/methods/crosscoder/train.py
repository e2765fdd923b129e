"""Training a crosscoder on paired rows: losses, AuxK, the BatchTopK threshold, the learning-rate schedule.

Order per step: sample a batch → encode (training-mode selection) → decode → loss (reconstruction + sparsity or
AuxK) → backward → clip → Adam step → zero forbidden weights (partition) → track dead latents and θ.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agentmill.methods.crosscoder.config import CrossCoderConfig
from agentmill.methods.crosscoder.model import CrossCoder, require_torch, one_thread


@dataclass
class TrainLog:
    """Per-logged-step losses and the end state of the run."""

    steps: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    recon: list[float] = field(default_factory=list)
    aux: list[float] = field(default_factory=list)
    l0: list[float] = field(default_factory=list)
    threshold: float | None = None
    scales: tuple[float, float] = (1.0, 1.0)
    seconds: float = 0.0


def norm_scales(x: np.ndarray, max_rows: int = 100_000) -> tuple[float, float]:
    """s_m = sqrt(d / E‖h^m‖²) per model, from up to ``max_rows`` rows of raw ``x`` (n, 2, d)."""
    sub = np.asarray(x[:max_rows], dtype=np.float64)
    d = sub.shape[-1]
    msq = (sub ** 2).sum(-1).mean(0)
    if not np.all(msq > 0):
        raise ValueError("norm_scales: a model's rows are all zero")
    return float(math.sqrt(d / msq[0])), float(math.sqrt(d / msq[1]))


def lr_factor(step: int, cfg: CrossCoderConfig) -> float:
    """Linear warm-up over ``warmup`` steps, constant, then linear decay to 0 from ``decay_start_frac``."""
    if cfg.warmup and step < cfg.warmup:
        return (step + 1) / cfg.warmup
    start = int(cfg.decay_start_frac * cfg.steps)
    if step >= start and cfg.steps > start:
        return max(0.0, (cfg.steps - step) / (cfg.steps - start))
    return 1.0


def check_rows(x: np.ndarray) -> None:
    """Raise on a bad activation array: shape (n, 2, d) and finite."""
    if x.ndim != 3 or x.shape[1] != 2:
        raise ValueError(f"paired rows must have shape (n, 2, d), got {x.shape}")
    bad = ~np.isfinite(x).all(axis=(1, 2))
    if bad.any():
        raise ValueError(f"{int(bad.sum())} rows hold NaN/inf activations; first at row {int(np.argmax(bad))}")


def recon_loss(cc: CrossCoder, x: Any, x_hat: Any, f: Any, step: int) -> tuple[Any, Any]:
    """(reconstruction term, sparsity term) of ``cc.cfg.loss`` for one batch."""
    cfg = cc.cfg
    torch = require_torch()
    if cfg.loss == "e175":
        # E175 dfc.py [P]: element-mean MSE + λ_sh·mean|f_shared| + λ_excl·½(mean|f_(A∪sh)| + mean|f_(B∪sh)|)
        b = cc.blocks()
        mse = torch.nn.functional.mse_loss(x_hat, x)
        sh = f[:, b["shared"]]
        a_side = torch.cat([f[:, b["a_excl"]], sh], 1)
        b_side = torch.cat([f[:, b["b_excl"]], sh], 1)
        sparse = cfg.lambda_shared * sh.abs().mean() + cfg.lambda_excl * 0.5 * (a_side.abs().mean()
                                                                                 + b_side.abs().mean())
        return mse, sparse
    mse = (x - x_hat).pow(2).sum(dim=(1, 2)).mean()
    if cfg.sparsity == "l1":
        ramp = min(1.0, (step + 1) / max(1, int(0.05 * cfg.steps)))  # λ ramped over the first 5 % [R]
        return mse, cfg.l1_coeff * ramp * (f * cc.code_weights()).sum(-1).mean()
    return mse, torch.zeros(())


def auxk_loss(cc: CrossCoder, x: Any, x_hat: Any, a: Any, dead: Any) -> Any:
    """AuxK (Gao et al.): the top ``k_aux`` dead latents reconstruct the detached residual e = x − x̂ (no bias);
    Σ‖e − ê‖² / Σ‖e − mean(e)‖² [R: normaliser]."""
    torch = require_torch()
    n_dead = int(dead.sum())
    if n_dead == 0:
        return torch.zeros(())
    k_aux = cc.cfg.k_aux if cc.cfg.k_aux is not None else min(512, cc.d // 2)
    k_aux = max(1, min(k_aux, n_dead))
    score = (a * cc.code_weights()) * dead.to(a.dtype)
    idx = score.topk(k_aux, dim=-1).indices
    f_aux = a * torch.zeros_like(a).scatter_(-1, idx, 1.0) * dead.to(a.dtype)
    e = (x - x_hat).detach()
    e_hat = (f_aux @ cc.dec_weight().reshape(cc.D, -1)).reshape(e.shape)
    den = (e - e.mean(0, keepdim=True)).pow(2).sum()
    return (e - e_hat).pow(2).sum() / den.clamp_min(1e-12)


def train_crosscoder(rows: np.ndarray, cfg: CrossCoderConfig, *, scales: tuple[float, float] | None = None,
                     log_every: int = 50) -> tuple[CrossCoder, TrainLog]:
    """Train on ``rows`` (n, 2, d) float. With ``scales`` given the rows are already normalised by them (an
    :class:`~agentmill.methods.crosscoder.store.ActivationStore`); otherwise, with ``cfg.normalize``, s_m is
    estimated here and applied. Returns the crosscoder (θ calibrated for batchtopk) and its log."""
    with one_thread():
        return _train(rows, cfg, scales=scales, log_every=log_every)


def _train(rows: np.ndarray, cfg: CrossCoderConfig, *, scales: tuple[float, float] | None,
           log_every: int) -> tuple[CrossCoder, TrainLog]:
    import time

    torch = require_torch()
    t0 = time.perf_counter()
    x_all = np.asarray(rows, dtype=np.float32)
    check_rows(x_all)
    if scales is None:
        scales = norm_scales(x_all) if cfg.normalize else (1.0, 1.0)
        x_all = x_all * np.asarray(scales, dtype=np.float32)[None, :, None]
    n, _, d = x_all.shape
    cc = CrossCoder(cfg, d, scales=scales)
    data = torch.from_numpy(np.ascontiguousarray(x_all))
    opt = torch.optim.Adam(cc.parameters(), lr=cfg.learning_rate)
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    since_fired = torch.zeros(cc.D)
    theta: float | None = None
    t_start = int(cfg.threshold_start_frac * cfg.steps)
    log = TrainLog(scales=scales)
    for step in range(cfg.steps):
        for group in opt.param_groups:
            group["lr"] = cfg.learning_rate * lr_factor(step, cfg)
        x = data[torch.randint(0, n, (min(cfg.batch_size, n),), generator=gen)]
        a = cc.preacts(x).relu()
        f = cc.select(a, inference=False)
        x_hat = cc.decode(f)
        rec, sparse = recon_loss(cc, x, x_hat, f, step)
        loss = rec + sparse
        aux = torch.zeros(())
        if cfg.sparsity != "l1" and cfg.auxk_alpha > 0:
            aux = auxk_loss(cc, x, x_hat, a, since_fired > cfg.dead_window)
            loss = loss + cfg.auxk_alpha * aux
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(cc.parameters(), cfg.grad_clip)
        opt.step()
        cc.apply_masks()
        with torch.no_grad():
            fired = (f > 0).any(0)
            since_fired += x.shape[0]
            since_fired[fired] = 0
            if cfg.sparsity == "batchtopk" and step >= t_start:
                kept = (f * cc.code_weights())[f > 0]
                if kept.numel():
                    m = float(kept.min())
                    theta = m if theta is None else cfg.threshold_beta * theta + (1 - cfg.threshold_beta) * m
        if step % log_every == 0 or step == cfg.steps - 1:
            log.steps.append(step)
            log.loss.append(float(loss.detach()))
            log.recon.append(float(rec.detach()))
            log.aux.append(float(aux.detach()))
            log.l0.append(float((f > 0).float().sum(-1).mean()))
    if cfg.sparsity == "batchtopk":
        cc.threshold = theta
    for p in cc.parameters():
        p.requires_grad_(False)
    cc.check_partition()
    log.threshold, log.seconds = theta, time.perf_counter() - t0
    return cc, log
