"""E167 D-2: steered ("stingy") simulation beats real-env training (FactSearch, tiny world model, linear policy).

FactSearch worlds are split three ways by seed: ``wm-train`` (the world model's SFT data only; the D-3 model),
``policy-train`` (every arm's RL questions; unseen by the world model), ``test`` (held-out questions, test
phrasings; unseen by both). Per seed, a ``LinearSoftmaxPolicy`` is trained by GRPO (``methods.g2po.train.
train_compare``, ``estimators=("grpo",)``) with the same questions, task order, episode budget and learning rate in
four transition sources: ``real`` (the env), ``wm`` (the world model, no instruction), ``stingy_wm`` (the world model
told ``Stingy(withhold_answer=True, page_size=3)``, plus ``InjectError`` drawn by the schedule at rate 0.1) and
``prog_stingy`` (the env's own programmatic stingy transform). Every policy is evaluated in the real env on the test
questions (natural mix: half one-hop, half two-hop; one episode per question and seed). Reported beside the claims:
the hard split (two-hop questions no entity search snippet answers), the programmatic-stingy arm, the training
curves (real success on the training questions), in-simulator success, world-model calls and parse failures.
Intervals: two-stage bootstrap (seeds, then questions), paired across arms.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate, two_stage_bootstrap
from agentmill.experiments.e167_world_model import PAPER
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, Experiment, RunContext

ARMS = ("real", "wm", "stingy_wm", "prog_stingy")
WM_SPEC = "tiny:2x64-bpe1024 FactSearch WM (SFT, trained here, cached)"
"""The D-3 world model (the same string as ``steering.WM_SPEC``: the report's model column)."""


@dataclass(frozen=True)
class Setup:
    wm: str = WM_SPEC
    """The simulator's world model (the D-3 model, shared through the cache)."""
    n_train_worlds: int = 24
    """World-model SFT worlds (as D-3)."""
    sft_steps: int = 400
    """World-model SFT steps (as D-3)."""
    batch: int = 8
    """World-model SFT batch (as D-3)."""
    layers: int = 2
    """World-model blocks (as D-3)."""
    d: int = 64
    """World-model width (as D-3)."""
    max_new: int = 200
    """World-model new-token cap (as D-3)."""
    policy: str = "LinearSoftmaxPolicy(dim=2**16)"
    """The policy class every arm trains (hashed observation × command features)."""
    n_policy_worlds: int = 2
    """``policy-train`` worlds."""
    n_policy_questions: int = 16
    """Training questions (half one-hop, half two-hop)."""
    n_test_worlds: int = 5
    """``test`` worlds."""
    n_test: int = 200
    """Test questions (natural mix: half one-hop, half two-hop)."""
    seeds: tuple[int, ...] = (0, 1, 2)
    """Policy seeds."""
    iterations: int = 25
    """GRPO iterations (× 4 questions × group 8 = 800 episodes per arm and seed)."""
    tasks_per_iter: int = 4
    """Questions per iteration."""
    group: int = 8
    """Rollouts per question and iteration."""
    lr: float = 1.0
    """Policy learning rate (D-1's, fixed before any run; not tuned)."""
    error_rate: float = 0.1
    """InjectError rate of the stingy-WM arm (as pre-registered)."""
    eval_every: int = 5
    """Iterations between training-curve evaluations (real env, training questions)."""
    prewarm_pairs: int = 1500
    """Simulator prompts predicted in batches before training, per control (greedy cache)."""
    n_boot: int = 10_000
    """Bootstrap resamples."""


SETUPS = {"smoke": Setup(n_train_worlds=1, sft_steps=2, batch=2, layers=1, d=32, max_new=24, n_policy_worlds=1,
                         n_policy_questions=2, n_test_worlds=1, n_test=4, seeds=(0,), iterations=1,
                         tasks_per_iter=1, group=2, eval_every=1, prewarm_pairs=8, n_boot=200),
          "quick": Setup(n_train_worlds=2, sft_steps=4, batch=4, max_new=48, n_policy_worlds=1, n_policy_questions=4,
                         n_test_worlds=1, n_test=12, seeds=(0,), iterations=2, tasks_per_iter=2, group=2,
                         eval_every=1, prewarm_pairs=24, n_boot=500),
          "full": Setup()}

CLAIMS = (
    Claim("E167-D2-stingy-vs-real", "A policy trained in the stingy-steered world model beats one trained in the real "
          "env on real test questions by ≥ 0.03 success (CI > 0).", "[S] review of the paper; [C] controlled "
          "search simulation (README)", "50.3 vs 45.6 over the first 60 steps [S]; WideSearch F1-item 34.02 → "
          "50.31 with fictional-world construction [C]", "d2_stingy_minus_real", ">=", 0.03, ci_bound=0.0),
    Claim("E167-D2-controlled", "Steering matters: the stingy-steered world model beats the same world model "
          "without instructions by ≥ 0.03 real test success (CI > 0).", "[C] controlled vs uncontrolled "
          "simulation (README)", "MCPMark 24.6 → 33.8, Tool Decathlon 31.5 → 36.1 [C README]",
          "d2_controlled_minus_uncontrolled", ">=", 0.03, ci_bound=0.0),
)


def _tasks(split: str, n_worlds: int, n: int, cfg: Any, phrasing: str, seed_key: str) -> list[tuple[Any, Any]]:
    """(world, question) pairs, half one-hop and half two-hop, drawn without replacement."""
    from agentmill.core.seeding import derive_seed
    from agentmill.methods.world_model.search_wm import world, world_seeds

    one, two = [], []
    for ws in world_seeds(split, n_worlds, cfg.seed):
        w = world(ws, cfg.n_entities, cfg.n_news)
        for q in w.questions(phrasing):
            (one if q.hops == 1 else two).append((w, q))
    rng = np.random.default_rng(derive_seed(cfg.seed, seed_key))
    a = [one[int(i)] for i in rng.permutation(len(one))[:n - n // 2]]
    b = [two[int(i)] for i in rng.permutation(len(two))[:n // 2]]
    return a + b


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    import dataclasses

    from agentmill.core.seeding import derive_seed
    from agentmill.envs.factsearch import FactSearchConfig, FactSearchEnv
    from agentmill.envs.policies import LinearSoftmaxPolicy
    from agentmill.envs.rollout import collect_groups
    from agentmill.methods.g2po.train import train_compare
    from agentmill.methods.world_model.domain_factsearch import FactSearchDomain
    from agentmill.methods.world_model.model import GREEDY, WorldModel
    from agentmill.methods.world_model.search_wm import (FMT, SearchSimEnv, SearchWMConfig, prewarm_search,
                                                         train_search_wm)

    cfg = SearchWMConfig(n_train_worlds=s.n_train_worlds, sft_steps=s.sft_steps, batch=s.batch, layers=s.layers,
                         d=s.d, max_new=s.max_new)
    lm, _log = train_search_wm(cfg)
    wm = WorldModel(lm, FactSearchDomain(), FMT, dataclasses.replace(GREEDY, max_new_tokens=cfg.max_new))
    train = _tasks("policy-train", s.n_policy_worlds, s.n_policy_questions, cfg, "train", "d2-train")
    test = _tasks("test", s.n_test_worlds, s.n_test, cfg, "test", "d2-test")
    env_cfg = FactSearchConfig(n_entities=cfg.n_entities, n_news=cfg.n_news)
    stingy_cfg = dataclasses.replace(env_cfg, stingy=True, page_size=3)
    sims: list[SearchSimEnv] = []

    def sim(control: str | None, rate: float):
        def make(task):
            env = SearchSimEnv(wm, task[0], task[1], control=control, error_rate=rate)
            sims.append(env)
            return env
        return make

    real_f = lambda t: FactSearchEnv(t[0], t[1], env_cfg)  # noqa: E731
    factories = {"real": real_f, "wm": sim(None, 0.0), "stingy_wm": sim("stingy", s.error_rate),
                 "prog_stingy": lambda t: FactSearchEnv(t[0], t[1], stingy_cfg)}
    ctx.progress("pre-warming the simulator cache", 0, 1)
    pre = prewarm_search(wm, train, [None], max_pairs=s.prewarm_pairs)
    pre += prewarm_search(wm, train, ["stingy"], max_pairs=s.prewarm_pairs)
    rows: list[dict[str, Any]] = []
    curves: dict[str, list[list[float]]] = {a: [] for a in ARMS}
    in_sim: dict[str, list[float]] = {a: [] for a in ARMS}
    untrained: list[float] = []
    total, k = len(s.seeds) * len(ARMS), 0
    for seed in s.seeds:
        per_arm: dict[str, np.ndarray] = {}
        for arm, factory in factories.items():
            made: list[Any] = []

            def policy_factory():
                p = LinearSoftmaxPolicy()
                made.append(p)
                return p

            log = train_compare(factory, train, policy_factory, ("grpo",), group_size=s.group,
                                tasks_per_iter=s.tasks_per_iter, iterations=s.iterations, lr=s.lr, seeds=(seed,),
                                eval_every=s.eval_every, eval_episodes=len(train), eval_env_factory=real_f)
            a = log.arm("grpo", seed)
            curves[arm].append([float(x) for x in a.success])
            in_sim[arm].append(float(np.mean(a.train_success[-max(1, s.iterations // 5):])))
            table, _, _ = collect_groups(real_f, made[-1], test, 1, seed=derive_seed(seed, "d2-test-eval"))
            per_arm[arm] = table.success[table.traj_starts].astype(float)
            if arm == "real":
                t0, _, _ = collect_groups(real_f, LinearSoftmaxPolicy(), test, 1,
                                          seed=derive_seed(seed, "d2-test-eval"))
                untrained.append(float(t0.success[t0.traj_starts].mean()))
            k += 1
            ctx.progress("policy training", k, total)
        for i, (_w, q) in enumerate(test):
            rows.append({"seed": seed, "q": q.qid, "hard": q.hard, "hops": q.hops,
                         **{arm: float(per_arm[arm][i]) for arm in ARMS}})
    mean = lambda arm, pred=None: (lambda rs: float(np.mean([r[arm] for r in rs if pred is None or pred(r)])  # noqa: E731
                                                    if any(pred is None or pred(r) for r in rs) else np.nan))
    boot = dict(cluster="seed", unit="q", B=s.n_boot, seed=0)
    out: dict[str, Estimate] = {
        "d2_stingy_minus_real": two_stage_bootstrap(rows, mean("stingy_wm"), paired_with=mean("real"), **boot),
        "d2_controlled_minus_uncontrolled": two_stage_bootstrap(rows, mean("stingy_wm"), paired_with=mean("wm"),
                                                                **boot),
        "prog_stingy_minus_real": two_stage_bootstrap(rows, mean("prog_stingy"), paired_with=mean("real"), **boot),
        "stingy_wm_minus_prog_stingy": two_stage_bootstrap(rows, mean("stingy_wm"), paired_with=mean("prog_stingy"),
                                                           **boot)}
    for arm in ARMS:
        out[f"test_success_{arm}"] = two_stage_bootstrap(rows, mean(arm), **boot)
    hard = lambda r: r["hard"]  # noqa: E731
    if any(r["hard"] for r in rows):
        out["hard_stingy_minus_real"] = two_stage_bootstrap(rows, mean("stingy_wm", hard),
                                                            paired_with=mean("real", hard), **boot)
    ctx.data.update({"rows": rows, "curves": curves, "in_sim_success": in_sim, "untrained_test_success": untrained,
                     "train_questions": [q.qid for _w, q in train], "prewarm_prompts": pre,
                     "wm_cache_hits": wm.cache.hits if wm.cache else 0,
                     "wm_cache_misses": wm.cache.misses if wm.cache else 0,
                     "sim_parse_failures": int(sum(e.parse_failures for e in sims)),
                     "hard_share": float(np.mean([q.hard for _w, q in test]))})
    return out


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    rows = data.get("rows")
    if not rows:
        return []
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.2))
    for arm in ARMS:
        c = np.array(data["curves"][arm], float)
        axes[0].plot(np.arange(c.shape[1]), c.mean(axis=0), marker="o", label=arm)
    axes[0].set_xlabel("evaluation point")
    axes[0].set_ylabel("real success (training questions)")
    axes[0].legend(fontsize=7)
    vals = [np.mean([r[a] for r in rows]) for a in ARMS]
    axes[1].bar(ARMS, vals, color=["tab:blue", "tab:orange", "tab:green", "tab:purple"])
    axes[1].set_ylabel("real success (test questions)")
    axes[1].set_ylim(0, 1)
    fig.suptitle("D-2: stingy-steered simulator vs real-env training")
    fig.tight_layout()
    p = out / "d2_stingy_sim.png"
    save(fig, p)
    return [p]


EXPERIMENT = Experiment(
    id="e167.wm_stingy_sim",
    quick_budget_s=8,
    title="E167 D-2: steered (stingy) simulation vs real-env training of a search policy (FactSearch)",
    paper=PAPER,
    requires=frozenset({"hf"}),
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    quick_check="quick trains each arm for 2 iterations on 4 questions in a barely trained simulator; the verdict is "
                "the full profile's",
    scale_note="the D-3 tiny FactSearch world model (2 × 64, SFT on 24 worlds) as simulator; LinearSoftmaxPolicy "
               "(hashed features) trained by GRPO on 16 questions of 2 unseen worlds, 800 episodes per arm and seed, "
               "3 seeds (the spec asks 2,000 episodes and 5 seeds), evaluated on 200 real test questions of 5 worlds "
               "unseen by both. Paper: Qwen3.5-35B-A3B trained with a 397B simulator on search tasks.",
)
