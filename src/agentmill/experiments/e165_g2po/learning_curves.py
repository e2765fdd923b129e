"""Learning curves of the three estimators (G-5/G-6 on KeyDoor, G-7 on TextWorld), with a 95 % t-interval over
seeds, against training episodes and against environment steps."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from agentmill.experiments.plotting import pyplot, save


def _curves(data: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """label -> the arms (one per seed) of that method."""
    out: dict[str, list[dict[str, Any]]] = {}
    names = {"main": "{e}", "unique": "{e} under UniqueObs", "constkey": "{e} constant key"}
    for part, log in data["logs"].items():
        for a in log["arms"]:
            label = names[part].format(e="G2PO-style" if a["estimator"] == "g2po" else
                                       {"grpo": "GRPO", "gigpo": "GiGPO"}[a["estimator"]])
            out.setdefault(label, []).append(a)
    return out


def plot_learning_curves(data: dict[str, Any], out: Path) -> list[Path]:
    plt = pyplot()
    from scipy.stats import t as student_t

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for label, arms in _curves(data).items():
        y = np.array([a["success"] for a in arms])
        n = y.shape[0]
        m = y.mean(0)
        half = (student_t.ppf(0.975, n - 1) * y.std(0, ddof=1) / math.sqrt(n)) if n >= 2 else np.zeros_like(m)
        for ax, xkey in zip(axes, ("eval_episodes", "eval_env_steps")):
            x = np.array([a[xkey] for a in arms]).mean(0)
            line, = ax.plot(x, m, label=label, ls="--" if "UniqueObs" in label or "constant" in label else "-")
            ax.fill_between(x, np.clip(m - half, 0, 1), np.clip(m + half, 0, 1), alpha=0.15,
                            color=line.get_color())
    axes[0].set_xlabel("training episodes")
    axes[1].set_xlabel("training env steps (mean over seeds)")
    axes[0].set_ylabel("sampled-policy success")
    axes[0].set_title(data.get("title", "KeyDoor learning curves (95 % CI over seeds)"))
    axes[1].set_title("the same against env steps")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    path = out / data.get("plot_name", "g5_learning_curves.png")
    save(fig, path, dpi=110)
    return [path]
