"""E165 G-8 (and G-9's LM row): graph advantages as progress detectors on LM-policy rollouts [I].

Setup and thresholds are the project's [R] (docs/methods/g2po.md, Claims and verdicts).

G-3 scores ε-oracle rollouts; here the behaviour policy is a real LM choosing among admissible commands
(``lm.policy.CandidatePolicy``, SmolLM2-135M-Instruct with its one-shot prompt, T = 1). Its rollouts differ from the
ε-oracle's in the way that matters for G2PO: an LM repeats itself (the same room, the same useless command), so
states recur within and across trajectories, and its failures are long wanders rather than one bad step.
G2PO here is **G2PO-style (reconstructed)** [R] (g2po README, The estimator).

World [R]: small held-out KeyDoor layouts (3 rooms, 1 lock, 1 distractor, trap; seeds from 1000, never used for any
choice) instead of 8 held-out TextWorld games (as planned): either fits the claim, KeyDoor has exact oracle labels on
every step and needs no ``tw-make`` in the run. 8 layouts × 8 rollouts × ≤ 15 steps (≈ 1k decisions), as planned [R].

Arms (the scoring is G-3's ``_arm``: AUROC(advantage → oracle progress) per estimator, paired cluster bootstrap over
groups, shuffled-key and permuted-label controls):
- ``lm``: plain KeyDoor (the claim arm; G-8a/b);
- ``uniq``: the same layouts under ``UniqueObsWrapper(p = 1)`` with fresh LM rollouts (the wrapper's tag is in the
  prompt, as an AppWorld-like id would be). With every observation unique, G2PO-style collapses to GRPO (P1), so the
  claim (within 0.02 of GRPO) is the no-repeat negative control of G-6 on LM rollouts.

G-9 LM row: (graph + advantages) / rollout wall time, one ratio per group: "graph + advantages" is the median of 3
timed ``g2po_advantages`` calls on that group's rows, "rollout" the wall time the group's 8 LM rollouts took inside
``collect_groups`` (from one env-factory call to the next: the collector makes one env per group, in order). The
claim is judged on the geometric mean of the 8 group ratios with its Student-t interval (``repeats_estimate``), as
every E165 timing claim is (a single timing is never a verdict); ``lm_overhead_ratio_pooled`` keeps the whole-arm
ratio (one timing of the whole table over the arm's wall). Pre-registered < 0.5 % (G-9, PERF-4 [R]; the paper's
"< 0.5 % extra compute" [S]).

Quick/smoke run an untrained ``tiny:`` model at T = 20 (see e173_progress_lm_pair_distilled); their claim metrics are
recorded as ``*_observed`` (no verdict: G-8 has no quick profile [R], and a tiny model's rollouts are both
far cheaper and far more random than SmolLM2's, so neither AUROC nor overhead would speak for the claim).
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate, repeats_estimate
from agentmill.core.types import StepTable
from agentmill.envs.keydoor import KeyDoorConfig, layouts
from agentmill.envs.rollout import collect_groups
from agentmill.experiments.e165_g2po import PAPER
from agentmill.experiments.e165_g2po.advantage_scoring import ESTIMATORS, score_arm
from agentmill.experiments.e165_g2po.keydoor_groups import KEY, KeyDoorFactory
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, Experiment, RunContext, models_read, unjudged
from agentmill.methods.g2po import g2po_advantages


def lm_world(n_rooms: int, n_distractors: int, max_steps: int) -> KeyDoorConfig:
    """Small KeyDoor for LM rollouts [R]: 1 lock, trap on."""
    return KeyDoorConfig(n_rooms=n_rooms, n_locks=1, n_distractors=n_distractors, trap=True, max_steps=max_steps)


@dataclass(frozen=True)
class Setup:
    model: str = "hf:smollm2"
    """The behaviour LM: ``hf:NAME`` or ``tiny:SPEC``."""
    temperature: float = 1.0
    """Candidate-softmax temperature (1 for SmolLM2)."""
    one_shot: bool = True
    """One-shot example in the prompt (SmolLM2 follows a format only when shown one)."""
    n_layouts: int = 8
    """Held-out layouts, one group each (8 [R])."""
    layout_seed: int = 1000
    """First layout seed (held out: never used to choose anything)."""
    group_size: int = 8
    """Rollouts per group (8 [R])."""
    max_steps: int = 15
    """Steps per rollout (≤ 15 [R])."""
    n_rooms: int = 3
    """KeyDoor rooms [R]: a uniform-random agent reaches the goal within 15 steps on 8 % of these layouts with 3
    rooms and on 1.6 % with 4 (measured on the held-out seeds before any LM run); without successes every
    advantage is 0."""
    n_distractors: int = 1
    """Distractor objects per layout."""
    unique_arm: bool = True
    """Also roll out under ``UniqueObsWrapper(p = 1)`` (G-8c)."""
    n_boot: int = 1000
    """Cluster-bootstrap resamples (clusters = groups)."""
    judged: bool = True
    """False: claim metrics are recorded as ``*_observed`` (tiny backend: no verdict)."""
    seed: int = 1000
    """Rollout seed."""


SETUPS = {
    "smoke": Setup(model="tiny:new?d=16&layers=1&heads=2&max_len=1024&seed=1", temperature=100.0, one_shot=False,
                   n_layouts=2, group_size=4, max_steps=8, n_distractors=0, n_boot=50, judged=False),
    # T = 100: an untrained tiny model at T = 20 never reaches the goal (all advantages 0); at T = 100 it does ~9 %
    "quick": Setup(model="tiny:new?d=32&max_len=1024&seed=1", temperature=100.0, one_shot=False, max_steps=20,
                   n_distractors=0, n_boot=500, judged=False),
    "full": Setup(),
}

CLAIM_METRICS = ("lm_gain_g2po_gigpo", "lm_gain_g2po_grpo", "uniq_gain_g2po_grpo", "lm_overhead_ratio")
CLAIMS = (
    Claim("G-8a", "On LM-policy rollouts, G2PO-style advantages detect progress steps better than GiGPO's: AUROC gain "
          "≥ 0.05 (whole 95 % CI).", "[I] the paper's setting is LM agents; threshold [R]",
          "not reported (ALFWorld +22.2 success points over GRPO)", "lm_gain_g2po_gigpo", ">=", 0.05),
    Claim("G-8b", "On LM-policy rollouts, G2PO-style − GRPO AUROC ≥ 0.10.", "[I]; threshold [R]", "not reported",
          "lm_gain_g2po_grpo", ">=", 0.10),
    Claim("G-8c", "Under UniqueObs (no repeated observation), the G2PO-style AUROC is within 0.02 of GRPO's.",
          "[S] AppWorld pattern; [D] P1; threshold [R]", "< 3 points on AppWorld [S]", "uniq_gain_g2po_grpo", "in",
          -0.02, upper=0.02),
    Claim("G-9-LM", "With LM rollouts, graph + advantages cost < 0.5 % of the rollout wall time.",
          "[S] '< 0.5 % extra compute'; threshold [R]", "< 0.5 %", "lm_overhead_ratio", "<=",
          0.005),
)


def _policy(s: Setup) -> Any:
    from agentmill.lm.candidate_pair import load_candidate_lm, render_for
    from agentmill.lm.policy import CandidatePolicy

    return CandidatePolicy(load_candidate_lm(s.model), render_for(s.one_shot), s.temperature, record=False)


class _Clocked:
    """An env factory that notes when each group starts: ``collect_groups`` calls its factory once per group, in
    task order, so group k ran from ``starts[k]`` to ``starts[k + 1]`` (the last one to the end of the call)."""

    def __init__(self, factory: Any) -> None:
        self.factory, self.starts = factory, []

    def __call__(self, task: Any) -> Any:
        self.starts.append(time.perf_counter())
        return self.factory(task)

    def walls(self, end: float) -> list[float]:
        return np.diff([*self.starts, end]).tolist()


def _group_tables(table: StepTable, n_groups: int) -> list[StepTable]:
    """The rows of each group as its own table, in task order (group ids end in ``/k``, ``collect_groups``)."""
    k = np.asarray([int(g.rsplit("/", 1)[1]) for g in table.group_id])
    return [StepTable(**{f.name: getattr(table, f.name)[k == j] for f in fields(StepTable)}) for j in range(n_groups)]


def _timed_advantages(table: Any, repeats: int = 3) -> float:
    times = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a low merge rate is expected under UniqueObs
        for _ in range(repeats):
            t0 = time.perf_counter()
            g2po_advantages(table, KEY)
            times.append(time.perf_counter() - t0)
    return float(np.median(times))


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # [R] one thread per worker: 2 shared cores
    out: dict[str, Estimate] = {}
    try:
        t0 = time.perf_counter()
        policy = _policy(s)
        out["seconds_load"] = Estimate.exact(time.perf_counter() - t0)
        world = lm_world(s.n_rooms, s.n_distractors, s.max_steps)
        tasks = layouts(s.n_layouts, seed=s.layout_seed, calibrate=None, config=world)
        arms = [("lm", KeyDoorFactory(world))]
        if s.unique_arm:
            arms.append(("uniq", KeyDoorFactory(world, unique_p=1.0)))
        for i, (prefix, factory) in enumerate(arms):
            ctx.progress(f"G-8 {prefix}: LM rollouts", i, len(arms))
            policy.invalidate()
            clock = _Clocked(factory)
            t0 = time.perf_counter()
            table, labels, _ = collect_groups(clock, policy, tasks, s.group_size, s.max_steps, seed=s.seed)
            end = time.perf_counter()
            roll = end - t0
            adv = _timed_advantages(table)
            ratios = [_timed_advantages(g) / w for g, w in zip(_group_tables(table, len(tasks)), clock.walls(end))]
            out[f"{prefix}_rollout_seconds"] = Estimate.exact(roll)
            out[f"{prefix}_advantage_seconds"] = Estimate.exact(adv)
            out[f"{prefix}_overhead_ratio"] = repeats_estimate(ratios, log=True)
            out[f"{prefix}_overhead_ratio_pooled"] = Estimate.exact(adv / roll)
            out[f"{prefix}_decisions"] = Estimate.exact(float(len(table)))
            out[f"{prefix}_seconds_per_decision"] = Estimate.exact(roll / max(len(table), 1))
            score_arm(table, labels, KEY, s.n_boot, s.seed, prefix, out, ctx, controls=(prefix == "lm"))
        ctx.progress("G-8 done", len(arms), len(arms))
        ctx.data["model"] = s.model
    finally:
        torch.set_num_threads(threads)
    if not s.judged:
        out = unjudged(out, CLAIM_METRICS, f"tiny stand-in model {s.model} in place of SmolLM2: verdicts need "
                                           "hf:smollm2 (full)", ctx.data)
    return out


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    """AUROC per estimator with 95 % CIs, one bar group per arm (the LM arm and the UniqueObs arm)."""
    plt = pyplot()

    arms = [(a, lbl) for a, lbl in (("lm", "LM rollouts"), ("uniq", "LM rollouts, UniqueObs")) if a in data]
    if not arms:
        return []
    fig, ax = plt.subplots(figsize=(6, 4))
    width = 0.25
    for j, est in enumerate(ESTIMATORS):
        xs, ys, err = [], [], [[], []]
        for i, (a, _) in enumerate(arms):
            v, (lo, hi) = data[a]["auroc"][est], data[a]["ci"][est]
            xs.append(i + (j - 1) * width)
            ys.append(v)
            err[0].append(v - lo if lo == lo else 0)
            err[1].append(hi - v if hi == hi else 0)
        label = "G2PO-style (reconstructed)" if est == "g2po" else {"grpo": "GRPO", "gigpo": "GiGPO"}[est]
        ax.bar(xs, ys, width, yerr=err, capsize=3, label=label)
    ax.axhline(0.5, color="gray", lw=0.8)
    ax.set_xticks(range(len(arms)), [lbl for _, lbl in arms])
    ax.set_ylabel("AUROC (advantage → oracle progress)")
    ax.set_ylim(0.3, 1.0)
    ax.set_title(f"G-8 advantage quality on LM rollouts ({data.get('model', '?')})", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = out / "g8_llm_advantage_auroc.png"
    save(fig, path, dpi=110)
    return [path]


EXPERIMENT = Experiment(
    id="e165.g2po_llm_advantage_quality",
    quick_budget_s=25,
    title="E165 G-8/G-9: G2PO-style advantages on LM-policy rollouts (and the LM overhead row)",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    requires=frozenset({"hf"}),
    reads=models_read("model"),
    scale_note="G2PO-style (reconstructed) [R]. Behaviour = SmolLM2-135M CandidatePolicy (T = 1, one-shot prompt, "
               "1 thread) on 8 held-out small KeyDoor layouts (3 rooms, 1 lock, 1 distractor, trap) × 8 rollouts × "
               "≤ 15 steps, instead of TextWorld games [R]; UniqueObs arm with fresh LM rollouts. The "
               "paper trains 1.5B-7B LMs on ALFWorld/WebShop and reports success, not AUROC. Quick/smoke: untrained "
               "tiny model at T = 100, no verdict.",
)
