"""Exact lossless verification of a drafted block (Leviathan et al. arXiv:2211.17192, Chen et al.
arXiv:2302.01318).

For each request the target has scored ``[y, x_1 .. x_ℓ]``, giving warped distributions p_1 .. p_{ℓ+1}. Position k
is accepted when ``u_k · q_k(x_k) < p_k(x_k)`` (min(1, p/q) without a division); the first rejection commits a
replacement drawn from ``norm(max(0, p_k − q_k))`` and ends the round; a fully accepted block earns a bonus token
from p_{ℓ+1}. Each committed token is then distributed exactly as the warped target's, whatever q was — the
property the statistical tests check. Deterministic drafts (n-gram lookup) are one-hot q: x is accepted with
probability p(x), and the residual is p without x.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

RESIDUAL_FLOOR = 1e-12
"""Below this residual mass the replacement is drawn from p itself (only reachable by rounding: zero residual
means p = q); DeepSpec's ``sample_residual`` does the same [C]."""


@dataclass
class Proposal:
    """Drafted blocks of R requests: ``tokens[r, k]`` (target ids, -1 beyond ``avail[r]``) and the distributions
    they were sampled from (``q[r, k]`` over the target vocabulary; None for deterministic drafts)."""

    tokens: Any                 # torch.LongTensor [R, γ]
    q: Any | None               # torch.FloatTensor [R, γ, V] or None
    avail: np.ndarray           # [R]
    conf: np.ndarray | None = None


def verify(p_rows: Sequence[Any], proposal: Proposal, lengths: np.ndarray,
           gens: Sequence[Any]) -> tuple[np.ndarray, list[list[int]]]:
    """Accept/reject each request's first ``lengths[r]`` drafts against the target rows ``p_rows[r]`` (``[ℓ_r+1,
    V]`` warped probabilities). Returns (accepted counts m_r, committed tokens incl. the replacement/bonus)."""
    import torch

    R = len(p_rows)
    if not len(lengths) == len(gens) == R:
        raise ValueError("p_rows, lengths and gens must have one entry per request")
    accepted = np.zeros(R, dtype=np.int64)
    committed: list[list[int]] = []
    for r in range(R):
        p, ell, g = p_rows[r], int(lengths[r]), gens[r]
        if ell > int(proposal.avail[r]):
            raise ValueError(f"request {r}: verify length {ell} exceeds the {int(proposal.avail[r])} drafted tokens")
        if p.shape[0] != ell + 1:
            raise ValueError(f"request {r}: need {ell + 1} target rows for {ell} drafts, got {p.shape[0]}")
        out: list[int] = []
        for k in range(ell):
            x = int(proposal.tokens[r, k])
            qk = proposal.q[r, k] if proposal.q is not None else None
            qx = float(qk[x]) if qk is not None else 1.0
            if qx <= 0:
                raise ValueError(f"request {r}, position {k}: draft token {x} has q = 0 (it cannot have been drawn)")
            u = float(torch.rand((), generator=g, dtype=torch.float64))
            if u * qx < float(p[k, x]):
                out.append(x)
                continue
            if qk is None:
                resid = p[k].double().clone()
                resid[x] = 0.0
            else:
                resid = (p[k].double() - qk.double()).clamp_min(0.0)
            mass = float(resid.sum())
            dist = resid / mass if mass > RESIDUAL_FLOOR else p[k].double()
            out.append(int(torch.multinomial(dist, 1, generator=g)))
            break
        else:
            out.append(int(torch.multinomial(p[ell].double(), 1, generator=g)))
        accepted[r] = len(out) - 1
        committed.append(out)
    return accepted, committed
