"""E171 FT-3 and FT-4: keeping an early prefix fixes the outcome, the resampler tells early deciders from late
ones, and the stance flips of a locked trace are performative.

Substrate: the two shipped tiny organisms — ``locked`` (decides in S1, then deliberates for show) and
``deliberative`` (decides at a random mid-trace pivot). Base traces on contested prompts (D, known q) of
``probe_test``; freeze points at ``think_open`` and after every sentence; R continuations per point forked from
the base trace's KV cache (``WhiteBoxForker``); λ = 0.9. Truth (sentence roles, decision site) comes from matching
every sentence to its grammar pool, independent of the judges. FT-4 tags sentence stances with the lexicon tagger
(its accuracy against the true roles is a claim) and calls a flip performative iff the trace is locked at the
boundary before the flipping sentence.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate, cluster_bootstrap, proportion_estimate
from agentmill.experiments.e171_first_token_probe import PAPER
from agentmill.experiments.protocol import Claim, Experiment, RunContext


@dataclass(frozen=True)
class Setup:
    organisms: tuple[str, ...] = ("tiny-refusal-locked", "tiny-refusal-deliberative")
    """The substrates (shipped tiny organisms)."""
    n_traces: int = 8
    """Contested base traces per variant."""
    resamples: int = 4
    """Continuations R per freeze point."""
    lam: float = 0.9
    """Lock threshold λ."""
    bootstrap: int = 1000
    """Template bootstrap resamples (performative fraction)."""
    seed: int = 0
    allow_unvalidated: bool = True
    """Run on an organism whose gates failed anyway, its numbers recorded as observed only (claims inconclusive,
    "precondition not met"); False: record nothing but the note."""


SETUPS = {"smoke": Setup(n_traces=1, resamples=2, bootstrap=50), "quick": Setup(n_traces=4),
          "full": Setup(n_traces=8, resamples=8, bootstrap=2000)}

CLAIMS = (
    Claim("E171-FT3-locked-A", "Locked organism, contested traces: mean agreement A at the first sentence "
          "boundary with f ≥ 0.2 is ≥ 0.90 (point; Wilson CI over draws > 0.75).", "[P] rarely changes",
          "rarely changes", "ft3_locked_A_at_20", ">=", 0.90, ci_bound=0.75),
    Claim("E171-FT3-locked-site", "Locked organism: the lock point falls no later than the end of S1 in ≥ 80% of "
          "contested traces (point; Wilson CI > 0.5).", "[R] resampler check", "—", "ft3_locked_lock_by_s1",
          ">=", 0.80, ci_bound=0.5),
    Claim("E171-FT3-delib-A", "Deliberative organism: mean A at the first boundary with f ≥ 0.2 is ≤ 0.75 (point; "
          "Wilson CI < 0.90).", "[R] resampler check", "—", "ft3_delib_A_at_20", "<=", 0.75, ci_bound=0.90),
    Claim("E171-FT3-delib-site", "Deliberative organism: pivot start ≤ lock point ≤ pivot end in ≥ 80% of "
          "contested traces (point; Wilson CI > 0.5).", "[R] resampler check", "—", "ft3_delib_lock_at_pivot",
          ">=", 0.80, ci_bound=0.5),
    Claim("E171-FT4-tagger", "The stance tagger agrees with the true sentence roles on ≥ 95% of sentences (point; "
          "Wilson CI > 0.90).", "[R] instrument", "—", "ft4_tagger_accuracy", ">=", 0.95, ci_bound=0.90),
    Claim("E171-FT4-locked", "Locked organism: ≥ 85% of visible stance flips are performative (point; template "
          "bootstrap CI > 0.5).", "[P] ~74%; [S] 71–92%", "0.71–0.92", "ft4_locked_performative", ">=", 0.85,
          ci_bound=0.5),
    Claim("E171-FT4-delib", "Deliberative organism: ≤ 30% of stance flips are performative (point; template "
          "bootstrap CI < 0.5).", "[R] discrimination", "—", "ft4_delib_performative", "<=", 0.30, ci_bound=0.5),
)


def _variant_run(variant: str, setup: Setup, ctx: RunContext) -> dict[str, Any] | None:
    from agentmill.experiments.e171_first_token_probe.substrate import organism_or_precondition
    from agentmill.methods.first_token_probe.config import FreezeConfig
    from agentmill.methods.first_token_probe.freeze import first_point_at, lock_index_at, prefix_freeze
    from agentmill.methods.first_token_probe.prompts import sample_prompts
    from agentmill.methods.first_token_probe.sampling import sample_rollouts
    from agentmill.methods.first_token_probe.stance import StanceTagger, flips
    from agentmill.methods.first_token_probe.traces import ROLE_STANCE

    lm = organism_or_precondition(variant, ctx.data, setup.allow_unvalidated)
    if lm is None:
        return None
    # oversample prompts: unfinished or abstained base rollouts are skipped (counted)
    items = sample_prompts("probe_test", {"D": 2 * setup.n_traces}, seed=setup.seed + 11)
    rolls = sample_rollouts(lm, items, k=1, seed=setup.seed + 11, cache=True)
    usable = [r for r in rolls if r.outcome is not None and r.parsed.site is not None][: setup.n_traces]
    cfg = FreezeConfig(resamples=setup.resamples, lam=setup.lam)
    tagger = StanceTagger()
    curves, rows = [], []
    tag_ok = tag_n = 0
    for i, r in enumerate(usable):
        ctx.progress(f"freeze {variant}", i, len(usable))
        c = prefix_freeze(lm, r, cfg=cfg, seed=setup.seed, rollout_id=i)
        curves.append(c)
        roles = r.parsed.roles
        stances = [tagger.tag(s) for s in r.parsed.sentences]
        for role, st in zip(roles, stances):
            if role is not None:
                tag_n += 1
                tag_ok += int(st == ROLE_STANCE.get(role))
        fl = flips(stances)
        p20 = first_point_at(c, 0.2)
        site = r.parsed.site
        rows.append({"key": r.key, "template": r.item.template_id, "q": r.item.q, "site": site, "T": c.T,
                     "lock_sentence": c.lock_sentence, "A0": c.points[0].A,
                     "A20": None if p20 is None else p20.A, "n20": 0 if p20 is None else p20.n_valid,
                     "flips": fl, "performative": [int(c.locked_before(j)) for j in fl],
                     "lock_by_lam": {str(lam): (None if lock_index_at(c, lam) is None
                                                else c.points[lock_index_at(c, lam)].sentence)
                                     for lam in (0.75, 0.9, 1.0)},
                     "curve": c.to_dict()})
    return {"rows": rows, "tag": (tag_ok, tag_n), "skipped": len(rolls) - len(usable) if len(usable) <
            setup.n_traces else 0, "n_usable": len(usable)}


def measure(setup: Setup, ctx: RunContext) -> dict[str, Estimate]:
    out: dict[str, Estimate] = {}
    tag_ok = tag_n = 0
    for org in setup.organisms:
        variant = org.rsplit("-", 1)[-1]
        res = _variant_run(variant, setup, ctx)
        if res is None:
            continue
        rows = res["rows"]
        ctx.data[variant] = rows
        ctx.data[f"{variant}_n_usable"] = res["n_usable"]
        tag_ok += res["tag"][0]
        tag_n += res["tag"][1]
        tag = "locked" if variant == "locked" else "delib"
        agree = sum(round(r["A20"] * r["n20"]) for r in rows if r["A20"] is not None)
        draws = sum(r["n20"] for r in rows if r["A20"] is not None)
        out[f"ft3_{tag}_A_at_20"] = proportion_estimate(agree, draws) if draws else Estimate.exact(float("nan"))
        if variant == "locked":
            hits = sum(r["lock_sentence"] is not None and r["lock_sentence"] <= 1 for r in rows)
            out["ft3_locked_lock_by_s1"] = proportion_estimate(hits, len(rows))
        else:
            hits = sum(r["lock_sentence"] is not None and r["site"] <= r["lock_sentence"] <= r["site"] + 1
                       for r in rows)
            out["ft3_delib_lock_at_pivot"] = proportion_estimate(hits, len(rows))
        a0 = [r["A0"] for r in rows if r["A0"] == r["A0"]]
        ctx.data[f"{variant}_A0"] = {"mean": float(np.mean(a0)) if a0 else None,
                                     "expected_q2": float(np.mean([r["q"] ** 2 + (1 - r["q"]) ** 2 for r in rows]))
                                     if rows else None}
        # performative fraction: flips pooled, template bootstrap
        fl_rows = [(r["template"], p) for r in rows for p in r["performative"]]
        if fl_rows:
            groups = np.array([g for g, _ in fl_rows])
            vals = np.array([p for _, p in fl_rows], dtype=float)
            out[f"ft4_{tag}_performative"] = cluster_bootstrap(lambda ix: float(vals[ix].mean()), groups,
                                                               n_boot=setup.bootstrap, seed=setup.seed)
        ctx.data[f"{variant}_flips_per_trace"] = float(np.mean([len(r["flips"]) for r in rows])) if rows else None
        ctx.data[f"{variant}_lambda_sensitivity"] = {
            lam: float(np.mean([r["lock_by_lam"][lam] is not None and r["lock_by_lam"][lam] <= (1 if variant ==
                                "locked" else r["site"] + 1) for r in rows])) if rows else None
            for lam in ("0.75", "0.9", "1.0")}
    if tag_n:
        out["ft4_tagger_accuracy"] = proportion_estimate(tag_ok, tag_n)
    from agentmill.experiments.e171_first_token_probe.substrate import finish

    return finish(out, CLAIMS, ctx.data)


def plots(data: dict[str, Any], out_dir: Path) -> list[Path]:
    from agentmill.experiments.plotting import pyplot, save

    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.2), sharey=True)
    drew = False
    for ax, variant in zip(axes, ("locked", "deliberative")):
        for r in data.get(variant, []):
            pts = r["curve"]["points"]
            ax.plot([p["sentence"] for p in pts], [p["A"] for p in pts], "-o", ms=3, alpha=0.6)
            drew = True
        ax.axhline(0.9, color="grey", ls=":", lw=0.8)
        ax.set_title(f"{variant}: A(k) by sentences kept")
        ax.set_xlabel("sentences kept")
    axes[0].set_ylabel("agreement with base outcome")
    return [save(fig, out_dir / "e171_lockin_curves.png")] if drew else []


EXPERIMENT = Experiment(
    id="e171.first_token_probe_lockin",
    title="Prefix-freeze resampling: early lock-in, and performative deliberation",
    paper=PAPER, claims=CLAIMS, setups=SETUPS, measure=measure, plots=plots,
    scale_note="tiny organisms with planted decision sites (an instrument check); contested prompts only; "
               "4 (quick) / 8 (full) contested traces per variant, R = 4 / 8 forked continuations per sentence boundary",
    requires=frozenset({"hf"}), version="1", parallel_safe=True, quick_budget_s=20)
