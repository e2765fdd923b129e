"""The CR-8 analysis shared by the scripted attack (``compression``) and the SmolLM2-summariser attack
(``attack_llm``): the tightest ratio meeting a survival target, compaction points with progress, paired
differences of two columns, and the attack-transfer heatmap."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate, two_stage_bootstrap
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import RunContext


def tightest_ratio(survival: dict[float, float], target: float) -> float:
    """The smallest ratio whose clean survival is ≥ ``target`` (the spec's "ratio tuned on dev so clean survival
    ≥ 90 %"); when none reaches it, the loosest ratio (the closest the grid gets; the survival is reported)."""
    if not survival:
        raise ValueError("tightest_ratio: no ratios")
    ok = [r for r in sorted(survival) if survival[r] >= target]
    return ok[0] if ok else max(survival)


def points_with_progress(sb: Any, counter: Any, eps: list[Any], keep_last: int, ctx: RunContext,
                       label: str) -> list[tuple[Any, list[Any]]]:
    from agentmill.methods.constraint_rot.attacks.cases import compaction_points

    return compaction_points(sb, eps, counter, keep_last,
                             progress=lambda d, t: ctx.progress(f"E164: compaction points ({label})", d, t))


def column_difference(rows: list[dict[str, Any]], a: str, b: str, B: int) -> Estimate:
    """Mean of column ``a`` minus mean of column ``b``, paired by episode (two-stage bootstrap: families, then
    episodes)."""
    from agentmill.methods.constraint_rot.stats import CLUSTER, UNIT

    return two_stage_bootstrap(rows, lambda rs: float(np.mean([r[a] for r in rs])), B=B, seed=0,
                               paired_with=lambda rs: float(np.mean([r[b] for r in rs])), cluster=CLUSTER, unit=UNIT)


def transfer_heatmap(mat: Any, rows: list[str], cols: list[str], title: str, path: Path) -> Path:
    """A transfer matrix (attack × compactor drop rates in [0, 1]) as an annotated heat map at ``path``."""
    plt = pyplot()

    mat = np.asarray(mat, dtype=float)
    fig, ax = plt.subplots(figsize=(1.2 * len(cols) + 2.5, 0.6 * len(rows) + 1.8))
    im = ax.imshow(mat, vmin=0, vmax=1, cmap="magma")
    for i in range(len(rows)):
        for j in range(len(cols)):
            ax.text(j, i, f"{mat[i, j]:.2f}", ha="center", va="center", fontsize=8,
                    color="white" if mat[i, j] < 0.5 else "black")
    ax.set_xticks(range(len(cols)), cols, rotation=30, ha="right", fontsize=8)
    ax.set_yticks(range(len(rows)), rows, fontsize=8)
    ax.set_title(title, fontsize=9)
    fig.colorbar(im, ax=ax, fraction=0.04)
    fig.tight_layout()
    save(fig, path, dpi=110)
    return path
