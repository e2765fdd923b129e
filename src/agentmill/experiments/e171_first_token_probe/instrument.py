"""E171 FT-1: the probe instrument finds a planted signal at the right layer and nothing elsewhere.

Substrates: the synthetic twin (quick: 13 hidden-state entries × d 64, onset 6; full: 31 × 128, onset 15, the
SmolLM2 depth), n = 400 samples (200 prompts × K = 2), template-disjoint train/test; plus a plant in a real
network: ``α·s·u`` added at ``think_open`` to ``hidden_states[ℓ*]`` with κ = 4 and labels s independent of the
prompt — in the shipped tiny organism (ℓ* = 2 of 0..3; quick and full, reported) and in SmolLM2-135M (ℓ* = 15,
n = 256 prompts, grouped 5-fold out-of-fold scores; full only, its own claims). Onset = first layer whose AUROC
≥ 0.80. Negative controls: shuffled labels in every cell (NC-P1), layers below ℓ* at chance (NC-P3).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate, auroc
from agentmill.experiments.e171_first_token_probe import PAPER
from agentmill.experiments.protocol import Claim, Experiment, RunContext, withhold


@dataclass(frozen=True)
class Setup:
    twin_layers: int = 13
    """Hidden-state entries of the twin (0 = embeddings)."""
    twin_d: int = 64
    """Twin width."""
    twin_onset: int = 6
    """Planted onset layer of the twin."""
    n_prompts: int = 200
    """Twin prompts (K = 2 samples each: n = 400), half train / half test by template."""
    snr: float = 2.0
    """Twin signal-to-noise (signal ± snr along u, unit noise per dimension)."""
    n_shuffles: int = 20
    """Shuffled-label refits per cell."""
    bootstrap: int = 1000
    """Template bootstrap resamples."""
    tiny_plant: bool = True
    """Also plant in the shipped tiny organism (reported)."""
    plant_model: str = ""
    """A real model to plant in with its own claims ("" = none; full: hf:smollm2)."""
    plant_layer: int = 15
    """ℓ* for the plant_model (hidden-state index)."""
    plant_prompts: int = 256
    """Prompts for the plant_model run."""
    kappa: float = 4.0
    """Plant strength in SDs of ⟨h, u⟩."""
    seed: int = 0


SETUPS = {"smoke": Setup(twin_layers=5, twin_onset=2, n_prompts=60, n_shuffles=3, bootstrap=50),
          "quick": Setup(),
          "full": Setup(twin_layers=31, twin_d=128, twin_onset=15, plant_model="hf:smollm2")}

CLAIMS = (
    Claim("E171-FT1-auroc", "On the twin, a probe at the planted layer separates the planted labels: "
          "AUROC(ℓ*) ≥ 0.95 (whole CI).", "[R] instrument check", "—", "ft1_twin_auroc_at_onset", ">=", 0.95),
    Claim("E171-FT1-onset", "On the twin, the first layer with AUROC ≥ 0.80 is the planted layer (|onset − ℓ*| = 0).",
          "[R] instrument check", "—", "ft1_twin_onset_error", "<=", 0.0, judge_on="exact",
          exact_why="an integer read off the seeded grid; chance below ℓ* is checked by its own claim"),
    Claim("E171-FT1-shuffle", "On the twin, ≥ 19/20 shuffled-label refits at ℓ* score within 0.5 ± 0.08.",
          "[R] control", "—", "ft1_twin_shuffles_in_band", ">=", 0.95, judge_on="exact",
          exact_why="a count over a fixed seeded battery of 20 permutations: the pre-registered rule is the count"),
    Claim("E171-NCP1", "Shuffled labels give chance in every (position, layer) cell: share of shuffled refits "
          "within 0.5 ± 0.18 (quick) / 0.10 (full) ≥ 0.95.", "[R] negative control NC-P1", "—",
          "ncp1_share_in_band", ">=", 0.95, judge_on="exact",
          exact_why="a count over the fixed seeded battery of shuffles × cells"),
    Claim("E171-NCP3", "Layers below the planted layer are at chance: max test AUROC below ℓ* ≤ 0.62.",
          "[R] negative control NC-P3", "—", "ncp3_max_auroc_below", "<=", 0.62, judge_on="exact",
          exact_why="a maximum over the fixed set of layers below ℓ* on one seeded twin draw"),
    Claim("E171-FT1-smollm2-onset", "SmolLM2-135M plant (ℓ* = 15, κ = 4, think_open, n = 256): onset = 15.",
          "[R] instrument check", "—", "ft1_smollm2_onset_error", "<=", 0.0, judge_on="exact",
          exact_why="an integer read off the grid of out-of-fold AUROCs"),
    Claim("E171-FT1-smollm2-auroc", "SmolLM2-135M plant: out-of-fold AUROC(15) ≥ 0.90 (whole CI).",
          "[R] instrument check", "—", "ft1_smollm2_auroc_at_onset", ">=", 0.90),
    Claim("E171-FT1-smollm2-below", "SmolLM2-135M plant: max out-of-fold AUROC over layers < 15 ≤ 0.62.",
          "[R] instrument check", "—", "ft1_smollm2_max_below", "<=", 0.62, judge_on="exact",
          exact_why="a maximum over the fixed set of layers below ℓ* on one seeded prompt draw"),
)


def _twin(setup: Setup, ctx: RunContext) -> dict[str, Estimate]:
    from agentmill.methods.first_token_probe.config import ProbeConfig
    from agentmill.methods.first_token_probe.probes import fit_probes
    from agentmill.methods.first_token_probe.synthetic import SyntheticTwin

    tw = SyntheticTwin(n_layers=setup.twin_layers, d=setup.twin_d, onset=setup.twin_onset, snr=setup.snr)
    half = setup.n_prompts // 2
    Htr, ytr, gtr, ptr = tw.sample(half, 2, seed=setup.seed, group_offset=0)
    Hte, yte, gte, _ = tw.sample(half, 2, seed=setup.seed + 1, group_offset=1)
    cfg = ProbeConfig(n_shuffles=setup.n_shuffles, bootstrap=setup.bootstrap, seed=setup.seed,
                      min_per_class=min(20, int(min(np.bincount(ytr)) // 1)))
    grid = fit_probes(Htr, ytr, gtr, ptr, Hte, yte, gte, positions=["think_open"],
                      layers=list(range(setup.twin_layers)), cfg=cfg)
    auc = grid.auroc[0]
    onset = next((i for i, a in enumerate(auc) if a >= 0.80), None)
    band = 0.18 if ctx.profile != "full" else 0.10
    null = grid.null[0]
    at = setup.twin_onset
    ctx.data["twin"] = {"auroc": auc.round(4).tolist(), "ci": grid.auroc_ci[0].round(4).tolist(), "onset": onset,
                        "planted": at, "null_lo": np.percentile(null, 2.5, 1).round(4).tolist(),
                        "null_hi": np.percentile(null, 97.5, 1).round(4).tolist(), "best_layer": grid.best_layer}
    return {"ft1_twin_auroc_at_onset": Estimate(float(auc[at]), float(min(grid.auroc_ci[0, at, 0], auc[at])),
                                                float(max(grid.auroc_ci[0, at, 1], auc[at])), n=len(set(gte)),
                                                method="cluster_bootstrap"),
            "ft1_twin_onset_error": Estimate.exact(abs((onset if onset is not None else -99) - at)),
            "ft1_twin_shuffles_in_band": Estimate.exact(float(np.mean(np.abs(null[at] - 0.5) <= 0.08)),
                                                        n=null.shape[1]),
            "ncp1_share_in_band": Estimate.exact(float(np.mean(np.abs(null - 0.5) <= band)), n=null.size),
            "ncp3_max_auroc_below": Estimate.exact(float(auc[:at].max()))}


def _oof_by_layer(H: np.ndarray, y: np.ndarray, groups: np.ndarray, seed: int) -> np.ndarray:
    from agentmill.methods.first_token_probe.probes import group_folds, oof_scores

    folds = group_folds(groups, 5, seed)
    return np.array([auroc(s, y) for s in (oof_scores(H[:, li].astype(float), y, folds, 1.0)
                                           for li in range(H.shape[1]))])


def _plant_run(lm: Any, items: list[Any], layer: int, kappa: float, seed: int, render: Any) -> dict[str, Any]:
    """Plant at ``think_open`` (the prompt's last token) of ``items``; grouped 5-fold out-of-fold AUROC per layer
    of the planted signs, and a template bootstrap CI at ℓ*."""
    from agentmill.core.stats import cluster_bootstrap
    from agentmill.methods.first_token_probe.capture import Plant, capture
    from agentmill.methods.first_token_probe.probes import group_folds, oof_scores
    from agentmill.methods.first_token_probe.sampling import Rollout

    rng = np.random.default_rng([seed, 5])
    rolls = [Rollout(it, 0, render(it), [], "", "stop") for it in items]
    signs = np.where(rng.random(len(rolls)) < 0.5, 1.0, -1.0)
    u = rng.standard_normal(lm.hidden_size)
    u /= np.linalg.norm(u)
    acts = capture(lm, rolls, ["think_open"], "all", plant=Plant(layer, "think_open", u, kappa, signs),
                   prompt_only=True)
    y = (signs > 0).astype(int)
    groups = np.array([it.template_id for it in items])
    H = acts.H[:, 0]
    aucs = _oof_by_layer(H, y, groups, seed)
    onset = next((i for i, a in enumerate(aucs) if a >= 0.80), None)
    s_at = oof_scores(H[:, layer].astype(float), y, group_folds(groups, 5, seed), 1.0)
    est = cluster_bootstrap(lambda rows: auroc(s_at[rows], y[rows]), groups, n_boot=1000, seed=seed)
    return {"auroc": aucs.round(4).tolist(), "onset": onset, "planted": layer, "alpha": acts.meta["plant"]["alpha"],
            "est": est, "max_below": float(aucs[:layer].max()), "n": len(items)}


def measure(setup: Setup, ctx: RunContext) -> dict[str, Estimate]:
    from agentmill.methods.first_token_probe.prompts import sample_prompts
    from agentmill.methods.first_token_probe.traces import render_prompt

    out = _twin(setup, ctx)
    smollm2_metrics = ["ft1_smollm2_onset_error", "ft1_smollm2_auroc_at_onset", "ft1_smollm2_max_below"]
    n = setup.plant_prompts
    counts = {"C": n // 4, "N": n // 4, "B": n // 4, "D": n - 3 * (n // 4)}
    if setup.tiny_plant:
        # A plant needs a real network, not a validated behaviour: the labels are independent of the content, so
        # the organism is used whatever its refusal gates say (its card's status is recorded beside the numbers).
        from agentmill.methods.first_token_probe.organism import load_organism

        try:
            lm, card = load_organism("locked", allow_unvalidated=True)
        except FileNotFoundError as e:
            ctx.data["tiny_plant"] = {"skipped": str(e)}
        else:
            items = sample_prompts("probe_train", {k: max(4, v // 4) for k, v in counts.items()}, seed=setup.seed)
            r = _plant_run(lm, items, 2, setup.kappa, setup.seed, lambda it: lm.render(render_prompt(it.user)))
            e = r.pop("est")
            ctx.data["tiny_plant"] = {**r, "auroc_at_onset": e.to_dict(), "model": "tiny-refusal-locked",
                                      "organism_validated": card.validated}
    if setup.plant_model:
        from agentmill.core.types import Message

        lm = ctx.load_lm(setup.plant_model)
        items = [it for sp in ("probe_train", "probe_test", "organism_train")
                 for it in sample_prompts(sp, {k: -(-v // 3) for k, v in counts.items()}, seed=setup.seed)][:n]
        r = _plant_run(lm, items, setup.plant_layer, setup.kappa, setup.seed,
                       lambda it: lm.render([Message("user", it.user)]) + lm.encode("<think>\n"))
        e = r.pop("est")
        ctx.data["smollm2_plant"] = {**r, "model": setup.plant_model, "auroc_at_onset": e.to_dict()}
        out["ft1_smollm2_onset_error"] = Estimate.exact(abs((r["onset"] if r["onset"] is not None else -99)
                                                            - setup.plant_layer))
        out["ft1_smollm2_auroc_at_onset"] = e
        out["ft1_smollm2_max_below"] = Estimate.exact(r["max_below"])
    else:
        withhold(ctx.data, smollm2_metrics, "the SmolLM2 plant runs at the full profile only (a model load)")
    return out


def plots(data: dict[str, Any], out_dir: Path) -> list[Path]:
    from agentmill.experiments.plotting import pyplot, save

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    tw = data.get("twin", {})
    if tw:
        x = np.arange(len(tw["auroc"]))
        ax.plot(x, tw["auroc"], "o-", label=f"twin (planted at {tw['planted']})")
        ax.fill_between(x, tw["null_lo"], tw["null_hi"], alpha=0.2, label="shuffle band")
    for key, style in (("tiny_plant", "s--"), ("smollm2_plant", "^-")):
        d = data.get(key, {})
        if d.get("auroc"):
            ax.plot(np.arange(len(d["auroc"])), d["auroc"], style, label=f"{d.get('model')} plant at {d['planted']}")
    ax.axhline(0.8, color="grey", lw=0.8, ls=":")
    ax.set_xlabel("hidden-state layer")
    ax.set_ylabel("test AUROC")
    ax.set_title("FT-1: planted signal onset")
    ax.legend(fontsize=7)
    return [save(fig, out_dir / "e171_instrument_onset.png")]


EXPERIMENT = Experiment(
    id="e171.first_token_probe_instrument",
    title="Probe instrument: a planted signal is found at its layer and nowhere else",
    paper=PAPER, claims=CLAIMS, setups=SETUPS, measure=measure, plots=plots,
    scale_note="synthetic twin (13×64 quick, 31×128 full) and plants in the tiny organism and, at full, SmolLM2-135M; "
               "an instrument check, not a paper number",
    requires=frozenset({"hf"}), version="1", parallel_safe=True, quick_budget_s=8)
