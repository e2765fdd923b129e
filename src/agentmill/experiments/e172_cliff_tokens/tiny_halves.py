"""E172 CT-2 … CT-5, the tiny-model halves: the same claims as the oracle experiments, measured on the gated tiny
chained-addition model ``chainadd-lsd`` (the shipped weights, whose gate passed: method README, deviation 10).

- ``e172.cliff_tiny_estimator`` (CT-2 tiny): at 50 random positions of sampled tiny traces, the tower identity
  V_{t−1} = Σ_x π(x)·V(x) with every side estimated from n = 256 forked continuations of the tiny model: |direct −
  tower| / SE ≤ 3 at ≥ 95 % of the positions.
- ``e172.cliff_tiny_localization`` (CT-3 + CT-4 tiny, one scan): failing tiny traces scanned at n = 64 (every
  position 0..T−1), cliffs detected with the paper's test and typed from the tiny policy (full entropy). Recall of
  emitted SO/UC error tokens with V̂_{t−1} ≥ 0.3; first-cliff precision; taxonomy shares; DF error tokens flagged.
- ``e172.cliff_tiny_deterministic`` (CT-5b tiny): every DF-typed cliff of the pooled tiny scans (the CT-3 scans plus
  extra traces whose last addition holds a UC/SO site) and a capped number of SO/UC-typed cliffs re-estimated with
  fresh n = 512 continuations at t−1 and t and re-tested.

Rollouts are ``cliff_dpo.branch_rollouts`` (one teacher-forced pass, batched forks: README deviation 12). Scans are
kept under ``core.paths.cache_root()/cliff_scans/tiny-<hash>.json`` so CT-5 reads CT-3's. Sizes: README deviation 15.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate, clopper_pearson
from agentmill.experiments.e172_cliff_tokens import PAPER
from agentmill.experiments.protocol import PRECONDITION_NOT_MET, Claim, Experiment, RunContext, unjudged

SCHEMA = "agentmill.cliffscan-tiny/1"
SUBSTRATE = "tiny chainadd-lsd 2x64 (shipped, gated)"
SCALE = ("designed error mechanisms distilled into a 137k-parameter character transformer (chainadd-lsd, gate "
         "passed) vs seven instruction-tuned LLMs on GSM1K/MATH500/AIME; temperature-1 sampling; checks the "
         "detector on a learned policy that approximates the planted law, not that real models fail this way.")
QUICK_CHECK = ("quick runs the tiny pipeline only (a handful of traces at small n): observed values recorded, "
               "judged at full")


# ------------------------------------------------------------------------------------------------ the model
def tiny_model(work: Path) -> tuple[Any, dict[str, Any]]:
    """The shipped gated model (the recipe CT-7/CT-8 use; never trained here) and its card."""
    from agentmill.methods.cliff_tokens.chainadd import ChainRecipe, gate_text, obtain_chainadd

    # The recipe of README deviation 10 (its content address names the shipped weights).
    recipe = ChainRecipe(order="lsd", layers=2, d=64, steps=3600, batch=64, seed=0, site_weight=5.0,
                         train_mix=(1 / 3, 1 / 3, 1 / 3))
    lm, card = obtain_chainadd(recipe, work / "models", gate_problems=2000, gate_sampled=400, train=False)
    card = dict(card)
    card["gate_text"] = gate_text(card["gate"])
    return lm, card


def _substrate(card: dict[str, Any]) -> str:
    return f"{SUBSTRATE}, weights sha256 {str(card.get('weights_sha256'))[:12]}; {card['gate_text']}"


def _gate_block(card: dict[str, Any], ctx: RunContext) -> bool:
    ctx.data.update({"substrate": _substrate(card), "gate": card["gate"], "model_source": card.get("source")})
    if not card["gate"]["passed"]:
        ctx.data["precondition"] = f"{PRECONDITION_NOT_MET}: {card['gate_text']}"
        return False
    return True


# ------------------------------------------------------------------------------------------------ scans
def site_list(ops: Any, trace: list[int]) -> list[dict[str, Any]] | None:
    """The planted sites of ``trace`` if it is one of the oracle's complete traces of ``ops`` (lsd), else None
    (the tiny model wrote something the planted law never writes)."""
    from agentmill.methods.cliff_tokens.chainadd import enumerate_chain

    for leaf in enumerate_chain(ops, "lsd"):
        if list(leaf.ids) == list(trace):
            return [asdict(s) for s in leaf.sites]
    return None


def scan_one(lm: Any, ops: Any, trace: list[int], n: int, gen: Any) -> dict[str, Any]:
    """Scan → detect → type (full entropy and the paper's top-20) for one tiny trace."""
    from agentmill.methods.cliff_tokens import cliff_dpo as cd
    from agentmill.methods.cliff_tokens.chainadd import grade_chain
    from agentmill.methods.cliff_tokens.planted import prompt_ids
    from agentmill.methods.cliff_tokens.taxonomy import type_token
    from agentmill.methods.cliff_tokens.ztest import CliffTest, detect, expected_false_cliffs

    q = prompt_ids(ops)
    sc = cd.scan_trace(lm, q, trace, n, gen, order="lsd")
    found = detect(sc["k"], sc["n"], list(trace), CliffTest())
    cliffs = []
    for c in found:
        lp = sc["logp"][len(q) + c.pos - 2]           # the distribution at (q, y_<pos)
        kind, rank, h = type_token(lp, c.token_id, entropy="full")
        kind20, _, _ = type_token(lp, c.token_id, entropy="top20")
        cliffs.append({**asdict(c), "type": kind, "type_top20": kind20, "rank": rank, "entropy": h,
                       "prob": float(np.exp(lp[c.token_id]))})
    return {"ops": list(ops), "trace": list(trace), "correct": bool(grade_chain(cd.trace_text(trace), ops, "lsd")),
            "sites": site_list(ops, list(trace)), "k": sc["k"].tolist(), "n": sc["n"].tolist(), "cliffs": cliffs,
            "expected_false": float(expected_false_cliffs(sc["k"], sc["n"], CliffTest())), "cost": sc["cost"]}


def _last_addition_site(ops: Any) -> bool:
    from agentmill.methods.cliff_tokens.planted import site_kind

    return site_kind(int(sum(ops[:-1])), int(ops[-1])) in ("SO", "UC")


def tiny_scans(lm: Any, kind: str, traces: int, n: int, seed: int, key_extra: dict[str, Any],
               progress=None) -> tuple[list[dict[str, Any]], float]:
    """Scanned tiny traces, cached by (kind, traces, n, seed, model). ``kind`` = ``failing`` (sampled at T = 1 until
    ``traces`` fail) or ``last_site`` (problems whose last addition holds a UC/SO site, any outcome).
    Returns (records, seconds spent now: 0 from the cache)."""
    import torch

    from agentmill import __version__
    from agentmill.core.paths import cache_root
    from agentmill.core.records import write_json_atomic
    from agentmill.methods.cliff_tokens import cliff_dpo as cd
    from agentmill.methods.cliff_tokens.chainadd import grade_chain, sample_problems, sample_traces
    from agentmill.methods.cliff_tokens.planted import prompt_ids

    blob = json.dumps({"schema": SCHEMA, "kind": kind, "traces": traces, "n": n, "seed": seed, "v": __version__,
                       **key_extra}, sort_keys=True)
    path = cache_root() / "cliff_scans" / f"tiny-{hashlib.sha256(blob.encode()).hexdigest()[:16]}.json"
    if path.exists():
        try:
            got = json.loads(path.read_text())
            if got.get("schema") == SCHEMA:
                return got["traces"], 0.0
        except (OSError, ValueError):
            pass
    t0 = time.perf_counter()
    rng = np.random.default_rng([seed, 1172, 0 if kind == "failing" else 1])
    gen = torch.Generator().manual_seed(seed * 7919 + (1172 if kind == "failing" else 2172))
    recs: list[dict[str, Any]] = []
    sampled = 0
    while len(recs) < traces:
        probs = sample_problems(rng, 64)
        if kind == "last_site":
            probs = [o for o in probs if _last_addition_site(o)] or probs[:1]
        tr, _ = sample_traces(lm, [prompt_ids(o) for o in probs], gen, max_new=40)
        for ops, t in zip(probs, tr):
            if len(recs) >= traces:
                break
            sampled += 1
            if kind == "failing" and grade_chain(cd.trace_text(t), ops, "lsd"):
                continue
            recs.append(scan_one(lm, ops, t, n, gen))
            if progress:
                progress(len(recs), traces)
    for r in recs:
        r["sampled_before"] = sampled
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    write_json_atomic(path, {"schema": SCHEMA, "kind": kind, "n": n, "seed": seed, "traces": recs})
    return recs, time.perf_counter() - t0


# ------------------------------------------------------------------------------------------------ counting
def localization_counts(recs: list[dict[str, Any]], v_min: float = 0.3) -> dict[str, Any]:
    """CT-3/CT-4 counts over scanned tiny traces. A site's error token is trace index ``pos`` (0-based), so V_{t−1}
    is the scan's estimate after ``pos`` tokens and a cliff on it has 1-based position ``pos + 1``."""
    c: dict[str, Any] = {"qualifying": 0, "recalled": 0, "failing": 0, "failing_with_cliff": 0,
                         "first_cliff_correct": 0, "off_oracle": 0, "SO": [0, 0], "UC": [0, 0], "DF_erred": 0,
                         "DF_flagged": 0, "cliffs": 0, "top20_agree": 0, "types": {}}
    for r in recs:
        at = {cl["pos"]: cl for cl in r["cliffs"]}
        c["cliffs"] += len(at)
        c["top20_agree"] += sum(cl["type"] == cl["type_top20"] for cl in at.values())
        for cl in at.values():
            c["types"][cl["type"]] = c["types"].get(cl["type"], 0) + 1
        sites = r["sites"]
        if sites is None:
            c["off_oracle"] += 1
            sites = []
        for st in sites:
            if not st["erred"]:
                continue
            pos = st["pos"] + 1
            if st["kind"] in ("SO", "UC"):
                k, n = r["k"][st["pos"]], r["n"][st["pos"]]
                if k >= 0 and n > 0 and k / n >= v_min:
                    c["qualifying"] += 1
                    c["recalled"] += pos in at
                if pos in at:
                    c[st["kind"]][1] += 1
                    c[st["kind"]][0] += at[pos]["type"] == st["kind"]
            elif st["kind"] == "DF":
                c["DF_erred"] += 1
                c["DF_flagged"] += pos in at
        if not r["correct"]:
            c["failing"] += 1
            if at:
                c["failing_with_cliff"] += 1
                erred = [s for s in sites if s["erred"]]
                first = min(erred, key=lambda s: s["pos"]) if erred else None
                c["first_cliff_correct"] += first is not None and min(at) == first["pos"] + 1
    return c


# ================================================================================================ CT-2 tiny
@dataclass(frozen=True)
class EstimatorSetup:
    positions: int = 50
    """Random (trace, position) pairs checked [the claim's 50]."""
    n: int = 256
    """Continuations per estimate (direct and per forced token) [the claim's n = 256]."""
    min_prob: float = 1e-4
    """Tokens with π(x) below this are left out of the tower sum; their mass is recorded (README deviation 16)."""
    seed: int = 0


ESTIMATOR_SETUPS = {"smoke": EstimatorSetup(positions=2, n=32), "quick": EstimatorSetup(positions=2, n=32),
                    "full": EstimatorSetup()}

ESTIMATOR_CLAIMS = (
    Claim("E172-CT2-tiny", "On the tiny chained-addition model (chainadd-lsd, gate passed) the fork estimator obeys "
          "the tower identity: |V̂_{t-1} − Σ_x π(x)V̂(x)| / SE ≤ 3 at ≥ 95 % of 50 random positions (n = 256).",
          "[P]/[D] estimator", "—", "ct2_tiny_share_within_3se", ">=", 0.95, judge_on="exact",
          exact_why="the pre-registered criterion is itself a count of 3-SE tests over a fixed number of positions; "
                    "the 3 SE are what allow for the estimates' noise"),
)


def _var(k: int, n: int) -> float:
    """Variance of k/n with the plug-in p̃ = (k + 1)/(n + 2), which stays > 0 at k = 0 or n (README deviation 16)."""
    pt = (k + 1) / (n + 2)
    return pt * (1 - pt) / n


def tower_at(lm: Any, ops: Any, prefix: list[int], n: int, gen: Any, min_prob: float) -> dict[str, Any]:
    """Direct V̂ at (q, prefix) and Σ_x π(x)·V̂(x) over tokens with π(x) ≥ ``min_prob`` (EOS: V = grade of the
    prefix as the final trace), each from n fresh forked continuations; SE of the difference (independent draws);
    z = distance from the direct estimate to [Σ, Σ + left-out mass] over that SE."""
    from agentmill.methods.cliff_tokens import cliff_dpo as cd
    from agentmill.methods.cliff_tokens.chainadd import grade_chain
    from agentmill.methods.cliff_tokens.planted import EOS, prompt_ids

    q = prompt_ids(ops)
    base = list(q) + list(prefix)
    new, _, logp = cd.branch_rollouts(lm, base, [len(base)] * n, gen, cap=len(q) + 40)
    k0 = sum(grade_chain(cd.trace_text(list(prefix) + r), ops, "lsd") for r in new)
    p = np.exp(logp[len(base) - 1])
    cand = [int(x) for x in np.flatnonzero(p >= min_prob)]
    rhs, var = 0.0, 0.0
    forced = [x for x in cand if x != EOS]
    if forced:
        newf, _, _ = cd.branch_rollouts(lm, base, [len(base)] * (n * len(forced)), gen,
                                        first=[x for x in forced for _ in range(n)], cap=len(q) + 40)
        for j, x in enumerate(forced):
            rows = newf[j * n:(j + 1) * n]
            # a forced token x is the first of each row's continuation (``new`` holds it, EOS excluded)
            kx = sum(grade_chain(cd.trace_text(list(prefix) + r), ops, "lsd") for r in rows)
            rhs += p[x] * kx / n
            var += p[x] ** 2 * _var(kx, n)
    if EOS in cand:
        rhs += p[EOS] * float(grade_chain(cd.trace_text(list(prefix)), ops, "lsd"))
    v0 = k0 / n
    se = float(np.sqrt(var + _var(k0, n)))
    # The left-out tokens (mass r) add between 0 and r to the sum: the distance is to the interval [rhs, rhs + r].
    r = float(max(1 - p[cand].sum(), 0.0))
    gap = max(rhs - v0, v0 - (rhs + r), 0.0)
    z = gap / se if se > 0 else (0.0 if gap < 1e-12 else float("inf"))
    return {"direct": v0, "tower": float(rhs), "se": se, "gap": float(gap), "z": float(z), "candidates": len(cand),
            "residual_mass": r}


def measure_estimator(s: EstimatorSetup, ctx: RunContext) -> dict[str, Estimate]:
    import torch

    from agentmill.methods.cliff_tokens.chainadd import sample_problems, sample_traces
    from agentmill.methods.cliff_tokens.planted import prompt_ids

    lm, card = tiny_model(ctx.work_dir)
    ok = _gate_block(card, ctx)
    rng = np.random.default_rng([s.seed, 2172])
    gen = torch.Generator().manual_seed(s.seed * 7919 + 3172)
    probs = sample_problems(rng, s.positions)
    traces, _ = sample_traces(lm, [prompt_ids(o) for o in probs], gen, max_new=40)
    rows = []
    t0 = time.perf_counter()
    for i, (ops, tr) in enumerate(zip(probs, traces)):
        t = int(rng.integers(0, max(len(tr), 1)))
        r = tower_at(lm, ops, list(tr[:t]), s.n, gen, s.min_prob)
        rows.append({"ops": list(ops), "t": t, **r})
        ctx.progress("CT-2 tiny positions", i + 1, s.positions)
    within = sum(r["z"] <= 3.0 for r in rows)
    ctx.data.update({"rows": rows, "within_3se": within, "positions": len(rows),
                     "max_residual_mass": max(r["residual_mass"] for r in rows), "seconds": time.perf_counter() - t0})
    out = {"ct2_tiny_share_within_3se": Estimate.exact(within / len(rows), n=len(rows)),
           "ct2_tiny_share_ci": clopper_pearson(within, len(rows))}
    if not ok:
        out = unjudged(out, ["ct2_tiny_share_within_3se"], ctx.data["precondition"], ctx.data)
    return out


def plots_estimator(data: dict[str, Any], out: Path) -> list[Path]:
    from agentmill.experiments.plotting import pyplot, save

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 3))
    rows = data["rows"]
    ax.errorbar([r["tower"] for r in rows], [r["direct"] for r in rows], yerr=[3 * r["se"] for r in rows], fmt="o",
                ms=3, lw=0.8)
    ax.plot([0, 1], [0, 1], "k--", lw=0.8)
    ax.set_xlabel("Σ π(x)·V̂(x)")
    ax.set_ylabel("direct V̂ (± 3 SE)")
    ax.set_title(f"CT-2 tiny: {data['within_3se']}/{data['positions']} within 3 SE")
    fig.tight_layout()
    p = out / "ct2_tiny_tower.png"
    save(fig, p)
    return [p]


# ================================================================================================ CT-3 + CT-4 tiny
@dataclass(frozen=True)
class LocalizationSetup:
    failing_traces: int = 300
    """Failing tiny traces scanned [the design's 300; README deviation 15]."""
    n: int = 64
    """Continuations per potential [P]."""
    min_qualifying: int = 25
    """CT-3 is judged only with at least this many qualifying SO/UC error tokens [the claim's rule]."""
    seed: int = 0


LOCALIZATION_SETUPS = {"smoke": LocalizationSetup(failing_traces=2, n=16),
                       "quick": LocalizationSetup(failing_traces=1, n=16), "full": LocalizationSetup()}

LOCALIZATION_CLAIMS = (
    Claim("E172-CT3-tiny-recall", "On the tiny model (chainadd-lsd, gate passed), cliffs find the emitted SO/UC "
          "error tokens with V̂_{t-1} ≥ 0.3 (recall).", "[P] cliffs locate failures; [R] planted task",
          "qualitative", "ct3_tiny_recall", ">=", 0.90, ci_bound=0.0),
    Claim("E172-CT3-tiny-precision", "On failing tiny traces the first cliff is the first planted error token.",
          "[P]; [R] planted task", "qualitative", "ct3_tiny_first_cliff_precision", ">=", 0.85, ci_bound=0.0),
    Claim("E172-CT4-tiny-SO", "Tiny-model cliffs on planted SO error tokens are typed SO (full entropy, policy "
          "distribution).", "[P] taxonomy; [R] planted", "qualitative", "ct4_tiny_so_typed_so", ">=", 0.90,
          ci_bound=0.0),
    Claim("E172-CT4-tiny-UC", "Tiny-model cliffs on planted UC error tokens are typed UC.",
          "[P] taxonomy; [R] planted", "qualitative", "ct4_tiny_uc_typed_uc", ">=", 0.90, ci_bound=0.0),
    Claim("E172-CT4-tiny-DF", "Planted DF error tokens the tiny model emitted are (almost) never flagged as cliffs "
          "(share flagged).", "[D] DF bound", "—", "ct4_tiny_df_flagged", "<=", 0.02),
)


def measure_localization(s: LocalizationSetup, ctx: RunContext) -> dict[str, Estimate]:
    lm, card = tiny_model(ctx.work_dir)
    ok = _gate_block(card, ctx)
    recs, secs = tiny_scans(lm, "failing", s.failing_traces, s.n, s.seed, {"weights": card.get("weights_sha256")},
                            progress=lambda i, n: ctx.progress("tiny scans", i, n))
    c = localization_counts(recs)
    ctx.data.update({"counts": c, "scan_seconds": secs, "traces_sampled": recs[-1]["sampled_before"] if recs else 0,
                     "expected_false_cliffs": float(sum(r["expected_false"] for r in recs)),
                     "examples": [r for r in recs if r["cliffs"]][:6]})
    out: dict[str, Estimate] = {}
    if c["qualifying"]:
        out["ct3_tiny_recall"] = clopper_pearson(c["recalled"], c["qualifying"])
    if c["failing_with_cliff"]:
        out["ct3_tiny_first_cliff_precision"] = clopper_pearson(c["first_cliff_correct"], c["failing_with_cliff"])
    for kind in ("SO", "UC"):
        if c[kind][1]:
            out[f"ct4_tiny_{kind.lower()}_typed_{kind.lower()}"] = clopper_pearson(*c[kind])
    if c["DF_erred"]:
        out["ct4_tiny_df_flagged"] = clopper_pearson(c["DF_flagged"], c["DF_erred"])
    if c["cliffs"]:
        out["ct4_tiny_top20_agreement"] = clopper_pearson(c["top20_agree"], c["cliffs"])
    if not ok:
        return unjudged(out, [cl.metric for cl in LOCALIZATION_CLAIMS], ctx.data["precondition"], ctx.data)
    if c["qualifying"] < s.min_qualifying and ctx.profile == "full":
        ct3 = ["ct3_tiny_recall", "ct3_tiny_first_cliff_precision"]
        ctx.data["ct3_note"] = (f"only {c['qualifying']} qualifying SO/UC error tokens (< {s.min_qualifying}): "
                                "CT-3 tiny is inconclusive")
        out = {(f"{k}_observed" if k in ct3 else k): v for k, v in out.items()}
    return out


def plots_localization(data: dict[str, Any], out: Path) -> list[Path]:
    from agentmill.experiments.plotting import pyplot, save

    plt = pyplot()
    show = data["examples"][:6]
    fig, axes = plt.subplots(len(show) or 1, 1, figsize=(7, 1.6 * max(len(show), 1)), squeeze=False)
    for ax, r in zip(axes[:, 0], show):
        kk, nn = np.asarray(r["k"], float), np.asarray(r["n"], float)
        okk = kk >= 0
        t = np.arange(len(kk))
        ax.plot(t[okk], kk[okk] / np.maximum(nn[okk], 1), "o-", ms=3)
        for c in r["cliffs"]:
            ax.axvline(c["pos"], color={"DF": "tab:red", "UC": "tab:orange", "SO": "tab:purple"}.get(c["type"], "gray"),
                       lw=1.5, alpha=0.7)
            ax.text(c["pos"], 1.02, c["type"], fontsize=7, ha="center")
        ax.set_ylim(-0.05, 1.15)
        ax.set_xticks(t[1:])
        ax.set_xticklabels(list(bytes(r["trace"]).decode(errors="replace")), fontsize=6)
    axes[0, 0].set_title("potential curves of failing tiny traces (chainadd-lsd), cliffs marked by type")
    fig.tight_layout()
    p = out / "ct3_tiny_potentials.png"
    save(fig, p, dpi=110)
    return [p]


# ================================================================================================ CT-5 tiny
@dataclass(frozen=True)
class DeterministicSetup:
    failing_traces: int = 300
    """The CT-3 tiny scans pooled here (read from the scan cache)."""
    extra_traces: int = 300
    """Extra scanned traces whose last addition holds a UC/SO site [the design's 300]."""
    n: int = 64
    """Continuations per potential in the scans."""
    n_fresh: int = 512
    """Continuations per fresh re-estimate in the replication test [the claim's n = 512]."""
    max_souc: int = 100
    """SO/UC-typed cliffs replicated, the first ones in scan order (every DF-typed cliff is; README deviation 15)."""
    seed: int = 0


DETERMINISTIC_SETUPS = {"smoke": DeterministicSetup(failing_traces=2, extra_traces=1, n=16, n_fresh=32, max_souc=2),
                        "quick": DeterministicSetup(failing_traces=1, extra_traces=1, n=16, n_fresh=64, max_souc=2),
                        "full": DeterministicSetup()}

DETERMINISTIC_CLAIMS = (
    Claim("E172-CT5b-tiny-DF", "DF-typed cliffs of the tiny model (pooled scans) do not replicate with fresh "
          "n = 512 continuations (replication rate; needs ≥ 10 DF cliffs).", "[D] prediction",
          "paper: DF cliffs are 'confident bias'", "ct5b_tiny_df_replication", "<=", 0.10),
    Claim("E172-CT5b-tiny-SOUC", "SO/UC-typed cliffs of the tiny model replicate with fresh n = 512 continuations.",
          "[D] prediction", "—", "ct5b_tiny_souc_replication", ">=", 0.80, ci_bound=0.0),
)


def replicate_cliff(lm: Any, ops: Any, trace: list[int], cliff: dict[str, Any], n: int, gen: Any) -> dict[str, Any]:
    """Fresh V̂_{t−1} and V̂_t (n each, one batched call) at a cliff and the same test on them."""
    from agentmill.methods.cliff_tokens import cliff_dpo as cd
    from agentmill.methods.cliff_tokens.chainadd import grade_chain
    from agentmill.methods.cliff_tokens.planted import prompt_ids
    from agentmill.methods.cliff_tokens.ztest import CliffTest, is_cliff

    q = prompt_ids(ops)
    base = list(q) + list(trace)
    lp, lc = len(q) + cliff["pos"] - 1, len(q) + cliff["pos"]
    new, _, _ = cd.branch_rollouts(lm, base, [lp] * n + [lc] * n, gen, cap=len(q) + 40)
    kp = sum(grade_chain(cd.trace_text(list(trace[: cliff["pos"] - 1]) + r), ops, "lsd") for r in new[:n])
    kc = sum(grade_chain(cd.trace_text(list(trace[: cliff["pos"]]) + r), ops, "lsd") for r in new[n:])
    return {"k_prev": kp, "k_curr": kc, "n": n, "replicated": bool(is_cliff(kp, n, kc, n, CliffTest()))}


def measure_deterministic(s: DeterministicSetup, ctx: RunContext) -> dict[str, Estimate]:
    import torch

    lm, card = tiny_model(ctx.work_dir)
    ok = _gate_block(card, ctx)
    key = {"weights": card.get("weights_sha256")}
    fail, s1 = tiny_scans(lm, "failing", s.failing_traces, s.n, s.seed, key,
                          progress=lambda i, n: ctx.progress("tiny scans (CT-3)", i, n))
    extra, s2 = tiny_scans(lm, "last_site", s.extra_traces, s.n, s.seed, key,
                           progress=lambda i, n: ctx.progress("tiny scans (extra)", i, n))
    pool = [(r, c) for r in fail + extra for c in r["cliffs"]]
    df = [(r, c) for r, c in pool if c["type"] == "DF"]
    souc = [(r, c) for r, c in pool if c["type"] in ("SO", "UC")][: s.max_souc]
    gen = torch.Generator().manual_seed(s.seed * 7919 + 5172)
    rep = {"DF": [0, 0], "SOUC": [0, 0]}
    rows = []
    t0 = time.perf_counter()
    for i, (g, items) in enumerate((("DF", df), ("SOUC", souc))):
        for r, c in items:
            res = replicate_cliff(lm, r["ops"], r["trace"], c, s.n_fresh, gen)
            rep[g][0] += res["replicated"]
            rep[g][1] += 1
            rows.append({"group": g, "type": c["type"], "pos": c["pos"], "k_prev0": c["k_prev"],
                         "k_curr0": c["k_curr"], **res})
            ctx.progress("CT-5 tiny replication", len(rows), len(df) + len(souc))
    types = {}
    for _, c in pool:
        types[c["type"]] = types.get(c["type"], 0) + 1
    ctx.data.update({"replication": rep, "rows": rows, "pooled_traces": len(fail) + len(extra),
                     "pooled_cliffs": len(pool), "cliff_types": types, "df_cliffs": len(df),
                     "expected_false_cliffs": float(sum(r["expected_false"] for r in fail + extra)),
                     "scan_seconds": s1 + s2, "replication_seconds": time.perf_counter() - t0,
                     "pooled_from": "CT-3 tiny scans + extra last-site traces (CT-7's detection not pooled: README "
                                    "deviation 15)"})
    out: dict[str, Estimate] = {}
    if rep["DF"][1] >= 10:
        out["ct5b_tiny_df_replication"] = clopper_pearson(*rep["DF"])
    elif rep["DF"][1]:
        out["ct5b_tiny_df_replication_observed"] = clopper_pearson(*rep["DF"])
    if rep["DF"][1] < 10:
        ctx.data["ct5b_note"] = f"only {rep['DF'][1]} DF-typed cliffs (< 10): CT-5b tiny DF is inconclusive"
    if rep["SOUC"][1]:
        out["ct5b_tiny_souc_replication"] = clopper_pearson(*rep["SOUC"])
    if not ok:
        out = unjudged(out, [cl.metric for cl in DETERMINISTIC_CLAIMS], ctx.data["precondition"], ctx.data)
    return out


def plots_deterministic(data: dict[str, Any], out: Path) -> list[Path]:
    from agentmill.experiments.plotting import pyplot, save

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 3))
    rep = data["replication"]
    names = [k for k in ("DF", "SOUC") if rep[k][1]]
    ax.bar(names, [rep[k][0] / rep[k][1] for k in names])
    for i, k in enumerate(names):
        ax.text(i, rep[k][0] / rep[k][1] + 0.02, f"{rep[k][0]}/{rep[k][1]}", ha="center", fontsize=8)
    ax.set_ylim(0, 1.15)
    ax.set_ylabel("replication rate (fresh n)")
    ax.set_title(f"CT-5 tiny: {data['df_cliffs']} DF-typed of {data['pooled_cliffs']} pooled cliffs")
    fig.tight_layout()
    p = out / "ct5_tiny_replication.png"
    save(fig, p)
    return [p]


# ================================================================================================ experiments
ESTIMATOR = Experiment(
    id="e172.cliff_tiny_estimator",
    title="E172 CT-2 tiny: the tower identity of the fork estimator on the gated tiny model",
    paper=PAPER, claims=ESTIMATOR_CLAIMS, setups=ESTIMATOR_SETUPS, measure=measure_estimator,
    plots=plots_estimator, scale_note=SCALE, parallel_safe=True, quick_budget_s=4, quick_check=QUICK_CHECK,
)
LOCALIZATION = Experiment(
    id="e172.cliff_tiny_localization",
    title="E172 CT-3/CT-4 tiny: cliffs locate and type the planted errors of the gated tiny model",
    paper=PAPER, claims=LOCALIZATION_CLAIMS, setups=LOCALIZATION_SETUPS, measure=measure_localization,
    plots=plots_localization, scale_note=SCALE, parallel_safe=True, quick_budget_s=4, quick_check=QUICK_CHECK,
)
DETERMINISTIC = Experiment(
    id="e172.cliff_tiny_deterministic",
    title="E172 CT-5 tiny: DF-typed cliffs of the gated tiny model do not replicate",
    paper=PAPER, claims=DETERMINISTIC_CLAIMS, setups=DETERMINISTIC_SETUPS, measure=measure_deterministic,
    plots=plots_deterministic, scale_note=SCALE, parallel_safe=True, quick_budget_s=4, quick_check=QUICK_CHECK,
)
