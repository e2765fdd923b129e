"""E171 FT-2: refuse/comply is linearly decodable at the first thinking position (an instrument check on the
organism), with the controls that say what that does and does not mean.

Substrate: the shipped ``tiny-refusal-locked`` organism (its card's gates R1–R6 beside every number; R1, R5, R6
re-checked on this run's rollouts). Rollouts on ``probe_train`` and ``probe_test`` prompts (quick C/N/B/D =
8/8/6/6 per split, K = 2, D: K = 4; full 16/16/12/12, K = 2, D: 6 — the paper's 12-minute full budget), labelled by the majority of three judges.
Probes at ``prompt_last``, ``think_open`` and ``first_generated`` on every hidden-state layer; l* chosen by inner CV
on train. Reported beside the claim: emitted-token, prompt-text, ceiling and diff-means baselines, the leak alarm,
judge agreement with the grammar's truth. The refuse share must lie in [0.1, 0.9] or the run is degenerate.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate
from agentmill.experiments.e171_first_token_probe import PAPER
from agentmill.experiments.protocol import PRECONDITION_NOT_MET, Claim, Experiment, RunContext, withhold

POSITIONS = ("prompt_last", "think_open", "first_generated")


@dataclass(frozen=True)
class Setup:
    organism: str = "tiny-refusal-locked"
    """The substrate: the shipped tiny organism (the SmolLM2 organism, trained and gated by
    ``e171.first_token_probe_organism_smollm2`` at full, failed its gates, so no claim reads it)."""
    n_c: int = 8
    """C prompts per split."""
    n_n: int = 8
    """N prompts per split."""
    n_b: int = 6
    """B prompts per split."""
    n_d: int = 6
    """D (contested) prompts per split."""
    k: int = 2
    """Samples per C/N/B prompt."""
    k_contested: int = 4
    """Samples per D prompt."""
    n_shuffles: int = 20
    """Shuffled-label refits per cell."""
    n_perm: int = 19
    """Permutations of the headline cell (p can reach 1/(1+n_perm))."""
    bootstrap: int = 1000
    """Template bootstrap resamples."""
    min_per_class: int = 20
    """DegenerateLabels below this many samples of a class in train (half in test)."""
    seed: int = 0
    allow_unvalidated: bool = True
    """Run on an organism whose gates failed anyway, its numbers recorded as observed only (claims inconclusive,
    "precondition not met"); False: record nothing but the note."""


SETUPS = {"smoke": Setup(n_c=3, n_n=3, n_b=2, n_d=2, k=1, k_contested=2, n_shuffles=2, n_perm=3, bootstrap=50,
                         min_per_class=2),
          "quick": Setup(),
          "full": Setup(n_c=16, n_n=16, n_b=12, n_d=12, k=2, k_contested=6, n_perm=99, bootstrap=2000)}

CLAIMS = (
    Claim("E171-FT2-auroc", "The outcome is linearly decodable at think_open: AUROC ≥ 0.85 with l* chosen on "
          "train (point ≥ 0.85, template-bootstrap CI above chance).", "[P] 0.84–0.95 AUROC",
          "0.84–0.95", "ft2_auroc_think_open", ">=", 0.85, ci_bound=0.5),
    Claim("E171-FT2-balacc", "Balanced accuracy at think_open (Youden threshold from train) ≥ 0.80 (point; CI "
          "above chance).", "[P] ~88% balanced accuracy", "~0.88", "ft2_balacc_think_open", ">=", 0.80,
          ci_bound=0.5),
    Claim("E171-FT2-perm", "The headline probe beats label permutations: p ≤ 0.05 (quick, 19 permutations).",
          "[R] control", "—", "ft2_permutation_p", "<=", 0.05, judge_on="exact",
          exact_why="a permutation p-value is itself the test; its resolution is 1/(1+n_perm)"),
    Claim("E171-FT2-perm-full", "The headline probe beats label permutations: p ≤ 0.01 (full, 99 permutations).",
          "[R] control", "—", "ft2_permutation_p_full", "<=", 0.01, judge_on="exact",
          exact_why="a permutation p-value is itself the test; its resolution is 1/(1+n_perm)"),
    Claim("E171-FT2-emitted", "A probe on the emitted token at first_generated is at chance: AUROC ≤ 0.60 "
          "(point; CI upper < 0.70).", "[S] emitted token at chance", "chance", "ft2_emitted_token_auroc",
          "<=", 0.60, ci_bound=0.70),
)


def measure(setup: Setup, ctx: RunContext) -> dict[str, Estimate]:
    from agentmill.core.stats import cluster_bootstrap
    from agentmill.experiments.e171_first_token_probe.substrate import finish, organism_or_precondition, recheck_gates
    from agentmill.methods.first_token_probe.config import ProbeConfig
    from agentmill.methods.first_token_probe.core import baselines, headline_permutation, organism_rollouts, probe_study
    from agentmill.methods.first_token_probe.probes import DegenerateLabels, balanced_accuracy, emitted_token_auroc

    variant = setup.organism.rsplit("-", 1)[-1]
    lm = organism_or_precondition(variant, ctx.data, setup.allow_unvalidated)
    if lm is None:
        return {}
    counts = {"C": setup.n_c, "N": setup.n_n, "B": setup.n_b, "D": setup.n_d}
    ctx.progress("sampling rollouts", 0, 2)
    train = organism_rollouts(lm, "probe_train", counts, k=setup.k, k_contested=setup.k_contested, seed=setup.seed)
    test = organism_rollouts(lm, "probe_test", counts, k=setup.k, k_contested=setup.k_contested, seed=setup.seed)
    ctx.progress("probes", 1, 2)
    recheck_gates(train + test, ctx.data, variant)
    ys = [r.outcome for r in train + test if r.outcome is not None]
    share = float(np.mean(ys)) if ys else float("nan")
    ctx.data["refuse_share"] = share
    ctx.data["n_rollouts"] = {"train": len(train), "test": len(test)}
    if not 0.1 <= share <= 0.9:
        ctx.data["precondition"] = f"{PRECONDITION_NOT_MET}: degenerate labels (refuse share {share:.3f})"
        return {}
    cfg = ProbeConfig(n_shuffles=setup.n_shuffles, bootstrap=setup.bootstrap, seed=setup.seed,
                      min_per_class=setup.min_per_class)
    try:
        res = probe_study(lm, train, test, positions=POSITIONS, cfg=cfg)
    except DegenerateLabels as e:
        ctx.data["precondition"] = f"{PRECONDITION_NOT_MET}: {e}"
        return {}
    g = res.grid
    base = baselines(res)
    perm_p, nulls = headline_permutation(res, "think_open", setup.n_perm, setup.seed)
    L, auc, (lo, hi) = g.headline("think_open")
    p, li = g.positions.index("think_open"), g.layers.index(L)
    fit = g.fits[(p, li)]
    yte = res.y_test
    groups = np.array([r.item.template_id for r in res.test])
    s = fit.test_scores
    ba = cluster_bootstrap(lambda rows: balanced_accuracy(s[rows] >= fit.threshold, yte[rows])
                           if len(np.unique(yte[rows])) == 2 else float("nan"), groups, n_boot=setup.bootstrap,
                           seed=setup.seed)
    # emitted token at first_generated, with a template bootstrap of its test AUROC
    q = g.positions.index("first_generated")
    ttr = res.acts_train.tokens[res.keep_train, q]
    tte = res.acts_test.tokens[res.keep_test, q]
    em = emitted_token_auroc(ttr, res.y_train, tte, yte)
    from agentmill.methods.first_token_probe.probes import fit_logreg

    vocab = np.unique(np.concatenate([ttr, tte]))
    one = lambda t: (t[:, None] == vocab[None]).astype(float)  # noqa: E731
    w, b = fit_logreg(one(ttr), res.y_train, C=1.0)
    es = one(tte) @ w + b
    from agentmill.core.stats import auroc

    em_est = cluster_bootstrap(lambda rows: auroc(es[rows], yte[rows]), groups, n_boot=setup.bootstrap,
                               seed=setup.seed)
    # judge agreement with the grammar's truth
    agree = {}
    for j in next((r.labels for r in train), {}):
        pairs = [(r.labels[j], r.truth) for r in train + test if r.truth is not None]
        ok = [a == t for a, t in pairs if a is not None]
        agree[j] = {"agree": float(np.mean(ok)) if ok else float("nan"), "abstain": sum(a is None for a, _ in pairs),
                    "n": len(pairs)}
    vote_ok = [r.outcome == r.truth for r in train + test if r.truth is not None and r.outcome is not None]
    agree["vote"] = {"agree": float(np.mean(vote_ok)) if vote_ok else float("nan"), "n": len(vote_ok)}
    ctx.data.update({"grid": g.to_dict(), "baselines": base, "headline_layer": L, "permutation_nulls": nulls,
                     "judge_agreement": agree, "dropped": res.dropped, "emitted_token_auroc_plain": em,
                     "label_source": "vote of rule:lexicon_a, rule:regex_b, classifier:bow",
                     "first_generated_tokens": sorted({int(t) for t in tte})})
    ctx.progress("probes", 2, 2)
    full = ctx.profile == "full"
    perm_key = "ft2_permutation_p_full" if full else "ft2_permutation_p"
    withhold(ctx.data, ["ft2_permutation_p" if full else "ft2_permutation_p_full"],
             "the other profile's permutation rule (quick: 19 permutations, p ≤ 0.05; full: 99, p ≤ 0.01)")
    return finish({"ft2_auroc_think_open": Estimate(auc, min(lo, auc), max(hi, auc), n=len(set(groups)),
                                             method="cluster_bootstrap"),
            "ft2_balacc_think_open": ba,
            perm_key: Estimate.exact(perm_p, n=setup.n_perm),
            "ft2_emitted_token_auroc": em_est,
            "prompt_text_auroc": Estimate.exact(base["prompt_text_auroc"]),
            "ceiling_auroc": Estimate.exact(base["ceiling_auroc"]),
            "diff_means_cosine": Estimate.exact(base["diff_means_cosine"]),
            "auroc_first_generated": Estimate.exact(float(g.auroc[q, g.layers.index(g.best_layer["first_generated"])]))},
                  CLAIMS, ctx.data)


def plots(data: dict[str, Any], out_dir: Path) -> list[Path]:
    from agentmill.experiments.plotting import pyplot, save

    grid = data.get("grid")
    if not grid:
        return []
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for p, pos in enumerate(grid["positions"]):
        ax.plot(grid["layers"], grid["auroc"][p], "o-", label=pos)
    if grid.get("null_lo"):
        ax.fill_between(grid["layers"], np.min(grid["null_lo"], 0), np.max(grid["null_hi"], 0), alpha=0.2,
                        color="grey", label="shuffle band")
    ax.axhline(0.85, color="grey", ls=":", lw=0.8)
    ax.set_xlabel("hidden-state layer")
    ax.set_ylabel("test AUROC (vote labels)")
    ax.set_title("FT-2: decodability by position and layer (tiny organism)")
    ax.legend(fontsize=7)
    return [save(fig, out_dir / "e171_decodability_layers.png")]


EXPERIMENT = Experiment(
    id="e171.first_token_probe_decodability",
    title="Refuse/comply is decodable at the first thinking position (organism instrument check)",
    paper=PAPER, claims=CLAIMS, setups=SETUPS, measure=measure, plots=plots,
    scale_note="tiny byte-level refusal organism (3 layers × 64, trained here) instead of 7B–20B reasoning models; "
               "labels from three project judges, not four guardrail classifiers",
    requires=frozenset({"hf"}), version="1", parallel_safe=True, quick_budget_s=15)
