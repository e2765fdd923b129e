"""The Cliff-DPO vs full-DPO comparison shared by CT-7 (``dpo_compute``) and CT-8 (``dpo_types``): one pipeline run
per setup, kept as JSON (and the tiny model as safetensors) in CT-7's work dir, content-addressed by the setup, so
whichever of the two runs first pays for it and the other reads it. Not an experiment module (not in ``MODULES``).

Pipeline: the tiny chained-addition model (gate first; the pre-registered orders in turn) → Cliff-DPO detection
(sample traces at T = 1 until ``failing_traces`` fail; scan each, detect, type, force the top-10 candidates at every
cliff) → full DPO's data (``train_problems`` × 4 samples) → for each of ``seeds`` DPO seeds: train every arm from
the same base (one-token pairs of UC+SO, UC, SO, DF cliffs; trajectory pairs), greedy accuracy on ``heldout``
problems, sampled SO-site errors for the SO arm. Compute is counted per arm (``cliff_dpo.DPOLedger``)."""

from __future__ import annotations

import copy
import hashlib
import json
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate, cluster_bootstrap

PIPELINE_VERSION = 1
CT7_ID = "e172.cliff_dpo_compute"
"""The experiment whose work dir keeps the pipeline's results (CT-8 reads them there)."""
ARMS = ("UC+SO", "UC", "SO", "DF")
"""One-token arms by cliff-type subset (CT-8); CT-7's Cliff-DPO arm is UC+SO."""


@dataclass(frozen=True)
class DPOSetup:
    orders: str = "lsd"
    """Written orders tried in turn until one passes the gate (``msd`` = chainadd-v1, ``lsd`` its pre-registered
    fallback; comma-separated)."""
    layers: int = 2
    """Blocks of the tiny model."""
    d: int = 64
    """Width of the tiny model."""
    steps: int = 3600
    """Training steps of the tiny model (3 × the 1,200-step probe whose gate failed; the pre-registered rule)."""
    batch: int = 64
    """Training batch of the tiny model."""
    site_weight: float = 5.0
    """Loss weight of planted-site positions while training the tiny model."""
    balanced_mix: bool = True
    """Train the tiny model on a 1/3-1/3-1/3 problem mix (the target law per prefix is unchanged)."""
    train_if_missing: bool = True
    """Train the tiny model when neither the shipped copy nor the work dir has it (smoke: False, fail fast)."""
    gate_problems: int = 2000
    """Held-out problems of the gate."""
    gate_sampled: int = 400
    """Sampled traces of the gate's malformed-rate check."""
    failing_traces: int = 100
    """Failing traces Cliff-DPO detection scans (the design's 300 cost ~15 min here: README deviation 11)."""
    n: int = 64
    """Rollouts per potential and per forced candidate [P]."""
    top_k: int = 10
    """Candidates forced at each cliff [P]."""
    max_total_len: int = 40
    """Absolute cap on trace tokens (prefix + continuation) for every sample and rollout."""
    train_problems: int = 1000
    """Full DPO's training problems (4 samples each)."""
    samples: int = 4
    """Samples per training problem for full DPO's pairs [R]."""
    heldout: int = 500
    """Held-out problems for greedy accuracy."""
    so_samples: int = 4
    """Sampled traces per held-out problem for the SO-site error rate."""
    seeds: int = 3
    """DPO seeds (pair order) over the one detection and pair set."""
    beta: float = 0.1
    """DPO β (tiny default [R])."""
    lr: float = 1e-4
    """AdamW learning rate of both DPO arms [R]."""
    epochs: int = 3
    """DPO epochs, both arms [R]."""
    dpo_batch: int = 16
    """Pairs per optimizer step, both arms [R]."""
    seed: int = 0
    """Base seed of the model, problems and rollouts."""

    def key(self) -> str:
        blob = json.dumps({"setup": asdict(self), "v": PIPELINE_VERSION}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


SETUPS = {
    # smoke: the shipped model (never trained in a test), toy sizes
    "smoke": DPOSetup(train_if_missing=False, failing_traces=6, n=16, top_k=2, train_problems=16, heldout=16,
                      so_samples=1, seeds=1),
    # quick is a pipeline check (QUICK_CHECK): the full profile's (shipped) model, 8 failing traces at n = 16
    "quick": DPOSetup(failing_traces=6, n=16, top_k=4, train_problems=40, heldout=40, so_samples=1, seeds=1),
    "full": DPOSetup(),
}


def _recipe(s: DPOSetup, order: str):
    from agentmill.methods.cliff_tokens.chainadd import ChainRecipe

    mix = (1 / 3, 1 / 3, 1 / 3) if s.balanced_mix else (0.2, 0.3, 0.5)
    return ChainRecipe(order=order, layers=s.layers, d=s.d, steps=s.steps, batch=s.batch, seed=s.seed,
                       site_weight=s.site_weight, train_mix=mix)


def pipeline(s: DPOSetup, ctx: Any, work: Path) -> dict[str, Any]:
    """The comparison's raw results (JSON-able), computed once per setup under ``work``."""
    from agentmill.core.records import write_json_atomic

    path = work / f"cliff_dpo-{s.key()}.json"
    if path.exists():
        try:
            blob = json.loads(path.read_text())
            if blob.get("version") == PIPELINE_VERSION:
                blob["reused"] = True
                return blob
        except (OSError, ValueError):
            pass
    blob = _run(s, ctx, work)
    blob["version"] = PIPELINE_VERSION
    work.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, blob)
    blob["reused"] = False
    return blob


def _run(s: DPOSetup, ctx: Any, work: Path) -> dict[str, Any]:
    import torch

    from agentmill.methods.cliff_tokens import cliff_dpo as cd
    from agentmill.methods.cliff_tokens.chainadd import (gate_text, grade_chain, obtain_chainadd, sample_problems,
                                                         sample_traces)
    from agentmill.methods.cliff_tokens.dpo import DPOConfig, train_dpo
    from agentmill.methods.cliff_tokens.pairs import build_pairs, pair_counts
    from agentmill.methods.cliff_tokens.planted import prompt_ids

    t_all = time.perf_counter()
    out: dict[str, Any] = {"setup": asdict(s)}
    # 1. the model, gate first ------------------------------------------------------------------------------
    cards = []
    lm = card = None
    for order in [o.strip() for o in s.orders.split(",") if o.strip()]:
        lm, card = obtain_chainadd(_recipe(s, order), work / "models", gate_problems=s.gate_problems,
                                   gate_sampled=s.gate_sampled, train=s.train_if_missing,
                                   progress=lambda i, n: ctx.progress(f"tiny chainadd-{order}", i, n))
        cards.append(card)
        if card["gate"]["passed"]:
            break
    assert lm is not None and card is not None
    order = card["recipe"]["order"]
    out.update({"cards": cards, "order": order, "gate": card["gate"], "gate_text": gate_text(card["gate"]),
                "model": {"source": card.get("source"), "weights_sha256": card.get("weights_sha256"),
                          "recipe": card["recipe"], "train_s": card.get("train_s"), "final_loss": card.get("final_loss")},
                "substrate": f"tiny chainadd-{order} {s.layers}x{s.d} ({card['n_params']} parameters), trained "
                             f"{s.steps} steps from scratch; {gate_text(card['gate'])}"})
    rng = np.random.default_rng([s.seed, 7172])
    gen = torch.Generator().manual_seed(s.seed * 7919 + 172)
    # 2. Cliff-DPO detection ----------------------------------------------------------------------------------
    t0 = time.perf_counter()
    det = {"generated": 0, "prefill": 0}
    traces: list[dict[str, Any]] = []
    sampled = 0
    while len(traces) < s.failing_traces:
        probs = sample_problems(rng, min(256, 4 * s.failing_traces + 16))
        tr, g = sample_traces(lm, [prompt_ids(o) for o in probs], gen, max_new=s.max_total_len)
        det["generated"] += g
        det["prefill"] += sum(len(prompt_ids(o)) for o in probs)
        for ops, t in zip(probs, tr):
            sampled += 1
            if grade_chain(cd.trace_text(t), ops, order) or len(traces) >= s.failing_traces:
                continue
            res = cd.cliffs_of_trace(lm, prompt_ids(ops), t, gen, order=order, n=s.n, top_k=s.top_k,
                                     max_total_len=s.max_total_len)
            for k in det:
                det[k] += res["cost"][k]
            traces.append({"ops": list(ops), "trace": list(t), "k": res["k"], "n": res["n"],
                           "expected_false": res["expected_false"],
                           "cliffs": [{k: v for k, v in c.items()} for c in res["cliffs"]]})
            ctx.progress("cliff detection", len(traces), s.failing_traces)
    det_wall = time.perf_counter() - t0
    cliffs = [c for tr in traces for c in tr["cliffs"]]
    out["detection"] = {"traces_sampled": sampled, "failing_traces": len(traces), "cliffs": len(cliffs),
                        "types": {t: sum(c["type"] == t for c in cliffs) for t in ("DF", "UC", "SO", "other")},
                        "traces_with_cliff": sum(bool(tr["cliffs"]) for tr in traces),
                        "expected_false": float(sum(tr["expected_false"] for tr in traces)),
                        "cost": det, "wall_s": det_wall}
    out["traces"] = traces[:40]  # a sample for plots and reading; the cliffs themselves are all below
    out["cliffs"] = [{k: v for k, v in c.items() if k != "prefix_ids"} for c in cliffs]
    pairs_by = {arm: build_pairs(cliffs, strategy="cliff_1N", types=tuple(arm.split("+"))) for arm in ARMS}
    out["pairs"] = {arm: len(p) for arm, p in pairs_by.items()}
    out["pair_types"] = pair_counts(pairs_by["UC+SO"])
    # 3. full DPO's data ---------------------------------------------------------------------------------------
    t0 = time.perf_counter()
    train = sample_problems(rng, s.train_problems)
    tpairs, tcost = cd.trajectory_pairs(lm, train, gen, order=order, samples=s.samples,
                                          max_total_len=s.max_total_len)
    out["full_data"] = {"problems": len(train), "pairs": len(tpairs), "cost": tcost,
                        "wall_s": time.perf_counter() - t0}
    # 4. held-out evaluation of the base ----------------------------------------------------------------------
    held = sample_problems(np.random.default_rng([s.seed, 9172]), s.heldout)
    base_correct = cd.greedy_correct(lm, held, order=order, max_total_len=s.max_total_len)
    so_gen = torch.Generator().manual_seed(s.seed + 4242)
    base_so = cd.so_site_errors(lm, held, so_gen, order=order, samples=s.so_samples,
                                max_total_len=s.max_total_len)
    out["heldout"] = {"problems": len(held), "base_correct": base_correct.astype(int).tolist(),
                      "base_so": base_so.tolist()}
    # 5. the arms, per DPO seed --------------------------------------------------------------------------------
    # Both trainers run on one torch thread (the trajectory trainer sets it; ``train_dpo`` is wrapped below) and
    # after one throwaway forward + backward, so neither arm's wall time carries torch's first-call start-up.
    n_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    warm = copy.deepcopy(lm.model).train()
    warm(torch.tensor([prompt_ids(held[0])]))[0].sum().backward()
    del warm
    runs: list[dict[str, Any]] = []
    for seed in range(s.seeds):
        cfg = DPOConfig(beta=s.beta, lr=s.lr, epochs=s.epochs, batch_size=s.dpo_batch, seed=s.seed * 100 + seed)
        for arm in (*ARMS, "full"):
            ledger = cd.DPOLedger()
            if arm == "full":
                ledger.detection_generated, ledger.detection_forward = tcost["generated"], tcost["prefill"]
                ledger.wall["detection"] = out["full_data"]["wall_s"]
                pairs = tpairs
            else:
                ledger.detection_generated, ledger.detection_forward = det["generated"], det["prefill"]
                ledger.wall["detection"] = det_wall
                pairs = pairs_by[arm]
            rec: dict[str, Any] = {"seed": seed, "arm": arm, "pairs": len(pairs)}
            if len(pairs) < 2 or (arm == "DF" and len(pairs) < 10):
                rec["trained"] = False
                rec["ledger"] = ledger.to_dict()
                runs.append(rec)
                continue
            pol = copy.deepcopy(lm)
            if arm == "full":
                log = cd.train_trajectory_dpo(pol, tpairs, cfg, ledger)
            else:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    log = train_dpo(pol, pairs, cfg, ledger)
                ledger.reference_forward += ledger.train_forward_tokens  # the reference re-runs every step
            ctx.progress("DPO arms", seed * (len(ARMS) + 1) + (ARMS + ("full",)).index(arm) + 1,
                         s.seeds * (len(ARMS) + 1))
            rec.update({"trained": True, "steps": log["steps"], "loss_first": log["losses"][0],
                        "loss_last": float(np.mean(log["losses"][-3:])), "ledger": ledger.to_dict(),
                        "correct": cd.greedy_correct(pol, held, order=order,
                                                           max_total_len=s.max_total_len).astype(int).tolist()})
            if arm == "SO":
                rec["so"] = cd.so_site_errors(pol, held, torch.Generator().manual_seed(s.seed + 4242), order=order,
                                              samples=s.so_samples, max_total_len=s.max_total_len).tolist()
            runs.append(rec)
    torch.set_num_threads(n_threads)
    out["runs"] = runs
    out["wall_s"] = time.perf_counter() - t_all
    return out


# ------------------------------------------------------------------------------------ reading the results
def arm_runs(blob: dict[str, Any], arm: str) -> list[dict[str, Any]]:
    return [r for r in blob["runs"] if r["arm"] == arm and r.get("trained")]


def gain_rows(blob: dict[str, Any], arm: str) -> np.ndarray | None:
    """Per held-out problem: correct after training (mean over DPO seeds) minus correct before."""
    runs = arm_runs(blob, arm)
    if not runs:
        return None
    base = np.asarray(blob["heldout"]["base_correct"], float)
    return np.mean([np.asarray(r["correct"], float) for r in runs], 0) - base


def paired_estimate(a: np.ndarray, b: np.ndarray | None, stat: str, *, level: float = 0.95, n_boot: int = 2000
                    ) -> Estimate:
    """Cluster bootstrap over held-out problems of mean(a), mean(a) − mean(b) or mean(a) / mean(b)."""
    def f(rows: np.ndarray) -> float:
        ma = float(a[rows].mean())
        if stat == "mean":
            return ma
        mb = float(b[rows].mean())  # type: ignore[index]
        if stat == "diff":
            return ma - mb
        return ma / mb if mb != 0 else float("nan")
    return cluster_bootstrap(f, np.arange(len(a)), n_boot=n_boot, level=level, seed=172)


def summary(blob: dict[str, Any]) -> dict[str, Any]:
    """What a reader of the record needs: substrate and gate, detection counts, pairs, ledgers, accuracies."""
    base = float(np.mean(blob["heldout"]["base_correct"]))
    acc = {}
    for arm in ("UC+SO", "UC", "SO", "DF", "full"):
        runs = arm_runs(blob, arm)
        acc[arm] = [float(np.mean(r["correct"])) for r in runs]
    ledgers = {}
    for arm in ("UC+SO", "UC", "SO", "DF", "full"):
        rs = [r for r in blob["runs"] if r["arm"] == arm]
        if rs:
            ledgers[arm] = rs[0]["ledger"]
    return {"substrate": blob["substrate"], "gate": blob["gate"], "model": blob.get("model"), "gate_cards": [c["gate"] for c in blob["cards"]],
            "order": blob["order"], "detection": blob["detection"], "pairs": blob["pairs"],
            "pair_types": blob["pair_types"], "full_data": blob["full_data"], "base_accuracy": base,
            "accuracy_after": acc, "ledgers": ledgers, "pipeline_wall_s": blob["wall_s"],
            "pipeline_reused": blob.get("reused", False),
            "runs": [{k: v for k, v in r.items() if k not in ("correct", "so")} for r in blob["runs"]],
            "gains": {arm: [a - base for a in acc[arm]] for arm in acc}}
