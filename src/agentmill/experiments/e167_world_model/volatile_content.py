"""E167 W-6: content classes keep scores valid on volatile output.

KeyDoor under ``UniqueObsWrapper(p = 1)``: every observation ends in ``[request <8 hex> at <timestamp>]``, a fresh
random id and an advancing clock. A tiny world model is trained on that data with exactly the plain pipeline's
CPT→SFT recipe (W-1's steps, learning rates, batch and size; its own BPE on its own text), and scored beside W-1's
plain CPT→SFT model on the *same* test transitions (the wrapper only appends tags: same seeds, same actions, same
objective text). Metrics per item, greedy predictions:

- raw EM of the UniqueObs model (its prediction against the tagged ground truth, whitespace-collapsed);
- scrubbed field-F1 (``VolatileDomain``: volatile spans removed before parsing) minus the plain model's field-F1 on
  the paired plain transition; the claim is equivalence within ±0.03 (TOST as a 90 % interval inside the margin,
  layout-cluster bootstrap);
- id realism: the prediction holds exactly one tag, in the strict form with a real time, whose id and timestamp are
  not the current observation's (strict accounting: an unparsed prediction counts as a miss).

Reported beside them: scrubbed EM (tags replaced by a placeholder), raw field-F1 without scrubbing (the tag line then
counts as an unmatched fact), the five rule dimensions with the volatile checks, and the share of timestamps later
than the current one.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate, cluster_bootstrap, paired_diff, proportion_estimate
from agentmill.experiments.e167_world_model import PAPER
from agentmill.experiments.e167_world_model.stages import SCALE, TINY_SPEC, mean_ci, wm_config
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, Experiment, RunContext

DIMS = ("format", "factuality", "consistency", "realism", "quality")


@dataclass(frozen=True)
class Setup:
    pipeline: str = "full"
    """Which pipeline config (smoke / quick / full): data sizes, model and the CPT→SFT steps of both arms."""
    wm: str = "tiny:2x64-bpe1024 CPT→SFT on UniqueObs(p=1) KeyDoor, trained here (cached)"
    """The world model under test."""
    baseline: str = TINY_SPEC + ": W-1's CPT→SFT stage on plain KeyDoor"
    """The unwrapped world model it is compared with."""
    p: float = 1.0
    """UniqueObsWrapper tag probability (1: every observation carries a fresh tag)."""
    eval_items: int = 384
    """Paired test transitions scored per arm (half changed, half unchanged/invalid)."""
    n_boot: int = 10_000
    """Bootstrap resamples (layout clusters)."""


SETUPS = {"smoke": Setup(pipeline="smoke", eval_items=6, n_boot=200),
          "quick": Setup(pipeline="quick", eval_items=16, n_boot=500),
          "full": Setup()}

CLAIMS = (
    Claim("E167-W6-em", "On UniqueObs KeyDoor, raw exact match of the world model's predictions is near zero "
          "(≤ 0.05): session ids make raw EM meaningless.", "[C mcp judge content classes] (session data is judged "
          "on format only)", "—", "w6_raw_em", "<=", 0.05),
    Claim("E167-W6-f1", "Scored by content class (volatile spans scrubbed), the UniqueObs world model's field-F1 is "
          "within ±0.03 of the unwrapped world model's (TOST: 90 % CI inside the margin).",
          "[C mcp judge content classes]", "—", "w6_scrubbed_f1_delta", "in", -0.03, upper=0.03),
    Claim("E167-W6-ids", "Its predicted ids are format-valid and not stale (not copied from the current "
          "observation) in ≥ 0.9 of predictions.", "[C mcp judge content classes: format and plausibility only]",
          "—", "w6_id_realism", ">=", 0.9),
)


def _pick(rows: list[Any], n: int, seed: int) -> list[int]:
    """Indices of a seeded subset of ``rows``: half changed, half unchanged/invalid when available, in table order."""
    rng = np.random.default_rng(seed)
    ch = [i for i, r in enumerate(rows) if r.changed]
    un = [i for i, r in enumerate(rows) if not r.changed]
    a = [ch[int(i)] for i in rng.permutation(len(ch))[:n // 2]]
    b = [un[int(i)] for i in rng.permutation(len(un))[:n - len(a)]]
    return sorted(a + b)


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    from agentmill.methods.world_model import pipeline as P
    from agentmill.methods.world_model.data import assign_splits
    from agentmill.methods.world_model.domain import KeyDoorDomain
    from agentmill.methods.world_model.judges import FAILED, JudgeItem, RuleScorer, exact_match, field_f1
    from agentmill.methods.world_model.model import GREEDY, WorldModel
    from agentmill.methods.world_model.volatile import (PLACEHOLDER, UniqueRecipe, VolatileDomain, row_examples,
                                                        scrub, tag_checks, unique_data, unique_stage)

    cfg = wm_config(s.pipeline)
    tasks = assign_splits(cfg.n_train, cfg.n_cpt, cfg.n_dev, cfg.n_test, cfg.seed)
    recipe = UniqueRecipe(cfg, s.p)
    ctx.progress("UniqueObs CPT→SFT", 0, 2)
    ulm, ulog = unique_stage(recipe, tasks, P.FMT)
    ctx.progress("plain CPT→SFT (W-1's stage)", 1, 2)
    plm, plog = P.stage(cfg, "cpt_sft")
    plain_test = P.data(cfg).split("test")
    uniq_test = unique_data(recipe, tasks).split("test")
    key = lambda r: (r.episode_id, r.t, r.action)  # noqa: E731
    if [key(r) for r in plain_test] != [key(r) for r in uniq_test]:
        raise RuntimeError("the UniqueObs and plain test tables are not paired row for row (same seeds, same actions)")
    idx = _pick(uniq_test, s.eval_items, cfg.seed + 23)
    urows, prows = [uniq_test[i] for i in idx], [plain_test[i] for i in idx]
    if any(scrub(u.next_obs) != p.next_obs or scrub(u.obs) != p.obs for u, p in zip(urows, prows)):
        raise RuntimeError("a UniqueObs observation differs from its plain twin beyond its volatile tag")
    vdom, kdom = VolatileDomain(), KeyDoorDomain()
    uex = row_examples(urows, P.FMT, vdom, seed=cfg.seed)
    pex = row_examples(prows, P.FMT, kdom, seed=cfg.seed)
    gen = dataclasses.replace(GREEDY, max_new_tokens=cfg.rl_max_new)
    t0 = time.perf_counter()
    upred = WorldModel(ulm, vdom, P.FMT, gen).predict_examples(uex)
    t1 = time.perf_counter()
    ppred = WorldModel(plm, kdom, P.FMT, gen).predict_examples(pex)
    t2 = time.perf_counter()

    scorer = RuleScorer(vdom)
    items = []
    for e, ep, up, pp in zip(uex, pex, upred, ppred):
        o = up.observation
        checks = tag_checks(o, e.obs)
        dims = scorer.score_observation(o, JudgeItem(up.text, e.next_obs, (e.obs,), e.card)) if o is not None \
            else FAILED
        items.append({"task_id": e.task_id, "t": e.t, "changed": e.changed, "parse_ok": o is not None,
                      "raw_em": exact_match(o, e.next_obs),
                      "scrubbed_em": exact_match(None if o is None else scrub(o, PLACEHOLDER),
                                                 scrub(e.next_obs, PLACEHOLDER)),
                      "raw_f1": field_f1(kdom, o, e.next_obs), "scrubbed_f1": field_f1(vdom, o, e.next_obs),
                      "plain_f1": field_f1(kdom, pp.observation, ep.next_obs),
                      "plain_em": exact_match(pp.observation, ep.next_obs),
                      "plain_parse_ok": pp.observation is not None,
                      **{f"tag_{k}": v for k, v in checks.items()}, "dims": dims.as_dict()})
    units = [r["task_id"] for r in items]
    col = lambda k: np.array([float(r[k]) for r in items])  # noqa: E731
    n = len(items)
    n_em = int(col("raw_em").sum())
    n_ok = int(col("tag_ok").sum())
    out: dict[str, Estimate] = {
        "w6_raw_em": proportion_estimate(n_em, n),
        "w6_scrubbed_f1_delta": tost_interval(col("scrubbed_f1"), col("plain_f1"), units, s.n_boot),
        "w6_id_realism": proportion_estimate(n_ok, n),
        "scrubbed_em": proportion_estimate(int(col("scrubbed_em").sum()), n),
        "plain_em": proportion_estimate(int(col("plain_em").sum()), n),
        "scrubbed_f1": mean_ci(col("scrubbed_f1"), units, n_boot=s.n_boot),
        "plain_f1": mean_ci(col("plain_f1"), units, n_boot=s.n_boot),
        "raw_f1_unscrubbed": mean_ci(col("raw_f1"), units, n_boot=s.n_boot),
        "parse_rate": proportion_estimate(int(col("parse_ok").sum()), n),
        "plain_parse_rate": proportion_estimate(int(col("plain_parse_ok").sum()), n),
        "tag_format_valid": proportion_estimate(int(col("tag_valid").sum()), n),
        "tag_not_stale": proportion_estimate(int(col("tag_fresh").sum()), n),
        "tag_later_than_current": proportion_estimate(int(col("tag_later").sum()), n),
        "tag_present": proportion_estimate(int(col("tag_present").sum()), n),
        "tag_id_copied": proportion_estimate(int(col("tag_copied").sum()), n)}
    ch = col("changed") > 0
    if ch.any() and (~ch).any():
        d = col("scrubbed_f1") - col("plain_f1")
        out["scrubbed_f1_delta_changed"] = Estimate.exact(float(d[ch].mean()), n=int(ch.sum()))
        out["scrubbed_f1_delta_unchanged"] = Estimate.exact(float(d[~ch].mean()), n=int((~ch).sum()))
    dims = {d: float(np.mean([(r["dims"][d] - 1) / 4 * 100 for r in items if r["dims"][d] > 0] or [np.nan]))
            for d in DIMS}
    ctx.data.update({
        "items": n, "changed_share": float(ch.mean()), "layouts": len(set(units)),
        "unique_stage": {"seconds": ulog.get("seconds"), "cpt_seconds": ulog.get("cpt_seconds"),
                         "examples": ulog.get("examples"), "final_sft_loss": (ulog.get("sft_losses") or [None])[-1]},
        "plain_stage": {"seconds": plog.get("seconds"), "final_loss": (plog.get("losses") or [None])[-1]},
        "predict_seconds": {"unique": t1 - t0, "plain": t2 - t1}, "dims_unique_volatile_rule": dims,
        "counts": {"raw_em": n_em, "id_ok": n_ok},
        "id_lengths": _id_lengths([p.observation for p in upred]),
        "examples": [{"gt": e.next_obs, "pred": p.observation} for e, p in list(zip(uex, upred))[:3]]})
    return out


def _id_lengths(preds: list[str | None]) -> dict[str, int]:
    """How many predicted tags have an id field of each length (the wrapper writes 8 hex digits)."""
    from agentmill.methods.world_model.volatile import LOOSE_TAG, volatile_values

    out: dict[str, int] = {}
    for p in preds:
        for v in volatile_values(p or ""):
            m = LOOSE_TAG.match(v)
            k = str(len(m.group(1))) if m else "malformed"
            out[k] = out.get(k, 0) + 1
    return dict(sorted(out.items()))


def tost_interval(a: np.ndarray, b: np.ndarray, units: list[str], n_boot: int) -> Estimate:
    """mean(a − b) with a 90 % layout-cluster bootstrap interval: equivalence within ±m at α = 0.05 (TOST) holds
    exactly when this interval lies inside [−m, m]."""
    d = np.asarray(a, float) - np.asarray(b, float)
    if len(set(units)) < 2:
        return paired_diff(a, b, n_boot=n_boot, level=0.90)
    return cluster_bootstrap(lambda idx: float(d[idx].mean()), units, n_boot=n_boot, level=0.90)


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    dims = data.get("dims_unique_volatile_rule")
    if not dims:
        return []
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3.0))
    ax.bar(list(dims), [dims[d] for d in DIMS], color="tab:blue")
    ax.set_ylim(0, 100)
    ax.set_ylabel("rule score (0-100)")
    ax.set_title("W-6: UniqueObs world model, rule dimensions with volatile content classes", fontsize=9)
    fig.tight_layout()
    p = out / "w6_volatile_dims.png"
    save(fig, p)
    return [p]


EXPERIMENT = Experiment(
    id="e167.wm_volatile_content",
    quick_budget_s=10,
    title="E167 W-6: content classes keep world-model scores valid on volatile output (UniqueObs KeyDoor)",
    paper=PAPER,
    requires=frozenset({"hf"}),
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    quick_check="quick trains the UniqueObs world model for a few steps only; the verdict is the full profile's",
    scale_note=SCALE + " The UniqueObs arm repeats W-1's CPT→SFT (CPT 100 × 8 × 256 tokens, SFT 800 × 8) on the same "
                       "layouts with every observation tagged; one training seed per arm, so the equivalence interval "
                       "covers test items, not training runs. Paper: volatile MCP content judged by class, no "
                       "number published.",
)
