"""Separability along the trace: per-position probe AUROC over trace fractions, and the valley depth [R].

``D = min(AUROC(think_open), AUROC(frac:1.0)) − min_{φ ∈ [0.3, 0.7]} AUROC(φ)``, with a paired bootstrap over
templates: one resample of test templates re-evaluates every φ with the test scores fixed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate, auroc, percentile_estimate


@dataclass
class ValleyCurve:
    """Test AUROC per trace fraction at one layer, the valley depth with its template-bootstrap CI, and the
    ``think_open`` AUROC the depth compares against (NaN when not measured)."""

    fractions: list[float]
    auroc: list[float]
    depth: Estimate
    layer: int
    think_open_auroc: float = float("nan")
    n_train: int = 0
    n_test: int = 0


def valley_depth(scores: np.ndarray, y: np.ndarray, groups: np.ndarray, fractions: Sequence[float], *,
                 n_boot: int = 1000, seed: int = 0, start_scores: np.ndarray | None = None) -> tuple[list[float], Estimate]:
    """``scores`` [N, F] test scores per fraction (NaN where missing; ``fractions[0]`` must be 0.0 unless
    ``start_scores`` [N] gives the ``think_open`` scores) → (AUROC per fraction, depth estimate)."""
    fr = np.asarray(fractions, dtype=float)
    mid = (fr >= 0.3) & (fr <= 0.7)
    if not mid.any() or not np.isclose(fr[-1], 1.0):
        raise ValueError("valley needs fractions in [0.3, 0.7] and the end (1.0)")
    cols = [scores[:, j] for j in range(scores.shape[1])]
    start = start_scores if start_scores is not None else cols[0]

    def auc_rows(s: np.ndarray, rows: np.ndarray) -> float:
        r = rows[~np.isnan(s[rows])]
        return auroc(s[r], y[r]) if len(np.unique(y[r])) == 2 else float("nan")

    def depth(rows: np.ndarray) -> float:
        a = [auc_rows(c, rows) for c in cols]
        ends = min(auc_rows(start, rows), a[-1])
        return float(ends - np.nanmin(np.array(a)[mid]))

    all_rows = np.arange(len(y))
    curve = [auc_rows(c, all_rows) for c in cols]
    uniq, codes = np.unique(groups, return_inverse=True)
    members = [np.flatnonzero(codes == i) for i in range(uniq.size)]
    rng = np.random.default_rng(seed)
    boots = np.empty(n_boot)
    for b in range(n_boot):
        pick = rng.integers(0, uniq.size, uniq.size)
        boots[b] = depth(np.concatenate([members[i] for i in pick]))
    return curve, percentile_estimate(depth(all_rows), boots, n=int(uniq.size), method="paired_cluster_bootstrap")


def organism_valley(lm: Any, train: Sequence[Any], test: Sequence[Any], *, fractions: Sequence[float],
                    label_source: str = "vote", min_per_class: int = 20, n_boot: int = 1000,
                    seed: int = 0) -> ValleyCurve:
    """The valley of a model on labelled rollouts (:class:`~.sampling.Rollout`, ``parsed`` set): capture
    ``think_open`` and every ``frac:φ`` at all layers, choose the layer l* by the ``think_open`` probe's inner CV
    on train, fit one probe per fraction at l* (grouped by template), score test, and take
    :func:`valley_depth` with ``think_open`` as the start. Rows without a label are dropped first; too few of a
    class raises :class:`~.probes.DegenerateLabels`. ``fractions`` must include [0.3, 0.7] points and 1.0."""
    from agentmill.methods.first_token_probe.capture import capture
    from agentmill.methods.first_token_probe.config import ProbeConfig
    from agentmill.methods.first_token_probe.core import labels_of
    from agentmill.methods.first_token_probe.probes import fit_probes

    ytr, yte = labels_of(train, label_source), labels_of(test, label_source)
    ktr, kte = ~np.isnan(ytr), ~np.isnan(yte)
    train = [r for r, k in zip(train, ktr) if k]
    test = [r for r, k in zip(test, kte) if k]
    ytr, yte = ytr[ktr].astype(int), yte[kte].astype(int)
    positions = ["think_open"] + [f"frac:{f}" for f in fractions]
    a_tr = capture(lm, train, positions, "all")
    a_te = capture(lm, test, positions, "all")
    g_tr = np.array([r.item.template_id for r in train])
    g_te = np.array([r.item.template_id for r in test])
    p_tr = np.array([r.item.prompt_id for r in train])
    cfg = ProbeConfig(n_shuffles=0, bootstrap=10, seed=seed, min_per_class=min_per_class)
    head = fit_probes(a_tr.H[:, :1], ytr, g_tr, p_tr, a_te.H[:, :1], yte, g_te, positions=positions[:1],
                      layers=a_tr.layers, cfg=cfg, shuffle_cells=False)
    L = head.best_layer["think_open"]
    li = a_tr.layers.index(L)
    grid = fit_probes(a_tr.H[:, :, li:li + 1], ytr, g_tr, p_tr, a_te.H[:, :, li:li + 1], yte, g_te,
                      positions=positions, layers=[L], cfg=cfg, shuffle_cells=False)
    S = np.full((len(test), len(positions)), np.nan)
    for p in range(len(positions)):
        ok = ~np.isnan(a_te.H[:, p, 0, 0])
        S[ok, p] = grid.fits[(p, 0)].test_scores
    curve, est = valley_depth(S[:, 1:], yte, g_te, fractions, n_boot=n_boot, seed=seed, start_scores=S[:, 0])
    return ValleyCurve([float(f) for f in fractions], [float(a) for a in curve], est, int(L),
                       float(grid.auroc[0, 0]), len(train), len(test))


def plot_valley(curve: ValleyCurve, path: Any, *, title: str = "separability by position (the valley)") -> Any:
    """Write the valley plot (AUROC by trace fraction, the think_open level, the [0.3, 0.7] band) to ``path``."""
    from pathlib import Path

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(curve.fractions, curve.auroc, "o-", label=f"test AUROC, layer {curve.layer}")
    if curve.think_open_auroc == curve.think_open_auroc:
        ax.axhline(curve.think_open_auroc, color="C0", ls=":", lw=0.8, label="think_open")
    ax.axvspan(0.3, 0.7, color="grey", alpha=0.1)
    ax.set_xlabel("trace fraction φ")
    ax.set_ylabel("test AUROC")
    ax.set_title(f"{title}; depth {curve.depth.fmt()}", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
