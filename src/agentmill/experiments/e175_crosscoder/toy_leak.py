"""E175 CX-3: joint encoding leaks A's information into B's reconstruction [D] channel, [I] size.

``make_leak_pair``: a label s toggles one direction in x^A only; h_B is independent of s by construction. A plain
BatchTopK crosscoder (CC) and a DFC are trained on the pair. A logistic probe (trained on one half of the held-out
rows, AUROC on the other half, bootstrap CI over test rows) reads s from:
ĥ_B(joint) = B's reconstruction from the code of (x^A, x^B) — E175's spillover patch —, ĥ_B(self_only) = the same
with x^A replaced by its dataset mean, and the raw h_B. Thresholds: joint AUROC ≥ 0.65 (CI above 0.5); self_only
and h_B within 0.50 ± 0.05 (whole CI).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate, auroc
from agentmill.experiments.e175_crosscoder import PAPER
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, Experiment, RunContext


@dataclass(frozen=True)
class Setup:
    rows: int = 30_000
    eval_rows: int = 10_000
    dict_size: int = 256
    k: int = 8
    steps: int = 600
    n_boot: int = 1000
    seed: int = 0


SETUPS = {"smoke": Setup(rows=4000, eval_rows=2000, steps=30, n_boot=100), "quick": Setup(),
          "full": Setup(rows=100_000, eval_rows=20_000, steps=2000, n_boot=2000)}

SUB = "substrate: make_leak_pair (d = 64)"
CLAIMS = (
    Claim("CX-3-joint-CC", "B's reconstruction from the joint code of a plain crosscoder carries a label present "
          "only in A: probe AUROC ≥ 0.65.", f"[D] channel, [I] size; {SUB}", "spillover +6.7 pp (E175, Qwen)",
          "cx3_auroc_joint_cc", ">=", 0.65, ci_bound=0.5),
    Claim("CX-3-joint-DFC", "The same for a DFC crosscoder: probe AUROC ≥ 0.65.", f"[D] channel, [I] size; {SUB}",
          "—", "cx3_auroc_joint_dfc", ">=", 0.65, ci_bound=0.5),
    Claim("CX-3-self-only", "With A's view replaced by its mean (self_only), B's reconstruction carries nothing "
          "(AUROC within 0.50 ± 0.05; the worse of CC and DFC).", f"[D]; {SUB}", "—", "cx3_auroc_self_only_worst",
          "in", 0.45, upper=0.55),
    Claim("CX-3-hB", "The raw h_B carries nothing (AUROC within 0.50 ± 0.05).", f"[D] construction check; {SUB}",
          "—", "cx3_auroc_h_b", "in", 0.45, upper=0.55),
)


def fit_logistic(X: np.ndarray, y: np.ndarray, ridge: float = 1e-2, iters: int = 25) -> tuple[np.ndarray, float]:
    """Ridge logistic regression by Newton's method (IRLS) on standardised features: (w, b)."""
    n, p = X.shape
    Z = np.hstack([X, np.ones((n, 1))])
    w = np.zeros(p + 1)
    reg = ridge * np.eye(p + 1)
    reg[-1, -1] = 0.0
    for _ in range(iters):
        prob = 1 / (1 + np.exp(-np.clip(Z @ w, -30, 30)))
        g = Z.T @ (prob - y) + reg @ w
        H = (Z * (prob * (1 - prob))[:, None]).T @ Z + reg
        step = np.linalg.solve(H, g)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    return w[:-1], float(w[-1])


def probe_auroc(X: np.ndarray, y: np.ndarray, *, n_boot: int, seed: int) -> tuple[Estimate, np.ndarray]:
    """Probe trained on the first half, AUROC on the second with a percentile-bootstrap CI over test rows."""
    X = np.asarray(X, np.float64)
    half = len(X) // 2
    mu, sd = X[:half].mean(0), X[:half].std(0)
    sd[sd < 1e-9] = 1.0
    Xs = (X - mu) / sd
    w, b = fit_logistic(Xs[:half], y[:half].astype(float))
    score, lab = Xs[half:] @ w + b, y[half:].astype(bool)
    value = auroc(score, lab)
    rng = np.random.default_rng(seed)
    boots = []
    for _ in range(n_boot):
        idx = rng.integers(0, len(score), len(score))
        if lab[idx].all() or not lab[idx].any():
            continue
        boots.append(auroc(score[idx], lab[idx]))
    lo, hi = np.quantile(boots, [0.025, 0.975])
    est = Estimate(value, float(min(lo, value)), float(max(hi, value)), n=len(score), method="bootstrap",
                   n_boot=n_boot, dropped=n_boot - len(boots))
    return est, score


def measure(setup: Setup, ctx: RunContext) -> dict[str, Estimate]:
    import torch

    from agentmill.methods.crosscoder import CrossCoderConfig, Partition, train_crosscoder
    from agentmill.methods.crosscoder.synthetic import make_leak_pair

    pair = make_leak_pair(n=setup.rows + setup.eval_rows, seed=setup.seed)
    ev, s = pair.x[setup.rows:], pair.s[setup.rows:]
    out: dict[str, Estimate] = {}
    table: dict[str, Any] = {}
    selfs = []
    for name, part in (("cc", None), ("dfc", Partition(0.05, 0.05))):
        cfg = CrossCoderConfig(dict_size=setup.dict_size, k=setup.k, steps=setup.steps, partition=part,
                               warmup=min(100, setup.steps // 10), dead_window=20_000, seed=setup.seed)
        cc, log = train_crosscoder(pair.x[:setup.rows], cfg)
        sc = np.asarray(cc.scales, np.float32)[None, :, None]
        x = torch.as_tensor(ev * sc)
        x_self = x.clone()
        x_self[:, 0] = torch.as_tensor(pair.x[:setup.rows, 0].mean(0) * cc.scales[0])  # self_only(fill="mean")
        with torch.no_grad():
            hb_joint = cc.decode_to_residual(cc.encode(x), 1).numpy()
            hb_self = cc.decode_to_residual(cc.encode(x_self), 1).numpy()
        e_joint, _ = probe_auroc(hb_joint, s, n_boot=setup.n_boot, seed=setup.seed)
        e_self, _ = probe_auroc(hb_self, s, n_boot=setup.n_boot, seed=setup.seed)
        out[f"cx3_auroc_joint_{name}"] = e_joint
        out[f"cx3_auroc_self_only_{name}"] = e_self
        selfs.append(e_self)
        table[name] = {"joint": e_joint.value, "self_only": e_self.value, "train_seconds": log.seconds,
                       "partition_violation": cc.partition_violation()}
    out["cx3_auroc_self_only_worst"] = max(selfs, key=lambda e: abs(e.value - 0.5))
    e_hb, _ = probe_auroc(ev[:, 1], s, n_boot=setup.n_boot, seed=setup.seed)
    e_ha, _ = probe_auroc(ev[:, 0], s, n_boot=setup.n_boot, seed=setup.seed)
    out["cx3_auroc_h_b"] = e_hb
    out["cx3_auroc_h_a"] = e_ha
    table["h_b"], table["h_a"] = e_hb.value, e_ha.value
    ctx.data.update({"table": table, "substrate": "make_leak_pair (d = 64)"})
    return out


def plots(data: dict[str, Any], out_dir: Path) -> list[Path]:
    plt = pyplot()
    t = data["table"]
    labels = ["h_A", "ĥ_B joint CC", "ĥ_B self CC", "ĥ_B joint DFC", "ĥ_B self DFC", "h_B"]
    vals = [t["h_a"], t["cc"]["joint"], t["cc"]["self_only"], t["dfc"]["joint"], t["dfc"]["self_only"], t["h_b"]]
    fig, ax = plt.subplots(figsize=(5.5, 3))
    ax.bar(labels, vals, color="#4477aa")
    ax.axhline(0.5, color="k", lw=0.8)
    ax.axhline(0.65, color="#cc6677", ls="--", lw=0.8)
    ax.set_ylabel("probe AUROC for A's label")
    ax.set_ylim(0.4, 1.02)
    ax.tick_params(axis="x", labelsize=7, rotation=20)
    ax.set_title("CX-3: leak through the joint code")
    fig.tight_layout()
    return [save(fig, out_dir / "cx3_leak.png")]


EXPERIMENT = Experiment(
    id="e175.crosscoder_toy_leak",
    title="Joint encoding leaks A's information into B's reconstruction (CX-3)",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    scale_note="synthetic pair (d = 64, 256 latents) where B is independent of the label by construction, instead "
               "of Qwen2.5-3B base vs ToolRL; shows the channel, not E175's magnitude",
    plots=plots,
    parallel_safe=True,
    quick_budget_s=30,
)
