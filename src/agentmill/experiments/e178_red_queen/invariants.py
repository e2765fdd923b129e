"""E178 RQ-1: controlled utility evolution holds its invariants, over many random workspaces.

A random workspace has 1–2 judge slots, 1–2 judge-dependent roles and one judge-independent role with 2–6 tasks;
each node has a hidden quality, and a judge's verdict on a node mixes that quality with the judge's own lean. Each
slot's anchor is a random labelled set; a judge is right on an item with its own accuracy (a fixed stream per judge
id), and challengers draw random accuracies near the incumbent's, so replacements do happen. Every run is checked:

1. the judge is constant within an epoch (one tag per slot and epoch);
2. replacements happen only at checkpoints;
3. the statistic decided as stated (McNemar: replace iff p < α/K and b > c, the largest b − c wins; best-belief:
   only a strictly greater challenger replaces, ties and worse keep the incumbent);
4. after a replacement every valid dependent record carries the new tag, and nothing else was invalidated;
5. records with dep = ∅ are never invalidated;
6. the number of checkpoints is ≤ ⌊log₂(B/8)⌋ + 2;
plus, once per run of the experiment: an always-expanding workspace with B = 64 and α = 0.6 grows an archive of 13
[C]; for every ``ledger_every``-th workspace, the on-disk ledger verifies, a replay of it equals ``state.json``, and a
run killed after a random event and resumed ends with the same head hash and state (bit-identical).
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.seeding import rng_for
from agentmill.core.stats import Estimate
from agentmill.experiments.e178_red_queen import PAPER
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, Experiment, RunContext


@dataclass(frozen=True)
class Setup:
    workspaces: int = 200
    budget_min: int = 16
    budget_max: int = 160
    ledger_every: int = 20
    """Every n-th workspace also runs on disk: verify, replay = snapshot, kill + resume."""
    seed: int = 0


SETUPS = {"smoke": Setup(workspaces=6, ledger_every=3), "quick": Setup(), "full": Setup(workspaces=1000,
                                                                                       ledger_every=10)}

CLAIMS = (
    Claim("RQ-1", "Controlled utility evolution holds its invariants (judge frozen per epoch, replacements only at "
          "checkpoints, the stated statistic, selective erasure, dep = ∅ never erased, the checkpoint bound, the "
          "archive of 13, replay = snapshot, kill + resume bit-identical): share of checks passed over random "
          "workspaces.", "[A][C] per-epoch guarantees; checks [R]", "—", "rq1_checks_passed", ">=", 1.0,
          judge_on="exact", exact_why="a count over a fixed battery of seeded random workspaces: each run is a "
          "deterministic function of its seed"),
)


@dataclass(frozen=True)
class SynthJudge:
    judge_id: str
    accuracy: float
    lean: float

    def accept(self, items: Any) -> np.ndarray:
        """items = (item ids, labels): right on each item with this judge's accuracy (a fixed stream per id)."""
        ids, labels = items
        right = rng_for("synth_judge", self.judge_id).random(256)[ids] < self.accuracy
        return np.where(right, labels, 1 - labels).astype(bool)

    def to_spec(self) -> dict[str, Any]:
        return {"judge_id": self.judge_id, "accuracy": self.accuracy, "lean": self.lean}


class SynthWorkspace:
    def __init__(self, rng: np.random.Generator, n_slots: int, always_expand: bool = False) -> None:
        from agentmill.methods.red_queen import RoleSpec

        self.always_expand = always_expand
        n_dep = int(rng.integers(1, 3))
        self._roles = [RoleSpec(f"dep{i}", "evaluator_dependent",
                                tuple(f"t{j}" for j in range(int(rng.integers(2, 7)))), slot=i % n_slots)
                       for i in range(n_dep)]
        self._roles.append(RoleSpec("fixed", "evaluator_independent", tuple(f"t{j}" for j in
                                                                            range(int(rng.integers(2, 7))))))

    def roles(self):
        return self._roles

    def seed(self):
        return [0.5]

    def expand(self, parent, rng):
        if not self.always_expand and rng.random() < 0.1:
            return None
        return [float(np.clip(parent.state[0] + rng.normal(0, 0.15), 0.01, 0.99))]

    def evaluate(self, node, role, task, judge, rng):
        q = node.state[0]
        if judge is None:
            return int(rng.random() < q)
        return int(rng.random() < np.clip(q + judge.lean, 0, 1))


class SynthSlot:
    def __init__(self, slot: int, rng: np.random.Generator, n_challengers: int) -> None:
        from agentmill.methods.red_queen import SealedAnchor

        self.slot = slot
        n = int(rng.integers(60, 200))
        labels = (rng.random(n) < 0.5).astype(int)
        self.anchor = SealedAnchor((np.arange(n), labels), labels)
        self.k = n_challengers
        self.audit_labels_used = 0
        self._inc = SynthJudge(f"s{slot}.J0", float(rng.uniform(0.6, 0.8)), float(rng.uniform(-0.3, 0.3)))

    def incumbent(self):
        return self._inc

    def challengers(self, view, rng):
        base = float(rng.uniform(0.55, 0.95))
        return [SynthJudge(f"s{self.slot}@{view.at_eval}.c{i}", float(np.clip(base + rng.normal(0, 0.05), 0.5, 0.99)),
                           float(rng.uniform(-0.3, 0.3))) for i in range(self.k)]

    def judge_from_spec(self, spec):
        return SynthJudge(spec["judge_id"], spec["accuracy"], spec["lean"])


def build(seed: int, budget: int, statistic: str, erasure: str, ledger_dir: Path | None = None,
          always_expand: bool = False, alpha_ucb: float = 0.6):
    from agentmill.methods.red_queen import RedQueenConfig, RedQueenSearch

    rng = rng_for("rq1", seed)
    n_slots = int(rng.integers(1, 3))
    ws = SynthWorkspace(rng, n_slots, always_expand)
    k = int(rng.integers(1, 5))
    slots = {s: SynthSlot(s, rng, k) for s in range(n_slots)}
    cfg = RedQueenConfig(budget=budget, seed=seed, statistic=statistic, erasure=erasure, n_challengers=k,
                         min_anchor_outcomes=50, ucb_air_alpha=alpha_ucb)
    return RedQueenSearch(ws, slots, cfg, ledger_dir, describe={"rq1_seed": seed})


def check_run(search) -> dict[str, bool]:
    """The per-run invariants (1–6) on a finished search."""
    from agentmill.methods.red_queen.stats import best_belief, max_checkpoints, mcnemar_replace

    cfg = search.config
    led = search.ledger
    ok: dict[str, bool] = {}
    # 1. one tag per (slot, epoch)
    tags: dict[tuple[int, int], set[str]] = {}
    slots = list(search.slots)
    for r in led.records:
        for s in r.dep:
            tags.setdefault((s, r.epoch[slots.index(s)]), set()).add(r.tags[s])
    ok["judge_constant_in_epoch"] = all(len(v) == 1 for v in tags.values())
    # 2. replacements only at checkpoints
    ok["replace_only_at_checkpoints"] = all(rep["at_eval"] in search.checkpoints for rep in search.replacements)
    # 3. the statistic decided as stated
    good = True
    for c in search.checkpoint_log:
        tests = c["tests"]
        if cfg.statistic == "mcnemar":
            k = c["n_challengers"]
            passing = []
            for t in tests:
                want, p = mcnemar_replace(t["b"], t["c"], alpha=cfg.alpha, n_tests=k)
                good &= want == t["pass"] and want == (p < cfg.alpha / k and t["b"] > t["c"])
                if want:
                    passing.append(t)
            good &= c["replaced"] == bool(passing)
            if passing:
                top = max(t["b"] - t["c"] for t in passing)
                good &= c["new_judge"]["judge_id"] == next(t["judge"] for t in passing if t["b"] - t["c"] == top)
        else:
            inc = tests[0]
            good &= bool(inc.get("incumbent"))
            good &= all(abs(t["bb"] - best_belief(t["S"], t["F"], cfg.bb_epsilon)) < 1e-12 for t in tests)
            better = [t for t in tests[1:] if t["bb"] > inc["bb"]]
            good &= c["replaced"] == bool(better)
            if better:
                good &= c["new_judge"]["judge_id"] == max(better, key=lambda t: t["bb"])["judge"]
    ok["statistic_as_stated"] = bool(good)
    # 4. after replacement every valid dependent record carries the current tag; only those were invalidated
    current = {s: j.judge_id for s, j in search.judges.items()}
    if cfg.erasure == "invalidate":
        ok["valid_records_carry_current_tag"] = not led.stale_valid(current)
    else:
        ok["valid_records_carry_current_tag"] = all(r.valid for r in led.records)
    # 5. dep = ∅ never invalidated
    ok["independent_never_invalidated"] = all(r.valid for r in led.records if not r.dep)
    # 6. the checkpoint bound
    ok["checkpoint_bound"] = len(search.checkpoints) <= max_checkpoints(cfg.budget, cfg.checkpoint_min)
    return ok


def check_disk(seed: int, budget: int, statistic: str, erasure: str, tmp: Path) -> dict[str, bool]:
    """verify + replay = snapshot + kill/resume bit-identical, for one workspace."""
    import json

    from agentmill.core.ledger import Ledger
    from agentmill.methods.red_queen.search import snapshot

    full = tmp / f"full{seed}"
    s1 = build(seed, budget, statistic, erasure, full)
    s1.run()
    state = json.loads((full / "state.json").read_text())
    replay = build(seed, budget, statistic, erasure, full)
    replay._start_or_resume()
    out = {"ledger_verifies": not Ledger(full).verify(),
           "replay_equals_snapshot": json.loads(json.dumps(snapshot(replay))) == state}
    lines = (full / "ledger.jsonl").read_bytes().splitlines(keepends=True)
    cut = int(rng_for("rq1kill", seed).integers(2, len(lines)))
    part = tmp / f"part{seed}"
    part.mkdir()
    (part / "blobs").mkdir()
    (part / "ledger.jsonl").write_bytes(b"".join(lines[:cut]) + lines[cut][: len(lines[cut]) // 2])  # torn line
    for b in (full / "blobs").iterdir():
        shutil.copy(b, part / "blobs" / b.name)
    s2 = build(seed, budget, statistic, erasure, part)
    s2.run()
    out["kill_resume_bit_identical"] = (Ledger(part).head == Ledger(full).head
                                       and json.loads((part / "state.json").read_text()) == state)
    return out


def archive_of_13() -> bool:
    s = build(12345, 64, "mcnemar", "invalidate", always_expand=True, alpha_ucb=0.6)
    s.run()
    return len(s.nodes) == 13


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    rows = []
    failures = []
    with tempfile.TemporaryDirectory(dir=ctx.work_dir) as td:
        for i in range(s.workspaces):
            seed = s.seed * 1_000_003 + i
            rng = rng_for("rq1cfg", seed)
            budget = int(rng.integers(s.budget_min, s.budget_max + 1))
            statistic = "mcnemar" if rng.random() < 0.5 else "best_belief"
            erasure = "invalidate" if rng.random() < 0.85 else "off"
            search = build(seed, budget, statistic, erasure)
            search.run()
            checks = check_run(search)
            if i % s.ledger_every == 0:
                checks.update(check_disk(seed, budget, statistic, erasure, Path(td)))
            rows.append({"seed": seed, "budget": budget, "statistic": statistic, "erasure": erasure,
                         "replacements": len(search.replacements), "n_invalid": len(search.ledger.records)
                         - search.ledger.n_valid, "checks": checks})
            failures += [f"{seed}:{k}" for k, v in checks.items() if not v]
            ctx.progress("workspaces", i + 1, s.workspaces)
    a13 = archive_of_13()
    n_checks = sum(len(r["checks"]) for r in rows) + 1
    n_pass = sum(sum(r["checks"].values()) for r in rows) + int(a13)
    ctx.data.update({"rows": rows, "failures": failures[:50], "archive_of_13": a13})
    return {"rq1_checks_passed": Estimate.exact(n_pass / n_checks, n=n_checks),
            "rq1_replacements_total": Estimate.exact(float(sum(r["replacements"] for r in rows)), n=len(rows)),
            "rq1_workspaces": Estimate.exact(float(len(rows)), n=len(rows))}


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    plt = pyplot()
    rows = data["rows"]
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.scatter([r["budget"] for r in rows], [r["replacements"] for r in rows], s=8,
               c=["C0" if r["statistic"] == "mcnemar" else "C1" for r in rows])
    ax.set_xlabel("budget (evaluations)")
    ax.set_ylabel("replacements in the run")
    ax.set_title("Random workspaces checked (blue McNemar, orange best-belief)", fontsize=8)
    fig.tight_layout()
    p = out / "rq1_workspaces.png"
    save(fig, p)
    return [p]


EXPERIMENT = Experiment(
    id="e178.invariants",
    title="E178 Red Queen: the search holds its invariants over random workspaces",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    quick_budget_s=20,
    parallel_safe=True,
    scale_note="synthetic workspaces and judges (no model); 200 (quick) / 1,000 (full) random workspaces, every "
               "20th (10th) also on disk with a kill and resume.",
)
