"""What the e167 learning experiments share: per-stage evaluation rows and their paired comparisons, and the
fidelity-by-dimension plot. Not an experiment (no ``EXPERIMENT``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from agentmill.experiments.e167_world_model.stages import paired, wm_config
from agentmill.experiments.plotting import pyplot, save

DIMS = ("format", "factuality", "consistency", "realism", "quality")


def stage_rows(pipeline: str, name: str, ctx: Any) -> list[dict[str, Any]]:
    from agentmill.methods.world_model import pipeline as P

    cfg = wm_config(pipeline)
    ctx.progress(f"stage {name}", 0, None)
    rows = P.evaluate(cfg, name)
    _, log = P.stage(cfg, name)
    summary = {"seconds": log.get("seconds"), "final_loss": (log.get("losses") or [None])[-1]}
    if "rl" in log:
        rl = log["rl"]
        summary.update({k: rl[k] for k in ("reward", "rule", "judge", "praise_full", "praise_obs", "parse_rate",
                                           "kl", "dropped_groups")})
    ctx.data.setdefault("stages", {})[name] = {**summary, **summarise(rows), "config": cfg.digest()}
    return rows


def summarise(rows: list[dict[str, Any]]) -> dict[str, float]:
    def m(key, sub=None):
        vals = [r[key] for r in rows if sub is None or r["changed"] == sub]
        return float(np.mean(vals)) if vals else float("nan")

    out = {"f1": m("f1"), "em": m("em"), "f1_changed": m("f1", True), "f1_unchanged": m("f1", False),
           "parse_rate": m("parse_ok"), "praise_full": m("praise_full"), "praise_obs": m("praise_obs"),
           "naive_judge": m("naive_judge"), "n": len(rows), "changed_share": m("changed")}
    for d in DIMS:
        vals = [(r["dims"][d] - 1) / 4 * 100 for r in rows if r["dims"][d] > 0]
        out[f"dim_{d}"] = float(np.mean(vals)) if vals else float("nan")
    return out


def delta(a: list[dict[str, Any]], b: list[dict[str, Any]], key: str, n_boot: int, seed: int = 0):
    """Paired Δ mean(a[key] − b[key]) over the same evaluation items, layout-cluster bootstrap."""
    if [(r["task_id"], r["t"]) for r in a] != [(r["task_id"], r["t"]) for r in b]:
        raise ValueError("paired comparison over different evaluation items")
    return paired([float(r[key]) for r in a], [float(r[key]) for r in b], [r["task_id"] for r in a],
                  n_boot=n_boot, seed=seed)


def plot_dims(data: dict[str, Any], out: Path, name: str, title: str) -> list[Path]:
    stages = data.get("stages") or {}
    if not stages:
        return []
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 3.2))
    xs = np.arange(len(DIMS))
    w = 0.8 / len(stages)
    for i, (st, v) in enumerate(stages.items()):
        ax.bar(xs + i * w - 0.4 + w / 2, [v.get(f"dim_{d}", np.nan) for d in DIMS], w, label=st)
    ax.set_xticks(xs, DIMS)
    ax.set_ylabel("rule score (0-100)")
    ax.set_ylim(0, 100)
    ax.legend(fontsize=7)
    ax.set_title(title)
    fig.tight_layout()
    p = out / name
    save(fig, p)
    return [p]
