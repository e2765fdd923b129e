"""E172 CT-9: the EOS term of one-token DPO trains "stop here".

A tiny byte-level model is trained from scratch on the planted oracle's traces (it learns the format; how well it
matches the planted rates is the chained-addition gate: a policy that fails it judges nothing, and its values are
kept with "precondition not met"). One-token preference pairs are
built at oracle cliffs on SO/UC error tokens (chosen = a candidate that is not a cliff against V̂_{t−1}, rejected = the
cliff token; ``cliff_1N``). Two copies of the model are trained with identical seeds: EOS masked (agentmill's
default) and unmasked (completions [x, EOS], as TRL's tokenisation does). Metric: per pair, the change in
log π(EOS | c, x_w) from before to after training. Direction [D], size [I].
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate, mean_estimate
from agentmill.experiments.e172_cliff_tokens import PAPER
from agentmill.experiments.protocol import PRECONDITION_NOT_MET, Claim, Experiment, RunContext, unjudged


@dataclass(frozen=True)
class Setup:
    tiny_layers: int = 2
    """Blocks of the tiny policy."""
    tiny_d: int = 64
    """Width of the tiny policy."""
    tiny_steps: int = 200
    """Pre-training steps on oracle samples."""
    tiny_batch: int = 32
    """Pre-training batch."""
    gate_problems: int = 60
    """Held-out problems for the reported chained-addition gate."""
    cliffs: int = 30
    """First cliffs of failing oracle traces that give pairs (SO/UC only)."""
    traces: int = 1000
    """Oracle scans the cliffs come from."""
    beta: float = 0.1
    """DPO β (tiny default [R])."""
    lr: float = 1e-4
    """AdamW learning rate [R]."""
    epochs: int = 3
    """Epochs [R]."""
    batch_size: int = 16
    """Pairs per step [R]."""
    seed: int = 0


SETUPS = {"smoke": Setup(tiny_steps=5, tiny_batch=8, gate_problems=8, cliffs=6, traces=60),
          # quick is a pipeline check (QUICK_CHECK): 60 pre-training steps, a 20-problem gate
          "quick": Setup(tiny_steps=60, gate_problems=20),
          "full": Setup(tiny_layers=3, tiny_d=96, tiny_steps=600, tiny_batch=64, gate_problems=300, cliffs=300,
                        traces=5000)}

QUICK_CHECK = ("quick runs the pipeline only: 30 pairs give 6 optimizer steps, too little training for a claim about "
               "how far the EOS log-probability moves; judged at full (300 cliffs, a 3 x 96 policy)")

CLAIMS = (
    Claim("E172-CT9-unmasked", "With the EOS term (TRL-style [x, EOS] completions) one-token DPO raises "
          "log π(EOS | c, x_w) (mean change, nats).", "[D] direction, [I] size; trl#4481", "—",
          "ct9_unmasked_delta_eos", ">=", 1.0, ci_bound=0.0),
    Claim("E172-CT9-masked", "With EOS masked, log π(EOS | c, x_w) barely moves (mean change within ±0.2 nat).",
          "[D]", "—", "ct9_masked_delta_eos", "in", -0.2, upper=0.2),
)


def tiny_policy(s: Setup, ctx: RunContext) -> tuple[Any, dict[str, Any]]:
    """The pre-trained tiny policy, cached under ``cache_root()/cliff_tokens/`` by its recipe."""
    from agentmill.core.paths import cache_root
    from agentmill.core.records import write_json_atomic
    from agentmill.lm.tiny import TinyLM
    from agentmill.methods.cliff_tokens.planted import tiny_gate, train_chainadd_tiny

    recipe = {"layers": s.tiny_layers, "d": s.tiny_d, "steps": s.tiny_steps, "batch": s.tiny_batch, "seed": s.seed,
              "gate_problems": s.gate_problems, "v": 1}
    key = hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]
    path = cache_root() / "cliff_tokens" / f"tiny-{key}"
    if (path / "card.json").exists():
        try:
            return TinyLM.load(path), json.loads((path / "card.json").read_text())
        except Exception:  # noqa: BLE001 - a broken cache entry is rebuilt
            pass
    lm, losses = train_chainadd_tiny(steps=s.tiny_steps, layers=s.tiny_layers, d=s.tiny_d, batch=s.tiny_batch,
                                     seed=s.seed, progress=lambda i, n: ctx.progress("tiny pre-training", i, n))
    gate = tiny_gate(lm, n_problems=s.gate_problems, n_sampled=min(64, s.gate_problems), seed=s.seed + 1)
    card = {"recipe": recipe, "final_loss": float(np.mean(losses[-10:])), "gate": gate}
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    lm.save(path)
    write_json_atomic(path / "card.json", card)
    return lm, card


def cliff_pairs(s: Setup, ctx: RunContext) -> list[Any]:
    from agentmill.experiments.e172_cliff_tokens.scans import oracle_scans
    from agentmill.methods.cliff_tokens.core import chainadd_verifier
    from agentmill.methods.cliff_tokens.interventions import force_candidates
    from agentmill.methods.cliff_tokens.pairs import build_pairs
    from agentmill.methods.cliff_tokens.planted import ChainAddOracle
    from agentmill.methods.cliff_tokens.potential import PotentialConfig, PotentialEstimator

    recs, _ = oracle_scans(s.traces, 64, s.seed, progress=lambda i, n: ctx.progress("oracle scans", i, n))
    oracle, cl = ChainAddOracle(), []
    for j, r in enumerate(recs):
        if len(cl) >= s.cliffs:
            break
        if r["correct"] or not r["cliffs"] or r["types"][0] not in ("SO", "UC"):
            continue
        c = r["cliffs"][0]
        est = PotentialEstimator(oracle, chainadd_verifier(r["ops"]), PotentialConfig(n=64, seed=s.seed + 9))
        cands = force_candidates(est, r["prompt"], r["trace"], c["pos"], 64, (j,))
        cl.append({"prefix_ids": r["prompt"] + r["trace"][: c["pos"] - 1], "token": c["token_id"],
                   "type": r["types"][0], "k_prev": c["k_prev"], "n_prev": c["n_prev"], "k_curr": c["k_curr"],
                   "n_curr": c["n_curr"], "candidates": cands})
    return build_pairs(cl, strategy="cliff_1N", types=("UC", "SO"))


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    import warnings

    from agentmill.methods.cliff_tokens.dpo import ComputeLedger, DPOConfig, eos_logp, train_dpo

    base, card = tiny_policy(s, ctx)
    pairs = cliff_pairs(s, ctx)
    before = eos_logp(base, pairs)
    res: dict[str, Any] = {}
    for mask in (True, False):
        lm = copy.deepcopy(base)
        ledger = ComputeLedger()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            log = train_dpo(lm, pairs, DPOConfig(beta=s.beta, mask_eos=mask, lr=s.lr, epochs=s.epochs,
                                                 batch_size=s.batch_size, seed=s.seed), ledger)
        after = eos_logp(lm, pairs)
        res["masked" if mask else "unmasked"] = {"delta": (after - before).tolist(), "losses": log["losses"],
                                                 "ledger": ledger.to_dict(),
                                                 "p_eos_after": float(np.mean(np.exp(after)))}
    ctx.data.update({"pairs": len(pairs), "tiny_card": card, "p_eos_before": float(np.mean(np.exp(before))),
                     "results": res, "substrate": f"tiny {s.tiny_layers}x{s.tiny_d} trained {s.tiny_steps} steps "
                     f"on oracle traces (chainadd gate passed: {card['gate']['passed']})",
                     "dpo": asdict(DPOConfig(beta=s.beta, lr=s.lr, epochs=s.epochs, batch_size=s.batch_size))})
    out = {}
    for arm in ("masked", "unmasked"):
        d = res[arm]["delta"]
        out[f"ct9_{arm}_delta_eos"] = mean_estimate(d) if len(d) >= 2 else Estimate.exact(float("nan"))
    out["ct9_pairs"] = Estimate.exact(len(pairs))
    g = card["gate"]
    if not g["passed"] and ctx.profile != "quick":  # quick is a pipeline check whatever the gate says
        # A tiny-model claim needs the chained-addition gate (docs/methods/cliff_tokens.md): with a failed gate
        # the values are kept, the verdict is "precondition not met".
        out = unjudged(out, [c.metric for c in CLAIMS],
                       f"{PRECONDITION_NOT_MET}: the tiny chainadd policy failed its gate (wrong-digit probability "
                       f"DF {g['p_wrong']['DF']:.2f} vs >= 0.99, UC {g['p_wrong']['UC']:.2f} vs 0.60 +- 0.05, SO "
                       f"{g['p_wrong']['SO']:.2f} vs 0.15 +- 0.05; correct-token {g['p_correct_nonsite']:.3f} vs "
                       f">= 0.995; malformed {g['malformed']:.2f} vs <= 0.01)", ctx.data)
    return out


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    from agentmill.experiments.plotting import pyplot, save

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 3))
    r = data["results"]
    ax.boxplot([r["masked"]["delta"], r["unmasked"]["delta"]], tick_labels=["EOS masked", "EOS unmasked"])
    ax.axhline(0, color="k", lw=0.6)
    ax.set_ylabel("Δ log π(EOS | c, x_w) (nats)")
    ax.set_title(f"CT-9: one-token DPO on {data['pairs']} cliff pairs")
    fig.tight_layout()
    p = out / "ct9_eos.png"
    save(fig, p)
    return [p]


EXPERIMENT = Experiment(
    id="e172.cliff_eos_quirk",
    title="E172 CT-9: the EOS term of one-token DPO trains 'stop here' (tiny policy, oracle cliff pairs)",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    scale_note="a tiny byte-level transformer pre-trained on the planted oracle's traces (not Qwen3-0.6B + LoRA); "
               "pairs from oracle cliffs; full fine-tuning, β 0.1, lr 1e-4, 3 epochs, batch 16.",
    parallel_safe=True,
    quick_budget_s=20,
    quick_check=QUICK_CHECK,
)
