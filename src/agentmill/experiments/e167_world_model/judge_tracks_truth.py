"""E167 J-3: does an LM judge track ground-truth fidelity?

Items are held-out transitions of the three built domains (KeyDoor, FactSearch, TextWorld; the office domain is not
built). Each item's judged completion is one of: the true next observation, a corruption of it (KeyDoor: 1–3
objective fields changed by the domain's ``corrupt``; FactSearch and TextWorld: 1–3 lines replaced by lines of
another item's observation), another item's next observation (shuffled), or — KeyDoor only, at full — the greedy
prediction of a cached tiny world model (the CPT→SFT and hybrid-RL stages), so the rule totals spread from 1 to 5.
Both judges see the strictly extracted observation. Statistic: Spearman(LM-judge total, rule total) over items, with
a cluster bootstrap over tasks (layout, world, game).

- Endpoint judge ≥ 0.6: no endpoint judge call path is built and no recording exists, so the claim is "precondition
  not met".
- SmolLM2 ``LogprobJudge``: reported, no threshold (``j3_spearman_smollm2_observed``), also per domain.
- Permuted labels (the control, judged): the rule totals permuted *within each domain*, which keeps any agreement
  that comes from domain-level differences alone; the mean Spearman over permutations must lie within 0 ± 0.05.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate, cluster_bootstrap, spearman
from agentmill.experiments.e167_world_model import PAPER
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, Experiment, RunContext, models_read, unjudged

VARIANTS = ("truth", "corrupt1", "corrupt2", "corrupt3", "shuffled")
"""Judged completions built from the ground truth [R]."""


@dataclass(frozen=True)
class Setup:
    judge: str = "hf:smollm2"
    """The LogprobJudge's model (SmolLM2-135M-Instruct; quick runs an untrained ``tiny:`` as a pipeline check)."""
    pipeline: str = "full"
    """The e167 KeyDoor pipeline whose test items (and cached stage predictions) are used."""
    domains: tuple[str, ...] = ("keydoor", "factsearch", "textworld")
    """Domains the items come from (the office domain is not built)."""
    per_domain: int = 60
    """Items per domain (180 in all; the design's 300 does not fit the 15-minute budget at ≈ 3 s per SmolLM2 item)."""
    predictions: tuple[str, ...] = ("cpt_sft", "rl_hybrid")
    """Cached pipeline stages whose greedy KeyDoor predictions join the variants (none at quick: no stage is read)."""
    fs_worlds: int = 5
    """FactSearch ``test`` worlds (test phrasings)."""
    tw_games: int = 4
    """TextWorld test games (tw_1008…, W-5's held-out games; 10 behaviour episodes each)."""
    max_chars: int = 1200
    """Characters of each text block shown to the judge (longer ones are cut, marked)."""
    n_perm: int = 200
    """Within-domain permutations for the control's point value."""
    n_boot: int = 1000
    """Cluster-bootstrap resamples (the control's resamples average 10 permutations each)."""
    judged: bool = True
    """False: a pipeline check, recorded unjudged."""
    seed: int = 0


TINY_JUDGE = "tiny:new?layers=1&d=32&heads=2&max_len=4096"
SETUPS = {
    "smoke": Setup(judge=TINY_JUDGE, pipeline="smoke", domains=("keydoor",), per_domain=10, predictions=(),
                   n_perm=20, n_boot=100, judged=False),
    "quick": Setup(judge=TINY_JUDGE, pipeline="quick", domains=("keydoor",), per_domain=20, predictions=(),
                   n_perm=20, n_boot=100, judged=False),
    "full": Setup(),
}

CLAIMS = (
    Claim("E167-J3-endpoint", "A capable LM judge's total agrees with the rule total item by item (Spearman ≥ 0.6).",
          "[I] the design's inference from the paper's use of an LLM judge", "—", "j3_spearman_endpoint", ">=", 0.6),
    Claim("E167-J3-permuted", "Control: with the rule totals permuted within each domain, the LM judge's agreement "
          "with them is within 0 ± 0.05 (SmolLM2 LogprobJudge).", "[R] negative control", "—",
          "j3_spearman_permuted", "in", -0.05, upper=0.05),
)


# ---------------------------------------------------------------------------------------------------------------
# items

def _swap_lines(obs: str, donor: str, k: int, rng: np.random.Generator) -> str:
    """``obs`` with ``k`` of its lines replaced by distinct lines of ``donor`` that ``obs`` does not contain."""
    lines = obs.strip().split("\n")
    pool = [ln for ln in dict.fromkeys(donor.strip().split("\n")) if ln.strip() and ln not in lines]
    if not pool:
        pool = ["Nothing happens."]
    for i in rng.permutation(len(lines))[:k]:
        lines[int(i)] = pool[int(rng.integers(len(pool)))]
    return "\n".join(lines)


def _examples(s: Setup, domain: str) -> list[Any]:
    from agentmill.methods.world_model import pipeline as P

    if domain == "keydoor":
        from agentmill.experiments.e167_world_model.stages import wm_config

        return P.eval_examples(wm_config(s.pipeline))
    if domain == "factsearch":
        from agentmill.methods.world_model import search_wm as SW

        fs = SW.SearchWMConfig(seed=s.seed)
        te = SW.collect(SW.world_seeds("test", s.fs_worlds, s.seed), fs, phrasing="test")
        return SW.examples(te, fs, controls=False)
    if domain == "textworld":
        from agentmill.methods.world_model.data import build_examples
        from agentmill.methods.world_model.domain_textworld import (TextWorldDomain, textworld_games,
                                                                     textworld_table)

        games = textworld_games(8 + s.tw_games)
        pairs = [(g, "train") for g in games[:8]] + [(g, "test") for g in games[8:]]
        table = textworld_table(pairs, 10, seed=s.seed)  # W-5's collection: the same cache entry
        return build_examples(table.split("test"), P.FMT, TextWorldDomain(), seed=s.seed)
    raise ValueError(f"unknown domain {domain!r} (built: keydoor, factsearch, textworld)")


def _domain(name: str) -> Any:
    if name == "keydoor":
        from agentmill.methods.world_model.domain import KeyDoorDomain

        return KeyDoorDomain()
    if name == "factsearch":
        from agentmill.methods.world_model.domain_factsearch import FactSearchDomain

        return FactSearchDomain()
    from agentmill.methods.world_model.domain_textworld import TextWorldDomain

    return TextWorldDomain()


def build_items(s: Setup) -> list[dict[str, Any]]:
    """The judged items: ``{"domain", "cluster", "variant", "item": JudgeItem}``, ``per_domain`` per domain."""
    from agentmill.methods.world_model.format import QwenFormat
    from agentmill.methods.world_model.judges import JudgeItem

    out = []
    for di, name in enumerate(s.domains):
        exs = _examples(s, name)
        dom = _domain(name)
        preds: dict[str, list[str]] = {}
        variants = VARIANTS
        if name == "keydoor" and s.predictions:
            from agentmill.experiments.e167_world_model.stages import wm_config
            from agentmill.methods.world_model import pipeline as P

            preds = {st: [r["text"] for r in P.evaluate(wm_config(s.pipeline), st)] for st in s.predictions}
            variants = VARIANTS + tuple(s.predictions)
        rng = np.random.default_rng([s.seed, di])
        pick = rng.permutation(len(exs))[:s.per_domain]
        for j, i in enumerate(pick):
            x = exs[int(i)]
            v = variants[j % len(variants)]
            other = exs[int((i + 1 + rng.integers(len(exs) - 1)) % len(exs))]
            r = np.random.default_rng([s.seed, di, j])
            if v == "truth":
                comp = QwenFormat.target(x.next_obs, None)
            elif v.startswith("corrupt"):
                k = int(v[-1])
                bad = (dom.corrupt(x.next_obs, k, r) if hasattr(dom, "corrupt")
                       else _swap_lines(x.next_obs, other.next_obs, k, r))
                comp = QwenFormat.target(bad, None)
            elif v == "shuffled":
                comp = QwenFormat.target(other.next_obs, None)
            else:
                comp = preds[v][int(i)]
            cluster = x.task_id.split(":", 1)[0] if name == "factsearch" else x.task_id
            out.append({"domain": name, "cluster": f"{name}:{cluster}", "variant": v,
                        "item": JudgeItem(comp, x.next_obs, (x.obs,), x.card)})
    return out


# ---------------------------------------------------------------------------------------------------------------
# statistics

def permuted_spearman(judge: np.ndarray, rule: np.ndarray, groups: np.ndarray, n_perm: int,
                      rng: np.random.Generator) -> float:
    """Mean Spearman(judge, rule permuted within each group) over ``n_perm`` permutations."""
    vals = []
    for _ in range(n_perm):
        y = rule.copy()
        for g in np.unique(groups):
            m = np.flatnonzero(groups == g)
            y[m] = y[rng.permutation(m)]
        vals.append(spearman(judge, y))
    ok = [v for v in vals if not np.isnan(v)]  # NaN: a constant vector (a resample of identical totals)
    return float(np.mean(ok)) if ok else float("nan")


def rho_ci(a: np.ndarray, b: np.ndarray, clusters: list[str], *, n_boot: int, seed: int) -> Estimate:
    return cluster_bootstrap(lambda idx: spearman(a[idx], b[idx]), clusters, n_boot=n_boot, seed=seed)


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    from agentmill.methods.world_model.judges import RuleScorer
    from agentmill.methods.world_model.logprob_judge import LogprobJudge

    t0 = time.perf_counter()
    ctx.progress("J-3: items", 0, 3)
    items = build_items(s)
    t_items = time.perf_counter() - t0
    ctx.progress("J-3: loading the judge", 1, 3)
    t1 = time.perf_counter()
    judge = LogprobJudge(ctx.load_lm(s.judge), max_chars=s.max_chars)
    t_load = time.perf_counter() - t1
    rules = {d: RuleScorer(_domain(d)) for d in s.domains}
    ctx.progress("J-3: judging", 2, 3)
    t2 = time.perf_counter()
    rule_tot, lm_tot, mass, fails, per_dim = [], [], [], 0, []
    for n, it in enumerate(items):
        rule_tot.append(rules[it["domain"]].score(it["item"]).total)
        dist = judge.distributions(it["item"])
        if dist is None:  # no observation to show: strict accounting, as the rule scorer
            fails += 1
            lm_tot.append(1.0)
            per_dim.append([1.0] * 5)
        else:
            lm_tot.append(dist.dims().total)
            mass.append(float(dist.digit_mass.mean()))
            per_dim.append([float(v) for v in dist.expected])
        if n % 20 == 0:
            ctx.progress(f"J-3: judged {n}/{len(items)}", 2, 3)
    t_judge = time.perf_counter() - t2
    a, b = np.array(lm_tot), np.array(rule_tot)
    clusters = [it["cluster"] for it in items]
    groups = np.array([it["domain"] for it in items])
    rho = rho_ci(a, b, clusters, n_boot=s.n_boot, seed=s.seed)
    rng = np.random.default_rng(s.seed + 1)
    perm_point = permuted_spearman(a, b, groups, s.n_perm, rng)
    boot = cluster_bootstrap(lambda idx: permuted_spearman(a[idx], b[idx], groups[idx], 10, rng), clusters,
                             n_boot=s.n_boot, seed=s.seed + 2)
    # the interval is widened to contain the point, as stats.percentile_estimate does
    perm = Estimate(perm_point, min(boot.lo, perm_point), max(boot.hi, perm_point), n=boot.n,
                    method=f"{boot.method}: mean over 10 within-domain permutations per resample (point: over "
                    f"{s.n_perm})", n_boot=boot.n_boot, dropped=boot.dropped)
    by_domain = {}
    for d in s.domains:
        m = groups == d
        by_domain[d] = {"n": int(m.sum()), "spearman": spearman(a[m], b[m]),
                        "judge_mean": float(a[m].mean()), "rule_mean": float(b[m].mean())}
    by_variant = {v: {"n": int(sum(it["variant"] == v for it in items)),
                      "rule_mean": float(np.mean([r for r, it in zip(rule_tot, items) if it["variant"] == v])),
                      "judge_mean": float(np.mean([x for x, it in zip(lm_tot, items) if it["variant"] == v]))}
                  for v in dict.fromkeys(it["variant"] for it in items)}
    pd = np.array(per_dim)
    rule_dims = np.array([[getattr(rules[it["domain"]].score(it["item"]), k) for k in
                           ("format", "factuality", "consistency", "realism", "quality")] for it in items])
    dim_rho = {k: spearman(pd[:, j], rule_dims[:, j]) for j, k in enumerate(
        ("format", "factuality", "consistency", "realism", "quality")) if np.any(rule_dims[:, j] > 0)}
    ctx.data.update({
        "judge": s.judge, "n_items": len(items), "extraction_failures": fails,
        "mean_digit_mass": float(np.mean(mass)) if mass else None, "by_domain": by_domain,
        "by_variant": by_variant, "dimension_spearman": dim_rho,
        "seconds": {"items": t_items, "judge_load": t_load, "judging": t_judge,
                    "per_item": t_judge / max(1, judge.calls)},
        "points": {"judge": [float(x) for x in a], "rule": [float(x) for x in b], "domain": list(groups)},
        "endpoint": "not run: no endpoint judge call path is built and no recording exists",
    })
    ctx.data["precondition"] = ("precondition not met: no endpoint (no LM judge endpoint or recording; the "
                                "SmolLM2 LogprobJudge is reported without a threshold)")
    out = {"j3_spearman_smollm2_observed": rho, "j3_spearman_permuted": perm}
    for d, v in by_domain.items():
        out[f"j3_spearman_smollm2_{d}_observed"] = Estimate.exact(v["spearman"], n=v["n"])
    if not s.judged:
        return unjudged(out, ("j3_spearman_permuted", "j3_spearman_endpoint"), f"pipeline check: an untrained {s.judge} judge on "
                        f"{len(items)} KeyDoor items; the verdict needs the full profile's SmolLM2 judge", ctx.data)
    return out


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    plt = pyplot()
    pts = data["points"]
    fig, ax = plt.subplots(figsize=(5, 3.6))
    doms = list(dict.fromkeys(pts["domain"]))
    rng = np.random.default_rng(0)
    for d in doms:
        idx = [i for i, g in enumerate(pts["domain"]) if g == d]
        ax.scatter(np.array(pts["rule"])[idx] + rng.uniform(-0.04, 0.04, len(idx)), np.array(pts["judge"])[idx],
                   s=12, alpha=0.7, label=f"{d} (ρ = {data['by_domain'][d]['spearman']:.2f})")
    ax.set_xlabel("rule total (1-5)")
    ax.set_ylabel(f"LogprobJudge total ({data['judge'].split('?')[0]})")
    ax.legend(fontsize=7)
    ax.set_title("J-3: LM judge vs rule total per item")
    fig.tight_layout()
    p = out / "j3_judge_vs_rule.png"
    save(fig, p)
    return [p]


EXPERIMENT = Experiment(
    id="e167.wm_judge_tracks_truth",
    quick_budget_s=5,
    quick_check="pipeline check: an untrained tiny judge on the quick pipeline's KeyDoor items; J-3 is judged at "
                "full (SmolLM2 LogprobJudge)",
    parallel_safe=False,
    title="E167 J-3: does an LM judge's total track the rule total item by item? (SmolLM2 LogprobJudge; no endpoint)",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    requires=frozenset({"hf", "textworld"}),
    reads=models_read("judge"),
    scale_note="SmolLM2-135M-Instruct as a LogprobJudge (expected score over the digits 1-5, five dimensions from "
               "one shared prefill) on 180 items (60 each of KeyDoor, FactSearch, TextWorld: truths, 1-3 "
               "corruptions, shuffled targets, and KeyDoor predictions of two cached tiny world models; the design "
               "asks 300); the paper's judge is gpt-5.2 on AgentWorldBench. No endpoint judge was run. Quick: an "
               "untrained tiny judge on 20 KeyDoor items (pipeline check, unjudged).",
)
