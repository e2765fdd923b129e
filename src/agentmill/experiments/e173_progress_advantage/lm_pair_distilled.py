"""E173 P-6a: a real LM pair recovers A* end to end [D].

The identity is arXiv:2606.26080's [A]; setup and threshold are the project's [R]
(docs/methods/progress_advantage.md, Claims and verdicts).

The identity β·log(π*/π_ref) = A* [A] holds for any π_ref, so it must hold when π_ref is an LM choosing among
admissible commands (``lm.policy.CandidatePolicy``) and π* is reached by fitting a LoRA copy of the same LM. This
experiment runs the whole chain on real LM code:

1. World: tiny KeyDoor (3 rooms, 1 lock, trap, no distractors, ``droppable=False``: ≤ 8 admissible commands per
   state, 6-10 states), ``include_feedback=False`` so that the text of a state does not depend on the last action
   and the exact model's states are exactly what the policy sees [R].
2. π_ref = the reference LM's candidate policy on every state of the exact model
   (``progress_advantage.train.candidate_policy_table``).
3. (Q*, V*, π*) = ``core.tabular_mdp.soft_value_iteration(mdp, π_ref, β)`` with β = 0.5 [R].
4. The trainable copy (LoRA on SmolLM2 for ``hf:``; all weights of a ``tiny:`` model) starts at π_ref and is
   distilled to π* by cross-entropy over the candidates (``distill_to_optimum``).
5. Metric: Spearman(β·log(π_θ/π_ref)(s, a), A*(s, a)) over every live (s, a) of every layout, with a cluster
   bootstrap over states. Pre-registered threshold ≥ 0.9 (candidates). Reported beside it: the free-text score
   β·(ℓ_θ(a) − ℓ_ref(a)) (summed candidate + end-of-turn log-likelihoods, not normalised over the candidate set),
   the policy's own β·log π_θ, and a *wrong reference* (a differently initialised tiny model) in place of π_ref.

Each layout gets its own fresh pair (``LoRACandidatePolicy.reset``): the pair is fitted to that layout's π*. That makes
the layout the unit of resumption: each finished layout's columns are appended (flushed, fsynced) to a JSONL
checkpoint in the run's work dir, named by the setup without ``n_layouts``/``n_boot``, so a killed run (P-6a on a 0.5B
model takes hours on one thread) restarts at the next layout with the same numbers it would have had (JSON floats
round-trip exactly; each layout's distillation seed is ``seed + i``).

Temperature [R]: the log-ratio is computed from the two policies' own log π (same temperature T on both sides); the
E173 scorer (no temperature) gives the same number only at T = 1 (tests/methods/progress_advantage/test_train_lm.py).
The full profile uses SmolLM2 at T = 1. The quick/smoke profiles use an untrained ``tiny:`` model at T = 20 (an
untrained byte-level model at T = 1 puts nearly all mass on the shortest command, so π* would equal π_ref almost
everywhere and the ranking would be noise); their numbers are recorded as ``*_observed`` and judged on nothing
(quick gives verdicts only for the algebraic claims [R]).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.records import append_jsonl_checkpoint, read_jsonl_checkpoint
from agentmill.core.stats import Estimate, cluster_bootstrap, spearman
from agentmill.core.tabular_mdp import soft_value_iteration
from agentmill.envs.keydoor import TINY_WORLD, KeyDoorConfig, KeyDoorEnv, KeyDoorLayout, layouts
from agentmill.experiments.e173_progress_advantage import PAPER
from agentmill.experiments.e173_progress_advantage.tiny_models import TINY_QUICK
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, Experiment, RunContext, models_read, setup_hash, unjudged
from agentmill.lm.candidate_pair import build_pair, load_candidate_lm, render_for


@dataclass(frozen=True)
class Setup:
    model: str = "hf:smollm2"
    """``hf:NAME`` (an ``lm.pair.HFPair``: LoRA over one copy, reference = adapter disabled) or ``tiny:SPEC`` (two
    copies of a tiny model with the same seed, every weight of the policy copy trained)."""
    wrong_reference: str = "tiny:new?d=32&max_len=1024&seed=7"
    """The negative control's reference: a differently initialised tiny model (pre-registered negative control [R])."""
    temperature: float = 1.0
    """Candidate-softmax temperature of both policies (1 for SmolLM2, where it equals the E173 scorer)."""
    one_shot: bool = True
    """Show the one-shot example in the prompt (SmolLM2 needs it, ARCHITECTURE.md §3); off for tiny models."""
    n_layouts: int = 4
    """Tiny KeyDoor layouts (one fitted pair each)."""
    layout_seed: int = 0
    """First layout seed."""
    beta: float = 0.5
    """KL coefficient of π* and of the score (β = 0.5 [R]; docs/methods/progress_advantage.md)."""
    epochs: int = 20
    """Distillation epochs over the layout's live states (early stop at ``tol``)."""
    batch_size: int = 4
    """States per AdamW step."""
    lr: float = 2e-3
    """AdamW step size of the distillation [R]: no source gives one (``lm.policy``'s 1e-4 is the RL lr); fitting a known
    target needs larger steps within 20 epochs. Untuned on the test layouts."""
    tol: float = 1e-4
    """Stop once the mean KL(π* ‖ π_θ) over live states is below this. It must sit well below the initial
    KL(π* ‖ π_ref): the first quick run stopped at 1e-3 with an initial KL of 1e-2 and a Spearman of 0.57."""
    n_boot: int = 1000
    """Cluster-bootstrap resamples (clusters = (layout, state))."""
    judged: bool = True
    """False: claim metrics are recorded as ``*_observed`` (quick/smoke run the tiny backend: no verdict)."""
    seed: int = 0
    """Distillation order seed."""


SETUPS = {
    "smoke": Setup(model="tiny:new?d=16&layers=1&heads=2&max_len=1024&seed=1",
                   wrong_reference="tiny:new?d=16&layers=1&heads=2&max_len=1024&seed=7", temperature=20.0,
                   one_shot=False, n_layouts=1, epochs=1, lr=3e-3, n_boot=50, judged=False),
    "quick": Setup(model=TINY_QUICK, temperature=20.0, one_shot=False, n_layouts=3, epochs=30, batch_size=8, lr=3e-3,
                   tol=1e-6, n_boot=500, judged=False),
    "full": Setup(),
}

CLAIM_METRICS = ("spearman_candidates",)
CLAIMS = (
    Claim("P-6a", "With π_ref an LM choosing among admissible commands and a LoRA copy distilled to the exact soft "
          "optimum π* (β = 0.5), β·log(π_θ/π_ref) ranks (s, a) like the exact A*: Spearman ≥ 0.9 (whole 95 % CI).",
          "[D] from the paper's identity [P]; threshold [R]",
          "exact identity (paper); no LM-pair Spearman reported", "spearman_candidates", ">=", 0.9),
)


def world(layout: KeyDoorLayout, config: KeyDoorConfig = TINY_WORLD) -> tuple[KeyDoorEnv, Any, list]:
    """(env, exact model, states [(obs, info)]) of one layout: what a candidate policy sees in each model state."""
    env = KeyDoorEnv(layout, config)
    mdp, _, obs, adm = env.to_tabular()
    states = [(o, {"admissible_commands": list(a), "objective": layout.objective}) for o, a in zip(obs, adm)]
    return env, mdp, states


def _loglik_table(policy: Any, states: list, actions: tuple[str, ...], mdp: Any) -> np.ndarray:
    """ℓ(a) (summed candidate + end-of-turn log-likelihood, no temperature) on every live valid (s, a)."""
    out = np.full((mdp.n_states, mdp.n_actions), np.nan)
    col = {a: k for k, a in enumerate(actions)}
    for s, (obs, info) in enumerate(states):
        if mdp.absorbing[s] or not info["admissible_commands"]:
            continue
        ell, cands, _ = policy.logliks(obs, info)
        out[s, [col[c] for c in cands]] = ell
    return out


def _spearman_ci(x: np.ndarray, y: np.ndarray, clusters: np.ndarray, n_boot: int, seed: int) -> Estimate:
    """Spearman(x, y) with a cluster-bootstrap CI; constant resamples are undefined, dropped and counted."""
    return cluster_bootstrap(lambda rows: spearman(x[rows], y[rows]), clusters, n_boot=n_boot, seed=seed)


COLUMNS = ("A", "ratio", "free", "logpi", "logref", "wrong", "cluster")
"""Per (s, a) columns one layout contributes: exact A*, the candidate log-ratio, the free-text score, β·log π_θ,
β·log π_ref, the wrong-reference ratio, and the bootstrap cluster (layout, state)."""
CHECKPOINT_VERSION = 1
"""Bumped whenever a layout's columns are computed differently, so older checkpoints are not reused."""


def checkpoint_path(s: Setup, work_dir: Path) -> Path:
    """The per-layout checkpoint of this setup. ``n_layouts`` and ``n_boot`` are left out of the name: more layouts
    extend the same file and a different bootstrap reuses every layout."""
    key = setup_hash(replace(s, n_layouts=0, n_boot=0), None)
    return work_dir / f"layouts-v{CHECKPOINT_VERSION}-{key}.jsonl"


def read_checkpoint(path: Path) -> dict[int, dict[str, Any]]:
    """Finished layouts by index; a torn last line (a kill mid-write) is dropped and that layout is redone."""
    return {int(row["layout"]): row for row in read_jsonl_checkpoint(path)}


def fit_layout(s: Setup, pair: Any, wrong: Any, lay: KeyDoorLayout, i: int) -> dict[str, Any]:
    """Distil a fresh pair to this layout's π* and read its columns (:data:`COLUMNS`, as lists) and diagnostics."""
    from agentmill.methods.progress_advantage.train import candidate_policy_table, distill_to_optimum

    env, mdp, states = world(lay)
    pol = pair.policy.reset()
    pi_ref = candidate_policy_table(pair.reference, states, env.tabular_actions, mdp)
    Q, V, pi_star = soft_value_iteration(mdp, pi_ref, s.beta)
    trace = distill_to_optimum(pol, states, env.tabular_actions, mdp, pi_star, epochs=s.epochs,
                               batch_size=s.batch_size, tol=s.tol, seed=s.seed + i)
    pi = candidate_policy_table(pol, states, env.tabular_actions, mdp)
    pi_wrong = candidate_policy_table(wrong, states, env.tabular_actions, mdp)
    ell_pol = _loglik_table(pol, states, env.tabular_actions, mdp)
    ell_ref = _loglik_table(pair.reference, states, env.tabular_actions, mdp)
    lv = mdp.live_valid
    A = (Q - V[:, None])[lv]
    cols = {"A": A,
            "ratio": s.beta * (np.log(pi[lv]) - np.log(pi_ref[lv])),
            "free": s.beta * (ell_pol[lv] - ell_ref[lv]),
            "logpi": s.beta * np.log(pi[lv]),
            "logref": s.beta * np.log(pi_ref[lv]),
            "wrong": s.beta * (np.log(pi[lv]) - np.log(pi_wrong[lv])),
            "cluster": i * 10_000 + np.nonzero(lv)[0]}
    info = {"layout": i, "n_states": int(mdp.n_states), "n_pairs": int(lv.sum()), "epochs": list(trace.epochs),
            "mean_kl": list(trace.mean_kl), "seconds": trace.seconds, "max_abs_A": float(np.abs(A).max())}
    return {"layout": i, "info": info, "columns": {k: v.tolist() for k, v in cols.items()}}


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    import torch

    from agentmill.lm.policy import CandidatePolicy

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # [R] one thread per worker: 2 shared cores
    try:
        lays = layouts(s.n_layouts, seed=s.layout_seed, calibrate=None, config=TINY_WORLD)
        ctx.work_dir.mkdir(parents=True, exist_ok=True)
        ckpt = checkpoint_path(s, ctx.work_dir)
        done = {i: row for i, row in read_checkpoint(ckpt).items() if i < len(lays)}
        resumed = len(done)
        load_s = 0.0
        if len(done) < len(lays):
            t0 = time.perf_counter()
            pair = build_pair(s.model, temperature=s.temperature, one_shot=s.one_shot, lr=s.lr)
            wrong = CandidatePolicy(load_candidate_lm(s.wrong_reference), render_for(s.one_shot), s.temperature,
                                    record=False)
            load_s = time.perf_counter() - t0
            with open(ckpt, "a", encoding="utf-8") as f:
                for i, lay in enumerate(lays):
                    if i in done:
                        continue
                    ctx.progress("P-6a: distilling one pair per layout", len(done), len(lays))
                    done[i] = fit_layout(s, pair, wrong, lay, i)
                    append_jsonl_checkpoint(f, done[i])
        ctx.progress("P-6a: done", len(lays), len(lays))
        rows = [done[i] for i in range(len(lays))]
        per_layout = [r["info"] for r in rows]
        c = {k: np.concatenate([np.asarray(r["columns"][k], dtype=int if k == "cluster" else float) for r in rows])
             for k in COLUMNS}
        out: dict[str, Estimate] = {}
        for name, key in (("candidates", "ratio"), ("free_text", "free"), ("policy_logprob", "logpi"),
                          ("reference_logprob", "logref"), ("wrong_reference", "wrong")):
            out[f"spearman_{name}"] = _spearman_ci(c[key], c["A"], c["cluster"], s.n_boot, s.seed)
        out["max_abs_error_candidates"] = Estimate.exact(float(np.abs(c["ratio"] - c["A"]).max()))
        out["final_mean_kl"] = Estimate.exact(float(np.mean([p["mean_kl"][-1] for p in per_layout])))
        out["initial_mean_kl"] = Estimate.exact(float(np.mean([p["mean_kl"][0] for p in per_layout])))
        out["n_state_action_pairs"] = Estimate.exact(float(c["A"].size))
        out["seconds_distill"] = Estimate.exact(float(sum(p["seconds"] for p in per_layout)))
        out["seconds_load"] = Estimate.exact(load_s)
        ctx.data["layouts"] = per_layout
        ctx.data["layouts_resumed"] = resumed
        ctx.data["checkpoint"] = ckpt.name
        ctx.data["points"] = {"A": c["A"].tolist(), "candidates": c["ratio"].tolist(), "free_text": c["free"].tolist()}
        ctx.data["model"] = s.model
    finally:
        torch.set_num_threads(threads)
    if not s.judged:
        out = unjudged(out, CLAIM_METRICS, f"tiny stand-in model {s.model} in place of SmolLM2: verdicts need "
                       "hf:smollm2 (full)", ctx.data)
    return out


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    plt = pyplot()

    pts = data.get("points")
    if not pts:
        return []
    fig, ax = plt.subplots(figsize=(5, 4))
    ax.scatter(pts["A"], pts["candidates"], s=10, label="β·log(π_θ/π_ref) (candidates)")
    ax.scatter(pts["A"], pts["free_text"], s=10, marker="x", label="β·(ℓ_θ − ℓ_ref) (free text)")
    lim = [min(pts["A"]), max(pts["A"])]
    ax.plot(lim, lim, "k--", lw=0.8, label="identity")
    ax.set_xlabel("exact A*(s, a)")
    ax.set_ylabel("LM-pair score")
    ax.set_title(f"P-6a: distilled pair vs exact A* ({data.get('model', '?')})", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = out / "p6a_pair_vs_astar.png"
    save(fig, path, dpi=110)
    return [path]


EXPERIMENT = Experiment(
    id="e173.progress_lm_pair_distilled",
    quick_budget_s=40,
    parallel_safe=True,  # measure() runs torch on one thread and judges no time: it may share the cores
    title="E173 P-6a: an LM pair distilled to the exact soft optimum recovers A*",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    requires=frozenset({"hf", "peft"}),
    reads=models_read("model"),
    scale_note="Tiny KeyDoor (3 rooms, 1 lock, trap; 4 layouts of 6-10 states, ≤ 8 commands), π_ref = SmolLM2-135M "
               "CandidatePolicy at T = 1 with the one-shot prompt, LoRA (r 8, α 16, q/v) distilled to the exact π* "
               "(β = 0.5) by cross-entropy over candidates. The paper trains real agents with RL; this checks the "
               "identity end to end on LM code. Quick/smoke: an untrained tiny model at T = 20, no verdict.",
)
