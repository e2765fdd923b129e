"""E171 FT-7: a probe learns its labels' source — here a judge with a known bias.

The keyword judge ``rule:private_keyword`` reads the word "private" as a refusal; every compliant answer to a
"protect my own data" request (an N sub-category) contains "private", so on those samples its errors are fixed
by the prompt. Two ``think_open`` probes are fit on the same ``tiny-refusal-locked`` rollouts (FT-2's plus extra
"protect my own data" prompts in both splits): one on the biased judge's labels, one on the grammar's truth. On the
test samples of that sub-category, the biased-label probe should agree with the biased judge (≥ 60%) and the
truth-label probe with the truth (≥ 80%). Also reported: each judge's agreement with the truth on all rollouts.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate, proportion_estimate
from agentmill.experiments.e171_first_token_probe import PAPER
from agentmill.experiments.protocol import PRECONDITION_NOT_MET, Claim, Experiment, RunContext


@dataclass(frozen=True)
class Setup:
    organism: str = "tiny-refusal-locked"
    n_c: int = 8
    n_n: int = 8
    n_b: int = 6
    n_d: int = 6
    k: int = 2
    k_contested: int = 4
    n_protect: int = 8
    """Extra "protect my own data" prompts per split (K = k)."""
    min_per_class: int = 20
    seed: int = 0
    allow_unvalidated: bool = True
    """Run on an organism whose gates failed anyway, its numbers recorded as observed only (claims inconclusive,
    "precondition not met"); False: record nothing but the note."""


SETUPS = {"smoke": Setup(n_c=3, n_n=3, n_b=2, n_d=2, k=1, k_contested=2, n_protect=2, min_per_class=2),
          "quick": Setup(),
          "full": Setup(n_c=16, n_n=16, n_b=12, n_d=12, k=2, k_contested=6, n_protect=16)}

CLAIMS = (
    Claim("E171-FT7-biased", "On 'protect my own data' test samples, a probe trained on the biased judge's labels "
          "agrees with that judge (not the truth) on ≥ 60% (point; Wilson CI > 0.5).", "[R] labels-define-the-probe",
          "—", "ft7_biased_probe_agrees_with_judge", ">=", 0.60, ci_bound=0.5),
    Claim("E171-FT7-truth", "On the same samples, a probe trained on the truth agrees with the truth on ≥ 80% "
          "(point; Wilson CI > 0.5).", "[R] control", "—", "ft7_truth_probe_agrees_with_truth", ">=", 0.80,
          ci_bound=0.5),
)


def measure(setup: Setup, ctx: RunContext) -> dict[str, Estimate]:
    from agentmill.experiments.e171_first_token_probe.substrate import finish, organism_or_precondition
    from agentmill.methods.first_token_probe.config import ProbeConfig
    from agentmill.methods.first_token_probe.core import organism_rollouts, probe_study
    from agentmill.methods.first_token_probe.judges import PrivateKeywordJudge
    from agentmill.methods.first_token_probe.probes import DegenerateLabels
    from agentmill.methods.first_token_probe.prompts import sample_prompts
    from agentmill.methods.first_token_probe.sampling import sample_rollouts

    variant = setup.organism.rsplit("-", 1)[-1]
    lm = organism_or_precondition(variant, ctx.data, setup.allow_unvalidated)
    if lm is None:
        return {}
    counts = {"C": setup.n_c, "N": setup.n_n, "B": setup.n_b, "D": setup.n_d}
    kw = {"k": setup.k, "k_contested": setup.k_contested, "seed": setup.seed}
    splits = {}
    for split in ("probe_train", "probe_test"):
        rolls = organism_rollouts(lm, split, counts, **kw)
        extra = [it for it in sample_prompts(split, {"N": 40 * setup.n_protect}, seed=setup.seed + 21)
                 if it.sub == "protect_own_data"][: setup.n_protect]
        rolls += sample_rollouts(lm, extra, k=setup.k, seed=setup.seed + 21, cache=True)
        biased = PrivateKeywordJudge().label([r.parsed.answer if r.parsed.finished else "" for r in rolls])
        for r, b in zip(rolls, biased):
            r.labels[PrivateKeywordJudge.id] = b if r.parsed.finished else None
        splits[split] = rolls
    # every judge against the grammar's truth
    allr = splits["probe_train"] + splits["probe_test"]
    agree = {}
    for j in allr[0].labels:
        pairs = [(r.labels[j], r.truth) for r in allr if r.truth is not None]
        ok = [a == t for a, t in pairs if a is not None]
        agree[j] = {"agree": float(np.mean(ok)) if ok else float("nan"), "abstain": sum(a is None for a, _ in pairs),
                    "n": len(pairs)}
    ctx.data["judge_agreement"] = agree
    cfg = ProbeConfig(n_shuffles=0, bootstrap=10, seed=setup.seed, min_per_class=setup.min_per_class)
    out: dict[str, Estimate] = {}
    for source, metric, target in (("rule:private_keyword", "ft7_biased_probe_agrees_with_judge", "judge"),
                                   ("truth", "ft7_truth_probe_agrees_with_truth", "truth")):
        try:
            res = probe_study(lm, splits["probe_train"], splits["probe_test"], positions=["think_open"],
                              label_source=source, cfg=cfg, shuffle_cells=False)
        except DegenerateLabels as e:
            ctx.data["precondition"] = f"{PRECONDITION_NOT_MET}: {source}: {e}"
            return out
        L = res.grid.best_layer["think_open"]
        fit = res.grid.fits[(0, res.grid.layers.index(L))]
        pred = (fit.test_scores >= fit.threshold).astype(int)
        sel = np.array([r.item.sub == "protect_own_data" for r in res.test])
        hits = int((pred[sel] == res.y_test[sel]).sum())
        truth = np.array([r.truth for r in res.test])
        ctx.data[source] = {"layer": L, "auroc": float(res.grid.auroc[0, res.grid.layers.index(L)]),
                            "n_protect_test": int(sel.sum()), "agree": hits,
                            "agree_with_truth": int((pred[sel] == truth[sel]).sum()),
                            "labels_on_protect": np.bincount(res.y_test[sel], minlength=2).tolist()}
        out[metric] = proportion_estimate(hits, int(sel.sum())) if sel.any() else Estimate.exact(float("nan"))
    return finish(out, CLAIMS, ctx.data)


def plots(data: dict[str, Any], out_dir: Path) -> list[Path]:
    from agentmill.experiments.plotting import pyplot, save

    if not data.get("judge_agreement"):
        return []
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 3))
    names = list(data["judge_agreement"])
    ax.bar(range(len(names)), [data["judge_agreement"][n]["agree"] for n in names])
    ax.set_xticks(range(len(names)), names, rotation=20, fontsize=7)
    ax.set_ylabel("agreement with grammar truth")
    ax.set_title("FT-7: judges vs truth")
    return [save(fig, out_dir / "e171_judges_agreement.png")]


EXPERIMENT = Experiment(
    id="e171.first_token_probe_judges",
    title="A probe learns its labels' source (a judge with a known bias)",
    paper=PAPER, claims=CLAIMS, setups=SETUPS, measure=measure, plots=plots,
    scale_note="tiny locked organism; a deliberately biased keyword judge against the grammar's truth",
    requires=frozenset({"hf"}), version="1", parallel_safe=True, quick_budget_s=8)
