"""Diagnostics every trained crosscoder gets: FVU per model, L0, dead latents (per block), partition integrity,
relative decoder norms, and Latent Scaling (Minder et al., arXiv 2504.02922 §3 [P]; targets [R]).

Relative norm ρ_i = ‖d_i^A‖ / (‖d_i^A‖ + ‖d_i^B‖): "A-only" ρ ≥ 0.9, "B-only" ρ ≤ 0.1, "shared" 0.3 ≤ ρ ≤ 0.7.

Latent Scaling for latent j with direction d = d_j^A, per model m: β^m = Σ_n f_j⟨d, y_n^m⟩ / (‖d‖² Σ_n f_j²), the
least-squares fit y ≈ β f_j d. Error target y_ε^m = (x^m − x̂^m) + f_j d_j^m; reconstruction target y_r^m = x̂^m.
ν = β^B / β^A; ν_r ≥ 0.1 or ν_ε ≥ 0.1 flags the latent "not A-specific" (B carries the direction too).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agentmill.methods.crosscoder.model import CrossCoder, require_torch, one_thread


def encode_rows(cc: CrossCoder, x: np.ndarray, *, chunk: int = 8192) -> tuple[np.ndarray, np.ndarray]:
    """(codes f (n, D), reconstructions x̂ (n, 2, d)) of normalised rows ``x`` (inference mode), in chunks."""
    torch = require_torch()
    fs, xs = [], []
    with torch.no_grad(), one_thread():
        for s in range(0, len(x), chunk):
            f = cc.encode(torch.as_tensor(np.asarray(x[s:s + chunk], dtype=np.float32)))
            fs.append(f.numpy())
            xs.append(cc.decode(f).numpy())
    return np.concatenate(fs), np.concatenate(xs)


def relative_norms(cc: CrossCoder) -> tuple[np.ndarray, np.ndarray]:
    """(ρ (D,), cos(d_i^A, d_i^B) (D,)); latents with both decoders 0 get ρ = NaN."""
    with require_torch().no_grad():
        w = cc.dec_weight().numpy()
    na, nb = np.linalg.norm(w[:, 0], axis=1), np.linalg.norm(w[:, 1], axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        rho = na / (na + nb)
        cos = (w[:, 0] * w[:, 1]).sum(1) / (na * nb)
    return rho, cos


def latent_scaling(cc: CrossCoder, x: np.ndarray, j: int, *, f: np.ndarray | None = None,
                   x_hat: np.ndarray | None = None) -> dict[str, float]:
    """β and ν for latent ``j`` on normalised rows ``x`` (n, 2, d): ``beta_eps_A/B``, ``beta_r_A/B``, ``nu_eps``,
    ``nu_r`` (NaN when j never fires)."""
    if f is None or x_hat is None:
        f, x_hat = encode_rows(cc, x)
    with require_torch().no_grad():
        w = cc.dec_weight().numpy()
    fj = f[:, j].astype(np.float64)
    d = w[j, 0].astype(np.float64)
    den = float(d @ d) * float(fj @ fj)
    out: dict[str, float] = {}
    if den == 0:
        return {k: float("nan") for k in ("beta_eps_A", "beta_eps_B", "beta_r_A", "beta_r_B", "nu_eps", "nu_r")}
    for m, name in ((0, "A"), (1, "B")):
        err = x[:, m].astype(np.float64) - x_hat[:, m] + fj[:, None] * w[j, m][None]
        out[f"beta_eps_{name}"] = float(fj @ (err @ d)) / den
        out[f"beta_r_{name}"] = float(fj @ (x_hat[:, m].astype(np.float64) @ d)) / den
    out["nu_eps"] = out["beta_eps_B"] / out["beta_eps_A"] if out["beta_eps_A"] else float("nan")
    out["nu_r"] = out["beta_r_B"] / out["beta_r_A"] if out["beta_r_A"] else float("nan")
    return out


@dataclass
class Diagnostics:
    fvu_a: float
    fvu_b: float
    l0: float
    dead_fraction: float
    dead_by_block: dict[str, float]
    partition_violation: float
    rho: np.ndarray
    cos: np.ndarray
    counts: dict[str, int] = field(default_factory=dict)
    """Latents per ρ class: a_only, b_only, shared."""

    def summary(self) -> dict[str, Any]:
        return {"fvu_a": self.fvu_a, "fvu_b": self.fvu_b, "l0": self.l0, "dead_fraction": self.dead_fraction,
                "dead_by_block": self.dead_by_block, "partition_violation": self.partition_violation,
                **{f"n_{k}": v for k, v in self.counts.items()}}


def fvu(x: np.ndarray, x_hat: np.ndarray) -> tuple[float, float]:
    """Fraction of variance unexplained per model: Σ‖x^m − x̂^m‖² / Σ‖x^m − mean(x^m)‖²."""
    out = []
    for m in (0, 1):
        xm = x[:, m].astype(np.float64)
        out.append(float(((xm - x_hat[:, m]) ** 2).sum() / ((xm - xm.mean(0)) ** 2).sum()))
    return out[0], out[1]


def diagnose(cc: CrossCoder, x: np.ndarray, holdout_rows: int = 20_000) -> Diagnostics:
    """Every diagnostic on the last ``holdout_rows`` normalised rows of ``x``."""
    xs = np.asarray(x[-holdout_rows:], dtype=np.float32)
    f, x_hat = encode_rows(cc, xs)
    fa, fb = fvu(xs, x_hat)
    fired = (f > 0).any(0)
    rho, cos = relative_norms(cc)
    blocks = {k: v for k, v in cc.blocks().items() if v.stop > v.start}
    dead_by = {k: float(1 - fired[v].mean()) for k, v in blocks.items()}
    counts = {"a_only": int(np.nansum(rho >= 0.9)), "b_only": int(np.nansum(rho <= 0.1)),
              "shared": int(np.nansum((rho >= 0.3) & (rho <= 0.7)))}
    return Diagnostics(fa, fb, float((f > 0).sum(1).mean()), float(1 - fired.mean()), dead_by,
                       cc.partition_violation(), rho, cos, counts)
