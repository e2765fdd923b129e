"""E171 FT-5: separability along the trace — high at the start, a dip mid-trace, recovery at the end (measured,
not built in), with the twin as positive and negative control.

Organism: ``tiny-refusal-locked`` rollouts of FT-2 (same prompts and seeds; the rollout cache makes them the same
samples). Per-position probes at ``think_open`` and trace fractions φ (6 quick, 21 full) at the layer l* chosen for
``think_open`` on train; the ``think_open`` probe transferred unchanged to every φ and fixed layers are reported.
Valley depth ``D = min(AUROC(think_open), AUROC(frac:1.0)) − min_{φ∈[0.3, 0.7]} AUROC(φ)`` with a paired template
bootstrap. Twin: a ``valley`` profile (positive control, D ≥ 0.15) and a ``flat`` one (NC-P5: CI contains 0).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate
from agentmill.experiments.e171_first_token_probe import PAPER
from agentmill.experiments.protocol import Claim, Experiment, RunContext


@dataclass(frozen=True)
class Setup:
    organism: str = "tiny-refusal-locked"
    """The substrate."""
    fractions: tuple[float, ...] = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
    """Trace fractions φ."""
    n_c: int = 8
    """Prompts per split (as FT-2)."""
    n_n: int = 8
    n_b: int = 6
    n_d: int = 6
    k: int = 2
    k_contested: int = 4
    twin_prompts: int = 200
    """Twin prompts per profile (K = 2), half train, half test."""
    bootstrap: int = 1000
    min_per_class: int = 20
    seed: int = 0
    allow_unvalidated: bool = True
    """Run on an organism whose gates failed anyway, its numbers recorded as observed only (claims inconclusive,
    "precondition not met"); False: record nothing but the note."""


SETUPS = {"smoke": Setup(n_c=3, n_n=3, n_b=2, n_d=2, k=1, k_contested=2, twin_prompts=60, bootstrap=50,
                         min_per_class=2),
          "quick": Setup(),
          "full": Setup(fractions=tuple(round(0.05 * i, 2) for i in range(21)), n_c=16, n_n=16, n_b=12, n_d=12,
                        k=2, k_contested=6, bootstrap=2000)}

CLAIMS = (
    Claim("E171-FT5-organism", "Separability dips mid-trace and recovers at the end on the locked organism: valley "
          "depth D ≥ 0.05 with CI lower bound > 0 (all test samples).", "[S] valley across six models",
          "a valley", "ft5_valley_depth", ">=", 0.05, ci_bound=0.0),
    Claim("E171-FT5-twin", "Twin with a planted valley profile: D ≥ 0.15 (CI lower > 0).", "[R] positive control",
          "—", "ft5_twin_valley_depth", ">=", 0.15, ci_bound=0.0),
    Claim("E171-NCP5", "Twin with a flat profile: the depth CI contains 0 (1 = contains).", "[R] negative control "
          "NC-P5", "—", "ncp5_flat_ci_contains_0", ">=", 1.0, judge_on="exact",
          exact_why="the pre-registered control is the event 'CI contains 0', read off one interval"),
)


def _twin(profile: str, setup: Setup) -> tuple[list[float], Estimate]:
    from agentmill.methods.first_token_probe.config import ProbeConfig
    from agentmill.methods.first_token_probe.probes import fit_probes
    from agentmill.methods.first_token_probe.synthetic import SyntheticTwin
    from agentmill.methods.first_token_probe.valley import valley_depth

    tw = SyntheticTwin(n_layers=3, d=32, onset=1, profile=profile, snr=1.5)
    half = setup.twin_prompts // 2
    fr = setup.fractions
    Htr, ytr, gtr, ptr = tw.sample(half, 2, fr, seed=setup.seed + 3)
    Hte, yte, gte, _ = tw.sample(half, 2, fr, seed=setup.seed + 4, group_offset=1)
    cfg = ProbeConfig(C_grid=(1.0,), n_shuffles=0, bootstrap=10, seed=setup.seed, min_per_class=2)
    grid = fit_probes(Htr[:, :, 2:], ytr, gtr, ptr, Hte[:, :, 2:], yte, gte,
                      positions=[f"frac:{f}" for f in fr], layers=[2], cfg=cfg, shuffle_cells=False)
    S = np.stack([grid.fits[(p, 0)].test_scores for p in range(len(fr))], 1)
    return valley_depth(S, yte, gte, fr, n_boot=setup.bootstrap, seed=setup.seed)


def measure(setup: Setup, ctx: RunContext) -> dict[str, Estimate]:
    from agentmill.experiments.e171_first_token_probe.substrate import organism_or_precondition
    from agentmill.methods.first_token_probe.capture import capture
    from agentmill.methods.first_token_probe.config import ProbeConfig
    from agentmill.methods.first_token_probe.core import labels_of, organism_rollouts
    from agentmill.methods.first_token_probe.probes import DegenerateLabels, fit_probes
    from agentmill.methods.first_token_probe.valley import valley_depth

    out: dict[str, Estimate] = {}
    for profile in ("valley", "flat"):
        curve, est = _twin(profile, setup)
        ctx.data[f"twin_{profile}"] = {"auroc": [round(a, 4) for a in curve], "depth": est.to_dict()}
        if profile == "valley":
            out["ft5_twin_valley_depth"] = est
        else:
            out["ncp5_flat_ci_contains_0"] = Estimate.exact(float(est.lo <= 0 <= est.hi))
            out["twin_flat_depth"] = est
    variant = setup.organism.rsplit("-", 1)[-1]
    lm = organism_or_precondition(variant, ctx.data, setup.allow_unvalidated)
    if lm is None:
        return out
    counts = {"C": setup.n_c, "N": setup.n_n, "B": setup.n_b, "D": setup.n_d}
    train = organism_rollouts(lm, "probe_train", counts, k=setup.k, k_contested=setup.k_contested, seed=setup.seed)
    test = organism_rollouts(lm, "probe_test", counts, k=setup.k, k_contested=setup.k_contested, seed=setup.seed)
    ytr, yte = labels_of(train), labels_of(test)
    ktr, kte = ~np.isnan(ytr), ~np.isnan(yte)
    train = [r for r, k in zip(train, ktr) if k]
    test = [r for r, k in zip(test, kte) if k]
    ytr, yte = ytr[ktr].astype(int), yte[kte].astype(int)
    positions = ["think_open"] + [f"frac:{f}" for f in setup.fractions]
    a_tr = capture(lm, train, positions, "all")
    a_te = capture(lm, test, positions, "all")
    g = lambda rs: np.array([r.item.template_id for r in rs])  # noqa: E731
    pid = lambda rs: np.array([r.item.prompt_id for r in rs])  # noqa: E731
    cfg = ProbeConfig(n_shuffles=0, bootstrap=10, seed=setup.seed, min_per_class=setup.min_per_class)
    try:
        head = fit_probes(a_tr.H[:, :1], ytr, g(train), pid(train), a_te.H[:, :1], yte, g(test), positions=positions[:1],
                          layers=a_tr.layers, cfg=cfg, shuffle_cells=False)
    except DegenerateLabels as e:
        from agentmill.experiments.protocol import PRECONDITION_NOT_MET

        ctx.data["precondition"] = f"{PRECONDITION_NOT_MET}: {e}"
        return out
    L = head.best_layer["think_open"]
    li = a_tr.layers.index(L)
    grid = fit_probes(a_tr.H[:, :, li:li + 1], ytr, g(train), pid(train), a_te.H[:, :, li:li + 1], yte, g(test),
                      positions=positions, layers=[L], cfg=cfg, shuffle_cells=False)
    S = np.full((len(test), len(positions)), np.nan)
    for p in range(len(positions)):
        ok = ~np.isnan(a_te.H[:, p, 0, 0])
        S[ok, p] = grid.fits[(p, 0)].test_scores
    curve, est = valley_depth(S[:, 1:], yte, g(test), setup.fractions, n_boot=setup.bootstrap, seed=setup.seed,
                              start_scores=S[:, 0])
    # the think_open probe transferred unchanged to every φ
    from agentmill.core.stats import auroc
    from agentmill.methods.first_token_probe.probes import standardise

    fit0 = grid.fits[(0, 0)]
    transfer = []
    for p in range(1, len(positions)):
        ok = ~np.isnan(a_te.H[:, p, 0, 0])
        A, B = standardise(a_tr.H[:, 0, li].astype(float), a_te.H[ok, p, li].astype(float))
        transfer.append(round(auroc(B @ fit0.w + fit0.b, yte[ok]), 4))
    contested = np.array([r.item.category == "D" for r in test])
    c_curve = None
    if contested.sum() >= 4 and len(np.unique(yte[contested])) == 2:
        c_curve, c_est = valley_depth(S[contested, 1:], yte[contested], g(test)[contested], setup.fractions,
                                      n_boot=setup.bootstrap, seed=setup.seed, start_scores=S[contested, 0])
        ctx.data["contested_depth"] = c_est.to_dict()
    ctx.data.update({"organism_curve": [round(a, 4) for a in curve], "fractions": list(setup.fractions),
                     "layer": L, "think_open_auroc": float(grid.auroc[0, 0]), "transfer_curve": transfer,
                     "contested_curve": c_curve, "label_source": "vote"})
    out["ft5_valley_depth"] = est
    from agentmill.experiments.e171_first_token_probe.substrate import finish

    return finish(out, CLAIMS[:1], ctx.data)


def plots(data: dict[str, Any], out_dir: Path) -> list[Path]:
    from agentmill.experiments.plotting import pyplot, save

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    fr = data.get("fractions") or []
    if data.get("organism_curve"):
        ax.plot(fr, data["organism_curve"], "o-", label=f"locked organism, layer {data['layer']}")
        ax.axhline(data["think_open_auroc"], color="C0", ls=":", lw=0.8, label="think_open")
        ax.plot(fr, data["transfer_curve"], "x--", label="think_open probe transferred")
    for prof, st in (("twin_valley", "s-"), ("twin_flat", "^-")):
        if data.get(prof) and len(data[prof]["auroc"]) == len(fr):
            ax.plot(fr, data[prof]["auroc"], st, alpha=0.6, label=prof.replace("_", " "))
    ax.axvspan(0.3, 0.7, color="grey", alpha=0.1)
    ax.set_xlabel("trace fraction φ")
    ax.set_ylabel("test AUROC")
    ax.set_title("FT-5: separability by position (the valley)")
    ax.legend(fontsize=7)
    return [save(fig, out_dir / "e171_valley.png")]


EXPERIMENT = Experiment(
    id="e171.first_token_probe_valley",
    title="Separability along the trace: the valley",
    paper=PAPER, claims=CLAIMS, setups=SETUPS, measure=measure, plots=plots,
    scale_note="tiny locked organism (FT-2's rollouts) and the synthetic twin; 6 (quick) / 21 (full) trace fractions",
    requires=frozenset({"hf"}), version="1", parallel_safe=True, quick_budget_s=8)
