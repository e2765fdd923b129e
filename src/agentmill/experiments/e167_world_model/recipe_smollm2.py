"""E167 W-4: the recipe ranks the same on a pretrained LM (SmolLM2-135M-Instruct + LoRA), gates first.

Full profile: LoRA-SFT of SmolLM2 on KeyDoor next-state examples (``history_k = 2``, bf16 autocast, the one LoRA loop)
is the gate arm: G-WM1 (strict parse ≥ 0.9), G-WM2 (field-F1 on changed transitions of held-out episodes of the
training layouts ≥ copy-previous + 0.10), G-WM3 (the same on unseen ``dev`` layouts), measured with greedy decoding
and stored in the adapter's card. If a gate fails, both claims are "inconclusive: precondition not met" and the
zero-shot (one-shot demo) and SFT field-F1 on the test items are reported without verdict. If every gate passes, the
LoRA-CPT→SFT arm is trained and the claims are judged: SFT − zero-shot ≥ 0.15 and CPT→SFT − SFT ≥ 0.02 (paired per
test item, layout bootstrap).

Quick and smoke run the same flow on a ``tiny:`` byte model stand-in (a few SFT/CPT steps; never SmolLM2) and judge
nothing.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentmill.core.stats import Estimate
from agentmill.experiments.e167_world_model import PAPER
from agentmill.experiments.e167_world_model.stages import mean_ci, paired, wm_config
from agentmill.experiments.protocol import PRECONDITION_NOT_MET, Claim, Experiment, RunContext

STAND_IN = "tiny:new?layers=1&d=32&heads=2&max_len=2048 (byte stand-in, a few steps; no verdict)"


@dataclass(frozen=True)
class Setup:
    pipeline: str = "full"
    """Which cached KeyDoor transition table (smoke / quick / full pipeline config): 40 train, 160 CPT, 10 dev and
    30 test layouts at full."""
    wm: str = "hf:smollm2"
    """The world-model arm: ``hf:smollm2`` (LoRA arms) or the ``tiny:`` stand-in of quick and smoke."""
    n_sft: int = 40
    """SFT examples (a seeded sample of the train split's transitions) [R: 300 in the recipe; LoRA training measured
    13–25 tokens/s here (fp32, one thread of a loaded AVX2 core), so 40 examples ≈ 15k tokens ≈ 10–19 min]."""
    epochs: float = 1.0
    """Passes over the SFT examples."""
    lr: float = 1e-3
    """LoRA peak learning rate [R: few optimiser steps, so the high end of the usual LoRA range]."""
    micro_batch: int = 1
    """Examples per forward pass (1: no padding tokens to pay for)."""
    grad_accum: int = 4
    """Micro-batches per optimiser step (effective batch 4: 10 optimiser steps on 40 examples)."""
    dtype: str = "fp32"
    """LoRA training precision [R: the recipe's row asks bf16 autocast; on this AVX2-only host one bf16 step did not
    finish in > 3 min where fp32 took 17 s (package README deviation 34)]."""
    cpt_tokens: int = 12_288
    """Continual pre-training tokens (whole CPT-split episodes, packed) [R: 60k in the recipe, scaled]."""
    cpt_seq: int = 256
    """CPT window in tokens."""
    n_gate: int = 12
    """Changed transitions per gate set (seen layouts, unseen layouts)."""
    n_test: int = 32
    """Test transitions (half changed) scored for every arm [R: 150 in the recipe, scaled to the decode budget]."""
    max_new: int = 112
    """Greedy new-token cap (SFT targets are 84 SmolLM2 tokens on average, 106 at most in a 60-example sample)."""
    tiny_steps: int = 3
    """Stand-in only: SFT (and CPT) steps of the tiny model."""
    n_boot: int = 10_000
    """Bootstrap resamples (layouts are the clusters)."""
    seed: int = 0
    """Sampling, LoRA initialisation and example order."""


SETUPS = {"smoke": Setup(pipeline="smoke", wm=STAND_IN, n_sft=4, n_gate=2, n_test=4, max_new=16, tiny_steps=2,
                         n_boot=200),
          "quick": Setup(pipeline="quick", wm=STAND_IN, n_sft=4, n_gate=2, n_test=4, max_new=16, tiny_steps=2,
                         n_boot=500),
          "full": Setup()}

CLAIMS = (
    Claim("E167-W4-sft", "On a pretrained LM, LoRA-SFT on next-state prediction beats the same LM prompted with one "
          "demonstration (Δ field-F1 on held-out test transitions).", "[P] the recipe on a pretrained model",
          "— (no small-model number public)", "w4_sft_minus_zeroshot", ">=", 0.15, ci_bound=0.0),
    Claim("E167-W4-cpt", "On a pretrained LM, LoRA continual pre-training on transitions before LoRA-SFT beats "
          "LoRA-SFT alone (Δ field-F1).", "[P] CPT injects dynamics", "— (no small-model number public)",
          "w4_cptsft_minus_sft", ">=", 0.02, ci_bound=0.0),
)


def _cached(path: Path, fn) -> Any:
    """JSON-cached result of ``fn()`` in the run's work dir, so a killed run resumes after its finished arms."""
    if path.exists():
        return json.loads(path.read_text())
    out = fn()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(out))
    os.replace(tmp, path)
    return out


def _items(s: Setup) -> dict[str, Any]:
    from agentmill.methods.world_model import lora_arm as LA
    from agentmill.methods.world_model import pipeline as P
    from agentmill.methods.world_model.data import build_examples
    from agentmill.methods.world_model.domain import KeyDoorDomain

    cfg = wm_config(s.pipeline)
    table = P.data(cfg)
    dom = KeyDoorDomain()
    train = build_examples(table.split("train"), LA.LM_FMT, dom, seed=cfg.seed)
    sft = LA.sample(train, s.n_sft, s.seed, label="sft")
    seen, unseen = LA.gate_sets(table, sft, s.n_gate, s.seed)
    test = LA.balanced(build_examples(table.split("test"), LA.LM_FMT, dom, seed=cfg.seed), s.n_test, s.seed,
                       label="test")
    demo = next(e for e in train if e.changed and e not in sft)
    return {"cfg": cfg, "table": table, "sft": sft, "seen": seen, "unseen": unseen, "test": test, "demo": demo}


def _eval(lm: Any, prompts: list[str], exs: list[Any], s: Setup, ctx: RunContext, what: str) -> list[dict]:
    """Greedy predictions of ``lm`` scored per item; cached in the work dir under a key of the model, the prompts
    and the decode cap."""
    import hashlib

    from agentmill.methods.world_model import lora_arm as LA

    key = hashlib.sha256(json.dumps([getattr(lm, "spec", ""), prompts, s.max_new]).encode()).hexdigest()[:12]

    def run() -> list[dict]:
        t0 = time.perf_counter()
        texts = LA.predict(lm, prompts, max_new=s.max_new,
                           progress=lambda d, n: ctx.progress(f"W-4 decode {what}", d, n))
        rows = LA.score(exs, texts)
        ctx.data.setdefault("decode_seconds", {})[what] = round(time.perf_counter() - t0, 1)
        return rows

    return _cached(ctx.work_dir / f"w4_{what}-{key}.json", run)


def _arms_tiny(s: Setup, it: dict[str, Any], ctx: RunContext) -> dict[str, Any]:
    """The stand-in: a 1-layer byte model, untrained (zero-shot), after a few SFT steps, after CPT then SFT."""
    import copy

    from agentmill.methods.world_model import pipeline as P
    from agentmill.methods.world_model.data import KEYDOOR_MANUAL, cpt_documents
    from agentmill.methods.world_model.train import StageConfig, new_model, train_cpt, train_sft

    fresh = new_model(1, 32, 2, 2048, s.seed, None)
    sft = copy.deepcopy(fresh)
    sft_loss = train_sft(sft, it["sft"], StageConfig(steps=s.tiny_steps, batch=2, seq_len=2048, lr=3e-3, seed=s.seed))
    cpt = copy.deepcopy(fresh)
    docs = cpt_documents(it["table"].split("cpt"), P.FMT, KEYDOOR_MANUAL)
    train_cpt(cpt, docs, StageConfig(steps=s.tiny_steps, batch=2, seq_len=256, lr=3e-3, seed=s.seed))
    train_sft(cpt, it["sft"], StageConfig(steps=s.tiny_steps, batch=2, seq_len=2048, lr=3e-3, seed=s.seed))
    ctx.data["training"] = {"sft_losses": sft_loss}
    return {"zero_shot": fresh, "sft": sft, "cpt_sft": cpt}


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    from agentmill.lm import finetune
    from agentmill.methods.world_model import lora_arm as LA

    it = _items(s)
    test, zs_prompts = it["test"], [LA.one_shot(e.prompt, it["demo"]) for e in it["test"]]
    gate_exs = it["seen"] + it["unseen"]
    ctx.data.update(n_sft=len(it["sft"]), n_gate_seen=len(it["seen"]), n_gate_unseen=len(it["unseen"]),
                    n_test=len(test), wm=s.wm)
    rows: dict[str, list[dict]] = {}
    if s.wm.startswith("tiny:"):
        arms = _arms_tiny(s, it, ctx)
        g = LA.score(gate_exs, LA.predict(arms["sft"], [e.prompt for e in gate_exs], max_new=s.max_new))
        report = LA.gates(g[:len(it["seen"])], g[len(it["seen"]):])
        rows["sft"] = LA.score(test, LA.predict(arms["sft"], [e.prompt for e in test], max_new=s.max_new))
        rows["zero_shot"] = LA.score(test, LA.predict(arms["zero_shot"], zs_prompts, max_new=s.max_new))
        rows["cpt_sft"] = LA.score(test, LA.predict(arms["cpt_sft"], [e.prompt for e in test], max_new=s.max_new))
        passed = True  # the stand-in judges nothing: its gate numbers are recorded, they gate no verdict
    elif s.wm == "hf:smollm2":
        base = LA.load_base()
        tok = base.tokenizer
        del base

        def encode(text: str) -> list[int]:
            return list(tok(text)["input_ids"])

        cfg = finetune.TrainCfg(lr=s.lr, epochs=s.epochs, micro_batch=s.micro_batch, grad_accum=s.grad_accum,
                                seed=s.seed, dtype=s.dtype)  # type: ignore[arg-type]
        sft_dir, trained = LA.train_adapter(
            "wm-sft", LA.sft_examples(encode, it["sft"]), cfg,
            progress=lambda p: ctx.progress("W-4 LoRA-SFT", p["step"], p["steps"]))
        ctx.read_artefact(sft_dir / finetune.ADAPTER_FILE)
        ctx.data["sft_adapter"] = {"dir": sft_dir.name, "trained_now": trained, **_card_summary(sft_dir)}

        lm = LA.load_arm([sft_dir])
        g = _eval(lm, [e.prompt for e in gate_exs], gate_exs, s, ctx, "gates_sft")
        report = LA.gates(g[:len(it["seen"])], g[len(it["seen"]):])
        finetune.record_validation(sft_dir, report)
        rows["sft"] = _eval(lm, [e.prompt for e in test], test, s, ctx, "test_sft")
        del lm
        lm = LA.load_arm([])
        rows["zero_shot"] = _eval(lm, zs_prompts, test, s, ctx, "test_zero_shot")
        del lm
        passed = finetune.all_passed(report)
        if passed:
            from agentmill.methods.world_model.data import KEYDOOR_MANUAL, cpt_documents

            docs = cpt_documents(it["table"].split("cpt"), LA.LM_FMT, KEYDOOR_MANUAL)
            cpt_dir, _ = LA.train_adapter(
                "wm-cpt", LA.cpt_windows(encode, docs, seq=s.cpt_seq, tokens=s.cpt_tokens, seed=s.seed), cfg,
                progress=lambda p: ctx.progress("W-4 LoRA-CPT", p["step"], p["steps"]))
            cs_dir, _ = LA.train_adapter(
                "wm-cpt-sft", LA.sft_examples(encode, it["sft"]), cfg, init=[cpt_dir],
                progress=lambda p: ctx.progress("W-4 LoRA-CPT→SFT", p["step"], p["steps"]))
            ctx.read_artefact(cpt_dir / finetune.ADAPTER_FILE, cs_dir / finetune.ADAPTER_FILE)
            ctx.data["cpt_adapter"] = {"dir": cpt_dir.name, **_card_summary(cpt_dir)}
            ctx.data["cpt_sft_adapter"] = {"dir": cs_dir.name, **_card_summary(cs_dir)}
            lm = LA.load_arm([cpt_dir, cs_dir])
            rows["cpt_sft"] = _eval(lm, [e.prompt for e in test], test, s, ctx, "test_cpt_sft")
            del lm
    else:
        raise ValueError(f"wm must be hf:smollm2 or a tiny: stand-in, got {s.wm!r}")

    ctx.data["gates"] = report.to_dict()["gates"]
    ctx.data["gates_passed"] = passed
    clusters = [r["task_id"] for r in rows["sft"]]
    out: dict[str, Estimate] = {}
    for arm, r in rows.items():
        out[f"f1_{arm}"] = mean_ci([x["f1"] for x in r], clusters, n_boot=s.n_boot, seed=s.seed)
        out[f"parse_{arm}"] = mean_ci([float(x["parse"]) for x in r], clusters, n_boot=s.n_boot, seed=s.seed)
    out["f1_copy_previous"] = mean_ci([x["copy_f1"] for x in rows["sft"]], clusters, n_boot=s.n_boot, seed=s.seed)
    for gate in report.gates:
        out[f"gate_{gate.id.lower().replace('-', '_')}"] = Estimate.exact(float(gate.value), n=int(
            gate.detail.get("n", 0) or 0))
    ctx.data["arms"] = {arm: {"f1_changed": _mean([x["f1"] for x in r if x["changed"]]),
                              "f1_unchanged": _mean([x["f1"] for x in r if not x["changed"]])}
                        for arm, r in rows.items()}
    ctx.data["examples"] = {arm: [x["text"] for x in r[:3]] for arm, r in rows.items()}
    if not passed:
        failed = [f"{g.id} {g.value} (threshold {g.threshold})" for g in report.gates if not g.passed]
        ctx.data["precondition"] = (f"{PRECONDITION_NOT_MET}: the SmolLM2 LoRA-SFT adapter failed "
                                    f"{', '.join(failed)}; zero-shot and SFT F1 reported without verdict")
        return out
    out["w4_sft_minus_zeroshot"] = paired([x["f1"] for x in rows["sft"]], [x["f1"] for x in rows["zero_shot"]],
                                          clusters, n_boot=s.n_boot, seed=s.seed)
    out["w4_cptsft_minus_sft"] = paired([x["f1"] for x in rows["cpt_sft"]], [x["f1"] for x in rows["sft"]],
                                        clusters, n_boot=s.n_boot, seed=s.seed)
    return out


def _mean(xs: list[float]) -> float | None:
    return round(sum(xs) / len(xs), 4) if xs else None


def _card_summary(d: Path) -> dict[str, Any]:
    from agentmill.lm.finetune import read_card

    c = read_card(d)
    return {k: c.get(k) for k in ("n_examples", "steps", "tokens", "seconds", "tokens_per_second", "threads")} | {
        "final_loss": (c.get("losses") or [None])[-1], "first_loss": (c.get("losses") or [None])[0]}


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = data.get("arms") or {}
    if not arms:
        return []
    fig, ax = plt.subplots(figsize=(5.5, 3.2))
    names = list(arms)
    for k, (key, label) in enumerate((("f1_changed", "changed"), ("f1_unchanged", "unchanged"))):
        ax.bar([i + 0.38 * k for i in range(len(names))], [arms[a][key] or 0.0 for a in names], 0.38, label=label)
    ax.set_xticks([i + 0.19 for i in range(len(names))], names)
    ax.set_ylabel("field-F1 (test)")
    gates = ", ".join(f"{g['id']} {g['value']}{'✓' if g['passed'] else '✗'}" for g in data.get("gates", []))
    ax.set_title(f"W-4 ({data.get('wm', '')[:24]}): {gates}", fontsize=7)
    ax.legend(fontsize=7)
    fig.tight_layout()
    out.mkdir(parents=True, exist_ok=True)
    path = out / "w4_arms.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return [path]


EXPERIMENT = Experiment(
    id="e167.wm_recipe_smollm2",
    quick_budget_s=5,
    title="E167 W-4: the world-model recipe on a pretrained LM (SmolLM2 + LoRA), validation gates first",
    paper=PAPER,
    requires=frozenset({"hf"}),
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    quick_check="quick runs the flow on a tiny byte stand-in for seconds (never SmolLM2); the verdict is the full "
                "profile's, after the SmolLM2 adapter's gates",
    scale_note="SmolLM2-135M-Instruct (fp32 LoRA r 16 on the seven projections, CPU, one thread; the recipe's row "
               "asks bf16 autocast, far slower on this AVX2 host) on KeyDoor (3 rooms, 1 lock; card on, history_k = "
               "2): LoRA-SFT on 40 examples, one epoch (10 steps × 4; the recipe's row says 300), LoRA-CPT on 12k "
               "tokens (60k in the recipe) merged before the SFT LoRA; gates on 12 + 12 changed transitions; 32 test "
               "transitions (150 in the recipe), greedy, 1 seed. The "
               "paper trains 35B/397B MoE models on > 10M trajectories.",
)
