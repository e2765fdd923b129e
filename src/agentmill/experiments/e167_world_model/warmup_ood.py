"""E167 U-3: does the world-model warm-up transfer to an unseen tool domain? (tiny model, KeyDoor → FactSearch)

The three U-1 arms are trained again here (U-1 keeps no checkpoints), with U-1's recipe and data: from the same
random init θ₀ of the pipeline's tiny architecture and KeyDoor BPE, ``none`` (behaviour cloning of the KeyDoor expert
only), ``wm`` (world-model SFT on the pipeline's KeyDoor examples, then the same BC), ``shuffled`` (the same SFT with
actions permuted within each task, then BC). No search data enters warm-up or BC. Each model then gets a one-shot
FactSearch prompt (in U-1's agent-prompt layout: a demonstration question of another world with its oracle first
call, then the test question, its start observation and its admissible commands) and writes its first call greedily.

Metrics, fixed before any run: *validity* = the first line parses as one of the three FactSearch tool forms with a
non-empty argument; *accuracy* = it is exactly one of the admissible start searches (the subject alone or with a
chain keyword). Test questions: 200 of 5 ``test`` worlds, half one-hop, half two-hop, test phrasings. Intervals:
two-stage bootstrap (worlds, then questions), paired across arms; one training seed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate, two_stage_bootstrap
from agentmill.experiments.e167_world_model import PAPER
from agentmill.experiments.e167_world_model.stages import SCALE, wm_config
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, Experiment, RunContext

ARMS = ("none", "wm", "shuffled")


@dataclass(frozen=True)
class Setup:
    pipeline: str = "full"
    """Which cached KeyDoor pipeline config supplies the world-model examples, the BPE and the architecture."""
    model: str = "tiny:2x64-bpe1024 from random init (θ₀ per seed), KeyDoor warm-up + BC"
    """The substrate every arm starts from."""
    warmup_steps: int = 200
    """World-model SFT steps of the wm and shuffled arms (U-1's)."""
    bc_steps: int = 100
    """BC steps of every arm (U-1's)."""
    bc_episodes: int = 60
    """KeyDoor expert episodes for BC (U-1's)."""
    seeds: tuple[int, ...] = (0,)
    """θ₀ and data-order seeds (one: the budget; U-1 uses three)."""
    n_test_worlds: int = 5
    """FactSearch ``test`` worlds."""
    n_test: int = 200
    """Test questions (half one-hop, half two-hop)."""
    max_new: int = 48
    """New-token cap of the generated first call."""
    one_shot: bool = True
    """Prepend the demonstration (off in smoke and quick, whose 400-token BPE makes the prompt exceed the context)."""
    n_boot: int = 10_000
    """Bootstrap resamples."""


SETUPS = {"smoke": Setup(pipeline="smoke", warmup_steps=2, bc_steps=2, bc_episodes=3, n_test_worlds=1, n_test=4,
                         max_new=16, one_shot=False, n_boot=200),
          "quick": Setup(pipeline="quick", warmup_steps=2, bc_steps=2, bc_episodes=4, n_test_worlds=1, n_test=6,
                         max_new=16, one_shot=False, n_boot=500),
          "full": Setup()}

CLAIMS = (
    Claim("E167-U3-validity", "World-model warm-up on KeyDoor raises the validity of the first FactSearch tool call "
          "(one-shot, no search data in warm-up or BC) by ≥ 0.03 over BC alone.", "[C] LWM warm-up transfers out of "
          "domain (README)", "BFCL v4 +8.96 out of domain [C README]", "u3_validity_wm_minus_none", ">=", 0.03,
          ci_bound=0.0),
    Claim("E167-U3-accuracy", "… and its accuracy (an admissible start search) by ≥ 0.03.", "[C] (README)",
          "BFCL v4 +8.96 out of domain [C README]", "u3_accuracy_wm_minus_none", ">=", 0.03, ci_bound=0.0),
)


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    from agentmill.envs.keydoor import generate_layout
    from agentmill.methods.world_model import pipeline as P
    from agentmill.methods.world_model.data import WM_WORLD, build_examples
    from agentmill.methods.world_model.domain import KeyDoorDomain
    from agentmill.methods.world_model.search_wm import (SearchWMConfig, first_call_prompts, first_calls,
                                                         is_valid_call, question_mix)
    from agentmill.methods.world_model.train import new_model
    from agentmill.methods.world_model.warmup import WarmupConfig, bc_pairs, expert_decisions, run_arm, shuffle_actions

    cfg = wm_config(s.pipeline)
    tok = P.tokenizer(cfg)
    rows = P.data(cfg).split("train")
    wm_exs = P.examples(cfg, "train")
    train_lays = [generate_layout(seed, WM_WORLD) for seed in dict.fromkeys(r.layout_seed for r in rows)]
    wcfg = WarmupConfig(warmup_steps=s.warmup_steps, bc_steps=s.bc_steps, lr=cfg.sft_lr, batch=cfg.batch,
                        seq_len=cfg.max_len)
    scfg = SearchWMConfig()
    tasks = question_mix("test", s.n_test_worlds, s.n_test, scfg, "test", "u3-test")
    demo = question_mix("policy-train", 1, 1, scfg, "train", "u3-demo")[0]
    prompts, good = first_call_prompts(tasks, demo if s.one_shot else None)
    calls: dict[str, list[list[str]]] = {a: [] for a in ARMS}
    out_rows: list[dict[str, Any]] = []
    logs = []
    total, k = len(s.seeds) * len(ARMS), 0
    for seed in s.seeds:
        shuf_exs = build_examples(shuffle_actions(rows, seed), P.FMT, KeyDoorDomain(), seed=cfg.seed)
        bc = bc_pairs(expert_decisions(train_lays, WM_WORLD, s.bc_episodes, seed=seed))
        valid: dict[str, list[bool]] = {}
        acc: dict[str, list[bool]] = {}
        for arm in ARMS:
            fresh = lambda seed=seed: new_model(cfg.layers, cfg.d, cfg.heads, cfg.max_len, seed, tok)  # noqa: E731
            lm, log = run_arm(arm, fresh, wm_exs, shuf_exs, bc, wcfg, seed)
            got = first_calls(lm, prompts, max_new=s.max_new)
            calls[arm].append(got)
            valid[arm] = [is_valid_call(c) for c in got]
            acc[arm] = [c in g for c, g in zip(got, good)]
            logs.append(log)
            k += 1
            ctx.progress("arms", k, total)
        for i, (w, q) in enumerate(tasks):
            out_rows.append({"world": f"{seed}/{w.seed}", "q": q.qid, "hops": q.hops,
                             **{f"v_{a}": float(valid[a][i]) for a in ARMS},
                             **{f"a_{a}": float(acc[a][i]) for a in ARMS}})

    def mean(col):
        return lambda rs: float(np.mean([r[col] for r in rs]))

    boot = dict(cluster="world", unit="q", B=s.n_boot, seed=0)
    out: dict[str, Estimate] = {
        "u3_validity_wm_minus_none": two_stage_bootstrap(out_rows, mean("v_wm"), paired_with=mean("v_none"), **boot),
        "u3_accuracy_wm_minus_none": two_stage_bootstrap(out_rows, mean("a_wm"), paired_with=mean("a_none"), **boot),
        "validity_wm_minus_shuffled": two_stage_bootstrap(out_rows, mean("v_wm"), paired_with=mean("v_shuffled"),
                                                          **boot),
        "accuracy_wm_minus_shuffled": two_stage_bootstrap(out_rows, mean("a_wm"), paired_with=mean("a_shuffled"),
                                                          **boot)}
    for a in ARMS:
        out[f"validity_{a}"] = two_stage_bootstrap(out_rows, mean(f"v_{a}"), **boot)
        out[f"accuracy_{a}"] = two_stage_bootstrap(out_rows, mean(f"a_{a}"), **boot)
    ctx.data.update({"validity": {a: float(np.mean([r[f"v_{a}"] for r in out_rows])) for a in ARMS},
                     "accuracy": {a: float(np.mean([r[f"a_{a}"] for r in out_rows])) for a in ARMS},
                     "calls_sample": {a: calls[a][0][:8] for a in ARMS}, "demo": demo[1].qid,
                     "n_questions": len(tasks), "logs": logs})
    return out


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    v = data.get("validity")
    if not v:
        return []
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 3))
    x = np.arange(len(ARMS))
    ax.bar(x - 0.2, [v[a] for a in ARMS], 0.4, label="valid call")
    ax.bar(x + 0.2, [data["accuracy"][a] for a in ARMS], 0.4, label="accurate call")
    ax.set_xticks(x, ARMS)
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8)
    ax.set_title("U-3: first FactSearch call after KeyDoor warm-up + BC", fontsize=10)
    fig.tight_layout()
    p = out / "u3_warmup_ood.png"
    save(fig, p)
    return [p]


EXPERIMENT = Experiment(
    id="e167.wm_warmup_ood",
    quick_budget_s=8,
    title="E167 U-3: world-model warm-up and an unseen tool domain (KeyDoor → FactSearch first calls)",
    paper=PAPER,
    requires=frozenset({"hf"}),
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    quick_check="quick trains each arm for 2 + 2 steps and asks 6 questions; the verdict is the full profile's",
    scale_note=SCALE + " U-1's arms retrained (one seed; U-1 uses three), then one-shot first FactSearch calls on "
                       "200 questions of 5 unseen fictional worlds; paper: Qwen3.5-35B-A3B-SFT after LWM RL warm-up, "
                       "BFCL v4 out of domain.",
)
