"""E165 G-10 (optional, no verdict): GRPO vs GiGPO vs G2PO-style training an LM policy with LoRA [R].

The LM arm of ``g2po.train_compare``: one SmolLM2-135M-Instruct ``CandidatePolicy`` with a fresh LoRA (r 8, α 16,
q/v; AdamW lr 1e-4 [R]) per estimator (``policy_factory = policy.reset``: same initial weights, same task
order, same rollout seeds), 1 seed, 10 iterations on tiny KeyDoor training layouts, then the sampled-policy success
of each arm on held-out layouts. One seed and a 135M model on a CPU cannot separate the arms: the project makes this a
smoke test of the LM training path and registers its claim as not judged by design (the claim's metric is never
recorded under its judged name: the numbers are ``*_observed``, through ``protocol.unjudged``). G2PO here is
G2PO-style (reconstructed) [R].

Each estimator is trained by its own ``train_compare`` call (identical seeds, so the arms still see common random
numbers at iteration 0) because ``train_compare`` keeps no per-arm weights, and the held-out evaluation must happen
before the next arm resets the shared LoRA.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.seeding import derive_seed
from agentmill.core.stats import Estimate, proportion_estimate
from agentmill.envs.keydoor import TINY_WORLD, KeyDoorEnv, layouts
from agentmill.envs.rollout import collect_groups
from agentmill.experiments.e165_g2po import PAPER
from agentmill.experiments.e165_g2po.advantage_scoring import ESTIMATORS
from agentmill.experiments.e165_g2po.keydoor_groups import KEY
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, Experiment, RunContext, models_read, unjudged
from agentmill.lm.candidate_pair import build_pair
from agentmill.methods.g2po.train import train_compare


@dataclass(frozen=True)
class Setup:
    model: str = "hf:smollm2"
    """``hf:NAME`` (LoRA on the policy side of an HFPair) or ``tiny:SPEC`` (every weight trained)."""
    temperature: float = 1.0
    """Candidate-softmax temperature."""
    one_shot: bool = True
    """One-shot example in the prompt (SmolLM2 needs it)."""
    n_train_layouts: int = 8
    """Tiny KeyDoor training layouts (3 rooms, 1 lock, trap)."""
    n_test_layouts: int = 8
    """Held-out layouts (seeds from 1000)."""
    iterations: int = 10
    """Training iterations per arm (10 [R])."""
    group_size: int = 8
    """Rollouts per group (N = 8)."""
    tasks_per_iter: int = 1
    """Groups per iteration [R]. A SmolLM2 training row costs ~2.5 s on one CPU thread (decision 0.3-0.8 s, autograd
    step ~1.9 s; measured 2026-11-25), so 3 arms × 10 × 1 × 8 rollouts × ≤ 12 steps ≈ 1.5-2 h; the planned 45 min
    assumes a lent GPU."""
    max_steps: int = 12
    """Steps per rollout."""
    lr: float = 1e-4
    """AdamW step size (1e-4 [R], as ``lm.policy.LoRACandidatePolicy``)."""
    eval_episodes: int = 16
    """Sampled-policy evaluation episodes on the training layouts (train_compare's curve: start and end)."""
    heldout_rollouts: int = 4
    """Rollouts per held-out layout after training."""
    seed: int = 0
    """The one seed (1 seed [R])."""


SETUPS = {
    "smoke": Setup(model="tiny:new?d=16&layers=1&heads=2&max_len=1024&seed=1", temperature=100.0, one_shot=False,
                   n_train_layouts=1, n_test_layouts=1, iterations=1, group_size=2, tasks_per_iter=1, max_steps=4,
                   lr=1e-3, eval_episodes=2, heldout_rollouts=2),
    # G-10 is never judged (a smoke test of LoRA training by design); quick trains 5 iterations × 4 held-out layouts
    # (issue 24: 10 × 8 took 101 s of the main job on a 2-core AVX2 EPYC, 2026-11-28); full keeps the planned 10
    "quick": Setup(model="tiny:new?d=32&max_len=1024&seed=1", temperature=100.0, one_shot=False, lr=3e-3,
                   max_steps=20, iterations=5, n_test_layouts=4),
    "full": Setup(),
}

CLAIMS = (
    Claim("G-10", "(Optional smoke, no verdict by design) With SmolLM2 + LoRA, G2PO-style training reaches at least "
          "GRPO's held-out success. One seed cannot decide this; the claim stays INCONCLUSIVE.",
          "[P] G2PO trains LM agents; [R] no threshold", "+22.2 points over GRPO (ALFWorld, 1.5B-7B)",
          "heldout_gain_g2po_grpo", ">=", 0.0),
)


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # [R] one thread per worker: 2 shared cores
    out: dict[str, Estimate] = {}
    try:
        pair = build_pair(s.model, temperature=s.temperature, one_shot=s.one_shot, lr=s.lr)
        pol = pair.policy
        factory = partial(KeyDoorEnv, config=TINY_WORLD)
        train = layouts(s.n_train_layouts, seed=0, calibrate=None, config=TINY_WORLD)
        test = layouts(s.n_test_layouts, seed=1000, calibrate=None, config=TINY_WORLD)
        held: dict[str, float] = {}
        for i, est in enumerate(ESTIMATORS):
            ctx.progress(f"G-10: {est} arm", i, len(ESTIMATORS))
            t0 = time.perf_counter()
            log = train_compare(factory, train, pol.reset, (est,), KEY, group_size=s.group_size,
                                tasks_per_iter=s.tasks_per_iter, iterations=s.iterations, lr=s.lr, seeds=[s.seed],
                                eval_every=s.iterations, eval_episodes=s.eval_episodes, max_steps=s.max_steps)
            arm = log.arm(est, s.seed)
            table, _, _ = collect_groups(factory, pol, test, s.heldout_rollouts, s.max_steps,
                                         seed=derive_seed(s.seed, "g10-heldout"))
            wins = table.success[table.traj_starts]
            held[est] = float(wins.mean())
            out[f"heldout_success_{est}"] = proportion_estimate(int(wins.sum()), int(wins.size))
            out[f"train_auc_{est}"] = Estimate.exact(arm.auc)
            out[f"seconds_{est}"] = Estimate.exact(time.perf_counter() - t0)
            for k, v in arm.seconds.items():
                out[f"seconds_{est}_{k}"] = Estimate.exact(v)
            ctx.data[est] = {"success": arm.success, "eval_iteration": arm.eval_iteration,
                             "train_success": arm.train_success, "heldout_success": held[est]}
        out["heldout_gain_g2po_grpo"] = Estimate.exact(held["g2po"] - held["grpo"])
        out["heldout_gain_g2po_gigpo"] = Estimate.exact(held["g2po"] - held["gigpo"])
        ctx.data["model"] = s.model
    finally:
        torch.set_num_threads(threads)
    # never under the claim's metric name, at any profile: not judged by design [R]
    return unjudged(out, ("heldout_gain_g2po_grpo", "heldout_gain_g2po_gigpo"),
                    "1 seed by design: G-10 is registered as a smoke test of LoRA training, never judged [R]",
                    ctx.data)


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    plt = pyplot()

    arms = [e for e in ESTIMATORS if e in data]
    if not arms:
        return []
    fig, ax = plt.subplots(figsize=(5, 3.5))
    vals = [data[e]["heldout_success"] for e in arms]
    labels = ["G2PO-style (reconstructed)" if e == "g2po" else {"grpo": "GRPO", "gigpo": "GiGPO"}[e] for e in arms]
    ax.bar(np.arange(len(arms)), vals)
    ax.set_xticks(np.arange(len(arms)), labels, fontsize=8)
    ax.set_ylabel("held-out success (1 seed)")
    ax.set_title(f"G-10 LoRA smoke ({data.get('model', '?')}), no verdict", fontsize=9)
    fig.tight_layout()
    path = out / "g10_lora_heldout.png"
    save(fig, path, dpi=110)
    return [path]


EXPERIMENT = Experiment(
    id="e165.g2po_lora_smoke",
    quick_budget_s=25,
    parallel_safe=True,  # measure() runs torch on one thread and judges no time: it may share the cores
    title="E165 G-10 (optional): GRPO / GiGPO / G2PO-style LoRA training of SmolLM2 — smoke, no verdict",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    requires=frozenset({"hf", "peft"}),
    reads=models_read("model"),
    scale_note="G2PO-style (reconstructed) [R]. SmolLM2-135M CandidatePolicy + LoRA (r 8, α 16, q/v, AdamW 1e-4), "
               "1 seed, 10 iterations × 1 group × 8 rollouts (≤ 12 steps) per arm on 8 tiny KeyDoor layouts; "
               "held-out success on 8 layouts. The paper trains 1.5B-7B models on GPUs for hundreds of steps. INCONCLUSIVE by design. "
               "Quick/smoke: an untrained tiny model at T = 100.",
)
