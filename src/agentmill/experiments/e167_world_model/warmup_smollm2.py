"""E167 U-2: world-model warm-up transfers to acting on a pretrained LM (SmolLM2 + LoRA), gates first.

The warm-up arm is W-4's SmolLM2 LoRA-SFT adapter (``e167.wm_recipe_smollm2``, the same examples and
hyper-parameters, hence the same content address), and its gates are the ones W-4 stored in the adapter's card:
G-WM1–3. If that adapter is missing, not validated, or failed a gate, U-2 is "inconclusive: precondition not met"
and no behaviour cloning is trained. Behaviour cloning on a validated adapter (arms none / wm / shuffled, next-action
accuracy on expert states) is not built in this version: such a run says so and judges nothing.

Quick and smoke only check the admission logic on the W-4 setup of their profile (no model is loaded); nothing is
judged there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agentmill.core.stats import Estimate
from agentmill.experiments.e167_world_model import PAPER
from agentmill.experiments.e167_world_model.stages import wm_config
from agentmill.experiments.protocol import PRECONDITION_NOT_MET, Claim, Experiment, RunContext


@dataclass(frozen=True)
class Setup:
    wm: str = "hf:smollm2"
    """The pretrained base of the warm-up and BC arms; anything else is a plan-only run (quick, smoke)."""
    pipeline: str = "full"
    """W-4's KeyDoor transition table (the warm-up adapter's data); the fields below repeat W-4's full setup, so the
    content address is W-4's adapter (a test checks they agree)."""
    n_sft: int = 40
    """W-4's SFT examples."""
    epochs: float = 1.0
    """W-4's passes over them."""
    lr: float = 1e-3
    """W-4's LoRA learning rate."""
    micro_batch: int = 1
    """W-4's micro-batch."""
    grad_accum: int = 4
    """W-4's gradient accumulation."""
    dtype: str = "fp32"
    """W-4's training precision."""
    seed: int = 0
    """W-4's seed."""


SETUPS = {"smoke": Setup(wm="none (admission check only)", pipeline="smoke"),
          "quick": Setup(wm="none (admission check only)", pipeline="quick"),
          "full": Setup()}

CLAIMS = (
    Claim("E167-U2", "On a pretrained LM, a world-model warm-up before behaviour cloning raises held-out next-action "
          "accuracy over behaviour cloning alone.", "[P] world-model training as warm-up",
          "— (no small-model number public)", "u2_wm_minus_none", ">=", 0.03, ci_bound=0.0),
)


def warmup_adapter(w4: Any) -> Any:
    """The W-4 SFT adapter's directory for the recipe fields of ``w4`` (computed from its examples; nothing
    trained)."""
    from agentmill.lm import finetune
    from agentmill.methods.world_model import lora_arm as LA
    from agentmill.methods.world_model import pipeline as P
    from agentmill.methods.world_model.data import build_examples
    from agentmill.methods.world_model.domain import KeyDoorDomain

    cfg = wm_config(w4.pipeline)
    train = build_examples(P.data(cfg).split("train"), LA.LM_FMT, KeyDoorDomain(), seed=cfg.seed)
    sft = LA.sample(train, w4.n_sft, w4.seed, label="sft")
    tok = LA.load_base().tokenizer
    exs = LA.sft_examples(lambda t: list(tok(t)["input_ids"]), sft)
    tcfg = finetune.TrainCfg(lr=w4.lr, epochs=w4.epochs, micro_batch=w4.micro_batch, grad_accum=w4.grad_accum,
                             seed=w4.seed, dtype=w4.dtype)
    return LA.adapter_dir("wm-sft", exs, tcfg)


def admission(adapter: Any) -> tuple[bool, str, list[dict[str, Any]]]:
    """(admitted, reason, gates) from the adapter's card: a missing adapter or card is refused too."""
    from agentmill.lm import finetune

    if not (adapter / finetune.CARD_FILE).exists():
        return False, (f"{PRECONDITION_NOT_MET}: the W-4 warm-up adapter {adapter.name} does not exist; run "
                       "e167.wm_recipe_smollm2 --profile full first"), []
    adm = finetune.validated_adapter(adapter)
    gates = (finetune.read_card(adapter).get("validation") or {}).get("gates", [])
    if adm.ok:
        return True, adm.reason, gates
    shown = "; ".join(f"{g['id']} {g['value']} (threshold {g['threshold']})" for g in gates if not g["passed"])
    return False, f"{adm.reason} on the W-4 warm-up adapter {adapter.name}" + (f": {shown}" if shown else ""), gates


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    if not s.wm.startswith("hf:"):
        ctx.data["plan_only"] = ("U-2 runs on hf:smollm2 at full only; at this profile W-4 uses a tiny stand-in "
                                 "with no adapter to admit")
        return {}
    adapter = warmup_adapter(s)
    ok, reason, gates = admission(adapter)
    ctx.data.update(adapter=adapter.name, gates=gates, admitted=ok)
    out = {f"gate_{g['id'].lower().replace('-', '_')}": Estimate.exact(float(g["value"]), n=int(
        (g.get("detail") or {}).get("n", 0) or 0)) for g in gates}
    if not ok:
        ctx.data["precondition"] = reason + "; no behaviour cloning was trained"
        return out
    ctx.data["plan_only"] = ("the warm-up adapter passed its gates, but the behaviour-cloning arms of U-2 are not "
                             "built in this version")
    return out


EXPERIMENT = Experiment(
    id="e167.wm_warmup_smollm2",
    quick_budget_s=1,
    title="E167 U-2: world-model warm-up before behaviour cloning on a pretrained LM (SmolLM2 + LoRA), gates first",
    paper=PAPER,
    requires=frozenset({"hf"}),
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    quick_check="U-2 is full only (SmolLM2); quick checks nothing but the plan",
    scale_note="SmolLM2-135M-Instruct; the warm-up is W-4's LoRA-SFT adapter (40 KeyDoor world-model examples, 10 "
               "steps, fp32 on CPU) and its gates G-WM1–3; behaviour cloning runs only on an adapter that passed "
               "them (the BC arms are not built in this version).",
)
