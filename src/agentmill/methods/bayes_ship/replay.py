"""Replay of recorded candidate pools: walk one instance's cached candidates under a policy.

Accounting ([R], the same for every policy): each candidate costs c_gen, the first included; a critic costs c_k and
reveals the cached outcome; ``generate`` moves to the next cached candidate (running out means giving up); ``verify``
pays R·y − c_ver and ends. A critic is run at most once per candidate: a policy that asks again gets no new evidence
and pays again, and the 64-action cap ends such a loop ([C] the authors' replay has the cap; their greedy wrapper
re-applied the same cached outcome as new evidence, which agentmill does not).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate, mean_estimate, paired_diff
from agentmill.methods.bayes_ship.config import Calibration, CostModel
from agentmill.methods.bayes_ship.core import Belief, ControlState, EpisodeResult, family_used

RECORD_SCHEMA = "agentmill.bayes_ship.candidate/1"


@dataclass(frozen=True)
class CandidateRecord:
    """One candidate of one instance, with every critic's outcome and the oracle label."""

    instance_id: str
    candidate_id: str
    step: int
    critics: Mapping[str, bool]
    y: bool | None
    parent_id: str | None = None
    critic_cost: Mapping[str, float] = field(default_factory=dict)
    oracle_cost: float | None = None
    diff_sha256: str = ""
    generator: str = ""
    repo: str = ""
    meta: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        d = asdict(self)
        d["critics"], d["critic_cost"], d["meta"] = dict(self.critics), dict(self.critic_cost), dict(self.meta)
        return json.dumps({"schema": RECORD_SCHEMA, **d}, sort_keys=True, default=str)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CandidateRecord:
        if d.get("schema", RECORD_SCHEMA) != RECORD_SCHEMA:
            raise ValueError(f"candidate record schema {d.get('schema')!r} is not {RECORD_SCHEMA!r}")
        y = d.get("y")
        return cls(str(d["instance_id"]), str(d["candidate_id"]), int(d.get("step", 0)),
                   {str(k): bool(v) for k, v in d["critics"].items()}, None if y is None else bool(y),
                   d.get("parent_id"), {str(k): float(v) for k, v in (d.get("critic_cost") or {}).items()},
                   d.get("oracle_cost"), str(d.get("diff_sha256", "")), str(d.get("generator", "")),
                   str(d.get("repo", "")), dict(d.get("meta") or {}))


def read_records(path: str | Path) -> list[CandidateRecord]:
    out = []
    for i, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                out.append(CandidateRecord.from_dict(json.loads(line)))
            except (KeyError, ValueError, TypeError) as e:
                raise ValueError(f"{path}:{i}: bad candidate record ({e})") from None
    return out


def by_instance(records: Iterable[CandidateRecord]) -> list[list[CandidateRecord]]:
    """Group records into per-instance trajectories ordered by step (instances in first-seen order)."""
    groups: dict[str, list[CandidateRecord]] = {}
    for r in records:
        groups.setdefault(r.instance_id, []).append(r)
    return [sorted(g, key=lambda r: r.step) for g in groups.values()]


def simulate_policy(traj: Sequence[CandidateRecord], policy: Any, cost: CostModel, *, max_actions: int = 64,
                    charge_first_generate: bool = True, calib: Calibration | None = None,
                    max_candidates: int | None = None) -> EpisodeResult:
    """Replay ``policy`` over one instance's cached candidates. The belief a policy sees is computed with its own
    ``calib`` attribute (Bayesian controllers) or ``calib``; baselines do not read it."""
    model = getattr(policy, "calib", None) or calib
    clip = getattr(getattr(policy, "cfg", None), "prob_clip", 1e-6)
    J = min(len(traj), max_candidates or len(traj))
    belief = Belief(model.prior if model else 0.5, clip)
    costs = {"generate": cost.c_gen if charge_first_generate else 0.0}
    actions, beliefs = ["generate"], [belief.value]
    j, step, used, outcomes = 0, 0, [], []
    reward, outcome, y = 0.0, "gave_up", None
    for _ in range(max_actions):
        s = ControlState(belief.value, frozenset(used), step, j + 1, tuple(outcomes), J)
        d = policy.decide(s)
        cand = traj[j]
        if d.action == "critic":
            k = d.critic
            if k not in cand.critics:
                raise ValueError(f"instance {cand.instance_id}: candidate {cand.candidate_id} has no outcome for "
                                 f"critic {k!r}")
            costs[k] = costs.get(k, 0.0) + cost.critic_costs[k]
            if k not in used:
                if model is not None and k in model.critics and not family_used(model, k, frozenset(used)):
                    belief = belief.update(model.critics[k], cand.critics[k])
                used.append(k)
                outcomes.append((k, cand.critics[k]))
            step += 1
            actions.append(f"critic:{k}")
        elif d.action == "generate":
            if j + 1 >= J:
                actions.append("give_up")
                break
            costs["generate"] += cost.c_gen
            j += 1
            step += 1
            used, outcomes = [], []
            belief = belief.after_generate(model.kernel) if model is not None else belief
            actions.append("generate")
        elif d.action == "verify":
            costs["verify"] = cost.c_ver
            y = traj[j].y
            if y is None:
                raise ValueError(f"instance {cand.instance_id}: candidate {cand.candidate_id} has no oracle label")
            reward = cost.R if y else 0.0
            outcome = "verified_correct" if y else "verified_wrong"
            actions.append("verify")
            break
        elif d.action == "ship":
            y = traj[j].y
            loss = cost.wrong_ship_loss or 0.0
            reward = cost.R if y else -loss
            outcome = "shipped"
            actions.append("ship")
            break
        else:
            actions.append("give_up")
            break
        beliefs.append(belief.value)
    else:
        actions.append("give_up (max_actions)")
    return EpisodeResult(reward - sum(costs.values()), costs, actions, beliefs, outcome, y,
                         {"candidates": j + 1, "instance_id": traj[0].instance_id if traj else ""})


@dataclass
class PolicyTable:
    names: list[str]
    utilities: dict[str, list[float]]
    mean: dict[str, Estimate]
    vs_reference: dict[str, Estimate]
    reference: str

    def best(self, among: Sequence[str] | None = None) -> str:
        pool = among if among is not None else self.names
        return max(pool, key=lambda n: self.mean[n].value)

    def diff(self, a: str, b: str, *, n_boot: int = 1000, seed: int = 42) -> Estimate:
        return paired_diff(self.utilities[a], self.utilities[b], n_boot=n_boot, seed=seed)

    def to_text(self) -> str:
        w = max(len(n) for n in self.names)
        lines = [f"{'policy':<{w}}  mean utility [95% CI]          Δ vs {self.reference}"]
        for n in self.names:
            lines.append(f"{n:<{w}}  {self.mean[n].fmt():<28}  {self.vs_reference[n].fmt()}")
        return "\n".join(lines)


def compare_policies(trajs: Sequence[Sequence[CandidateRecord]], policies: Sequence[Any], cost: CostModel, *,
                     n_boot: int = 1000, seed: int = 42, reference: str = "always_verify",
                     calib: Calibration | None = None, max_candidates: int | None = None) -> PolicyTable:
    """Replay every policy on every instance; paired-bootstrap differences vs ``reference`` ([C] B = 1000, seed
    42, 95 % percentile interval)."""
    names = [p.name for p in policies]
    if len(set(names)) != len(names):
        raise ValueError(f"duplicate policy names {names}")
    util = {p.name: [simulate_policy(t, p, cost, calib=calib, max_candidates=max_candidates).utility for t in trajs]
            for p in policies}
    ref = reference if reference in util else names[0]
    mean = {n: mean_estimate(util[n], n_boot=n_boot, seed=seed) for n in names}
    vs = {n: (paired_diff(util[n], util[ref], n_boot=n_boot, seed=seed) if n != ref
              else Estimate.exact(0.0, n=len(trajs))) for n in names}
    return PolicyTable(names, util, mean, vs, ref)


def utilities(trajs: Sequence[Sequence[CandidateRecord]], policy: Any, cost: CostModel, **kw: Any) -> np.ndarray:
    return np.array([simulate_policy(t, policy, cost, **kw).utility for t in trajs])
