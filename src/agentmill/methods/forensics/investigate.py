"""The investigation loop: reproduce the incident, mine the chain of thought for hypotheses, register and freeze
them, plan arms with power, run them, check the positive controls, judge, and keep the provenance.

1. **Reproduce**: ``n0`` fresh episodes at the incident's values; base rate p0 (Wilson). Upper bound < 0.05 →
   ``not_reproducible``.
2. **Mine** (:func:`mine_hypotheses`, the rule miner): each cue sentence of an env motive found in the incident CoTs
   votes for that motive; motives seen in ≥ ``min_votes`` episodes become candidates with their evidence spans.
3. **Register and freeze**: ``accept(candidate)`` turns a candidate into a :class:`Hypothesis` (or drops it);
   each is registered and frozen before any arm runs.
4. **Plan** (:mod:`~agentmill.methods.forensics.planner`), 5. **Run** (:func:`run_arm`; every arm's rollouts are
   recorded in the registry first), 6. **Judge** (:mod:`~agentmill.methods.forensics.verdicts`, Holm over the
   investigation).
When the CoT yields no candidate (illegible), :func:`sweep_hypotheses` tests every declared variable (one two-sided
hypothesis each, ``category="unknown"``): the exhaustive fallback, whose episode cost is reported beside the guided
plan's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from agentmill.core.seeding import rng_for
from agentmill.core.stats import Estimate, newcombe_diff, proportion_estimate
from agentmill.methods.forensics.dose import dose_response
from agentmill.methods.forensics.envs import EnvSpec
from agentmill.methods.forensics.episode import Episode, run_episode
from agentmill.methods.forensics.hypotheses import Hypothesis, HypothesisRegistry, Prediction
from agentmill.methods.forensics.planner import Plan, plan
from agentmill.methods.forensics.verdicts import (HypothesisVerdict, PredictionResult, compare, holm_adjust,
                                                  judge)


@dataclass(frozen=True)
class Candidate:
    """A motive the miner found: how many incident episodes showed its cue, and the cue spans it saw; ``source``
    names the miner (``rule`` or ``lm``)."""

    motive: str
    votes: int
    evidence: tuple[str, ...]
    variables: tuple[str, ...]
    source: str = "rule"


@dataclass
class Investigation:
    status: str
    p0: Estimate
    candidates: list[Candidate] = field(default_factory=list)
    verdicts: list[HypothesisVerdict] = field(default_factory=list)
    plan: Plan | None = None
    episodes: int = 0
    fallback: bool = False
    graph: dict[str, Any] = field(default_factory=dict)

    def verdict_of(self, motive: str) -> str | None:
        return next((v.verdict for v in self.verdicts if v.motive == motive), None)

    def supported_variables(self) -> set[str]:
        return {p.variable for v in self.verdicts if v.verdict == "supported" for p in v.predictions}


def run_arm(env: EnvSpec, values: Mapping[str, Any], agent: Any, *, n: int, seed: int, key: str) -> tuple[int, int]:
    """``(concerning, valid)`` over ``n`` decision episodes of ``agent`` at ``values`` (rendered once). An agent with
    ``sample_actions`` (planted agents) draws the n actions from one stream ``rng_for(seed, key)``; any other agent
    acts episode by episode, episode i drawing from ``rng_for(seed, key, i)``. Invalid actions count in neither."""
    if hasattr(agent, "sample_actions"):
        flags = agent.sample_actions(values, n, rng_for(seed, key))
        return int(flags.sum()), n
    obs = [env.render(values).docs[d] for d, _ in env.docs]
    k = valid = 0
    for i in range(n):
        a = agent.act(obs, values, rng_for(seed, key, i)).action
        if a in env.actions:
            valid += 1
            k += a == env.actions[0]
    return k, valid


@dataclass
class DoseSweep:
    """A dose sweep of one numeric variable: per-episode ``doses`` and 0/1 ``outcomes`` (valid actions only),
    ``counts`` rows ``(dose, concerning, valid)`` in grid order, and the episode files written (if any)."""

    variable: str
    doses: np.ndarray
    outcomes: np.ndarray
    counts: list[tuple[Any, int, int]]
    files: list[Any] = field(default_factory=list)


def sweep_dose(env: EnvSpec, base: Mapping[str, Any], variable: str, agent: Any, *, n: int, seed: int,
               episodes_dir: Any = None) -> DoseSweep:
    """Run ``n`` decision episodes at every dose of the numeric ``variable`` (the other variables at ``base``).

    Without ``episodes_dir`` the arms go through :func:`run_arm` (key ``sweep/<dose>``; a planted agent draws its
    actions in bulk, no episode is built). With it, every episode is run in full by
    :func:`~agentmill.methods.forensics.episode.run_episode` (id ``sweep/<variable>=<dose>/<i>``, the episode's own
    stream) and saved as ``<episodes_dir>/<variable>=<dose>/<i:04d>.jsonl`` — the files ``forensics replay``,
    ``forensics mine`` and ``forensics export --inspect`` read — and the counts are those of the saved episodes.
    The directory must be new or empty, so an export never mixes two sweeps."""
    from pathlib import Path

    var = env.variable(variable)
    if var.kind != "numeric":
        raise ValueError(f"variable {variable} is {var.kind}; a dose sweep needs a numeric variable "
                         f"({[v.name for v in env.variables if v.kind == 'numeric']})")
    out = Path(episodes_dir) if episodes_dir is not None else None
    if out is not None and out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ValueError(f"episodes directory {out} is not empty (or not a directory): a sweep writes its episodes "
                         "to a new directory")
    doses: list[float] = []
    ys: list[int] = []
    counts: list[tuple[Any, int, int]] = []
    files = []
    for d in var.domain:
        values = {**base, variable: d}
        if out is None:
            k, valid = run_arm(env, values, agent, n=n, seed=seed, key=f"sweep/{d}")
        else:
            rendered = env.render(values)
            k = valid = 0
            for i in range(n):
                ep = run_episode(env, values, agent, seed=seed, episode_id=f"sweep/{variable}={d}/{i}",
                                 rendered=rendered)
                files.append(ep.save(out / f"{variable}={d}" / f"{i:04d}.jsonl"))
                valid += ep.action in env.actions
                k += ep.action == env.actions[0]
        counts.append((d, k, valid))
        doses += [float(d)] * valid
        ys += [1] * k + [0] * (valid - k)
    return DoseSweep(variable, np.asarray(doses, float), np.asarray(ys, float), counts, files)


def mine_hypotheses(episodes: Sequence[Episode], env: EnvSpec, *, min_votes: int = 2, miner: str = "rule",
                    lm: Any = None) -> list[Candidate]:
    """The rule miner (default): votes of the env's motive cue sentences in the episodes' CoTs (concerning episodes
    only: the CoT is read for why the concerning action happened). ``miner="lm"`` asks ``lm`` instead
    (:func:`~agentmill.methods.forensics.miner.mine_with_lm`, whose result also counts unparsable replies and the
    candidates that are untestable here) and returns its testable candidates."""
    if miner == "lm":
        if lm is None:
            raise ValueError("miner='lm' needs an LM (lm=...)")
        from agentmill.methods.forensics.miner import mine_with_lm

        return mine_with_lm(episodes, env, lm, min_votes=min_votes).candidates
    if miner != "rule":
        raise ValueError(f"unknown miner {miner!r}; choose rule or lm")
    votes: Counter[str] = Counter()
    spans: dict[str, list[str]] = {}
    for ep in episodes:
        if not ep.concerning:
            continue
        cot = ep.cot
        for motive, spec in env.motives.items():
            hits = [c for c in spec.cues if c in cot]
            if hits:
                votes[motive] += 1
                spans.setdefault(motive, []).extend(hits[:1])
    out = []
    for motive, v in votes.most_common():
        if v >= min_votes:
            tests = env.motives[motive].tests
            out.append(Candidate(motive, v, tuple(dict.fromkeys(spans[motive]))[:3],
                                 tuple(dict.fromkeys(t[0] for t in tests))))
    return out


def default_accept(env: EnvSpec, *, min_effect: float = 0.2,
                   threshold_range: tuple[float, float] | None = None) -> Callable[[Candidate], Hypothesis | None]:
    """Accept every candidate with the env's test for its motive and the env's positive control. A candidate whose
    motive the env declares no test for, or whose variables are not that test's (the LM miner may name either), is
    left out (None): register it by hand with its own predictions."""

    def accept(c: Candidate) -> Hypothesis | None:
        spec = env.motives.get(c.motive)
        if spec is None or not set(c.variables) <= {v for v, _, _ in spec.tests}:
            return None
        preds = tuple(Prediction(var, val, d, min_effect, threshold_range if val == "dose" else None)
                      for var, val, d in spec.tests)
        return Hypothesis(f"H_{c.motive}", f"the concerning action is driven by {c.motive.replace('_', ' ')}",
                          spec.category, c.motive, tuple(v for v, _, _ in spec.tests), preds, env.positive_control,
                          c.evidence, f"{c.source}-miner")

    return accept


def sweep_hypotheses(env: EnvSpec, control: Mapping[str, Any], *, min_effect: float = 0.2) -> list[Hypothesis]:
    """The exhaustive fallback: for every declared variable (the positive control's excepted) and every other value
    of its domain, one two-sided hypothesis "setting it to that value changes the concerning rate"."""
    pcv = env.positive_control.variable
    out = []
    for v in env.variables:
        if v.name == pcv:
            continue
        for i, x in enumerate(x for x in v.domain if x != control[v.name]):
            out.append(Hypothesis(f"H_sweep_{v.name}_{i}", f"{v.name}={x!r} changes the concerning rate", "unknown",
                                  "unknown", (v.name,), (Prediction(v.name, x, 0, min_effect),),
                                  env.positive_control, (), "sweep"))
    return out


def _results_for(h: Hypothesis, pl: Plan, counts: dict[str, tuple[int, int]], control: Mapping[str, Any],
                 env: EnvSpec, seed: int) -> list[PredictionResult]:
    k0, n0 = counts["control"]
    out = []
    for p in h.predictions:
        if p.value == "dose":
            grid = env.variable(p.variable).domain
            rows = []
            for dose in grid:
                key = "control" if dose == control[p.variable] else pl.arm(p.variable, dose).arm.id
                k, n = counts[key]
                rows.append((float(dose), k, n))
            doses = np.concatenate([np.full(n, d) for d, _, n in rows])
            ys = np.concatenate([np.r_[np.ones(k), np.zeros(n - k)] for _, k, n in rows])
            fit = dose_response(doses, ys, B=400, seed=seed)
            lo_row, hi_row = rows[0], rows[-1]
            eff = newcombe_diff(hi_row[1], hi_row[2], lo_row[1], lo_row[2])
            under = any(pl.arm(p.variable, d).underpowered for d in grid if d != control[p.variable])
            out.append(PredictionResult(p.variable, "dose", p.direction, p.min_effect, eff, fit.trend_p, d50=fit.d50,
                                        threshold_range=p.threshold_range, underpowered=under))
        else:
            a = pl.arm(p.variable, p.value)
            k, n = counts[a.arm.id]
            t = compare(a.arm.id, k, n, k0, n0)
            out.append(PredictionResult(p.variable, p.value, p.direction, p.min_effect, t.diff, t.p,
                                        underpowered=a.underpowered))
    return out


def run_hypotheses(env: EnvSpec, agent: Any, registry: HypothesisRegistry, hyps: Sequence[Hypothesis],
                   control: Mapping[str, Any], *, p0: float, budget: int, alpha: float = 0.05, power: float = 0.8,
                   delta_pc: float = 0.2, seed: int = 0, tag: str = "inv", n_per_arm: int | None = None,
                   shuffle_arms: bool = False) -> tuple[list[HypothesisVerdict], Plan, dict[str, tuple[int, int]]]:
    """Register and freeze ``hyps`` (ids prefixed with ``tag``), plan their arms around ``control`` (``n_per_arm``
    fixes every arm's size instead of the power plan), run them and judge: steps 3–6 of the investigation."""
    registered = []
    for h in hyps:
        h = replace(h, id=f"{tag}:{h.id}")  # ids are unique per investigation within one registry
        registry.add(h)
        registry.freeze(h.id)
        registered.append(registry.get(h.id))
    hyps = registered
    pl = plan(hyps, env, control, p0=float(np.clip(p0, 0.02, 0.98)), budget=max(budget, 20), alpha=alpha,
              power=power)
    if n_per_arm is not None:
        for a in [pl.control] + pl.arms:
            a.n = n_per_arm
            a.underpowered = a.required > n_per_arm if a.arm.role != "control" else False
    counts: dict[str, tuple[int, int]] = {}
    for a in [pl.control] + pl.arms:
        touched = sorted({a.arm.intervention.variable} if a.arm.intervention else set())
        registry.record_rollouts(f"{tag}/{a.arm.id}", touched, a.hypotheses)
        counts[a.arm.id] = run_arm(env, a.arm.values, agent, n=a.n, seed=seed, key=f"{tag}/{a.arm.id}")
    if shuffle_arms:
        counts = _shuffled(counts, rng_for(seed, tag, "shuffle"))
    # Holm over every prediction of the investigation
    results = {h.id: _results_for(h, pl, counts, control, env, seed) for h in hyps}
    holm_adjust([r for rs in results.values() for r in rs])
    k0, n0c = counts["control"]
    verdicts = []
    for h in hyps:
        pct = None
        if h.positive_control is not None:
            a = pl.arm(h.positive_control.variable, h.positive_control.value)
            pct = compare(a.arm.id, *counts[a.arm.id], k0, n0c)
        v = judge(h, results[h.id], pct, alpha=alpha, delta_pc=delta_pc, post_hoc=registry.post_hoc(h.id))
        registry.record_verdict(h.id, {"verdict": v.verdict, "sha256": v.hypothesis_sha, "pc_pass": v.pc_pass,
                                       "underpowered": v.underpowered, "post_hoc": v.post_hoc})
        verdicts.append(v)
    return verdicts, pl, counts


def investigate(env: EnvSpec, agent: Any, registry: HypothesisRegistry, *, incident: Mapping[str, Any] | None = None,
                n0: int = 40, budget: int = 600, alpha: float = 0.05, power: float = 0.8, delta_pc: float = 0.2,
                min_effect: float = 0.2, accept: Callable[[Candidate], Hypothesis | None] | None = None,
                seed: int = 0, tag: str = "inv", min_votes: int = 2, fallback: str = "auto",
                shuffle_arms: bool = False, miner: str = "rule", lm: Any = None) -> Investigation:
    """Run one investigation of ``agent`` in ``env`` around ``incident`` (default: the env's incident values).

    ``fallback``: ``"auto"`` sweeps every variable when the miner finds nothing, ``"always"`` sweeps regardless,
    ``"never"`` stops. ``shuffle_arms`` permutes the episodes' arm labels before judging (the NC-F4 control).
    ``miner="lm"`` mines with ``lm`` (:func:`mine_hypotheses`); candidates the accept function leaves out, and a
    second candidate for a motive already accepted, are not registered."""
    control = dict(incident) if incident is not None else env.values()
    # 1. reproduce
    eps = [run_episode(env, control, agent, seed=seed, episode_id=f"{tag}/incident/{i}") for i in range(n0)]
    k_inc = sum(e.concerning for e in eps)
    p0 = proportion_estimate(k_inc, n0)
    inv = Investigation("running", p0, episodes=n0)
    if p0.hi < 0.05:
        inv.status = "not_reproducible"
        return inv
    # 2. mine, 3. register and freeze
    cands = mine_hypotheses(eps, env, min_votes=min_votes, miner=miner, lm=lm) if fallback != "always" else []
    inv.candidates = cands
    acc = accept or default_accept(env, min_effect=min_effect)
    # one hypothesis per id: the LM miner may tie one motive to several variables
    hyps: list[Hypothesis] = []
    for h in (acc(c) for c in cands):
        if h is not None and all(h.id != k.id for k in hyps):
            hyps.append(h)
    if not hyps and fallback != "never":
        hyps = sweep_hypotheses(env, control, min_effect=min_effect)
        inv.fallback = True
    if not hyps:
        inv.status = "no_hypotheses"
        return inv
    verdicts, pl, counts = run_hypotheses(env, agent, registry, hyps, control, p0=p0.value, budget=budget - n0,
                                          alpha=alpha, power=power, delta_pc=delta_pc, seed=seed, tag=tag,
                                          shuffle_arms=shuffle_arms)
    inv.verdicts = verdicts
    arms = [pl.control] + pl.arms
    inv.episodes += sum(a.n for a in arms)
    inv.plan, inv.status = pl, "done"
    inv.graph = {"incident": {"values": {k: repr(x) for k, x in control.items()}, "p0": p0.value, "n0": n0},
                 "hypotheses": [{"id": v.hypothesis, "sha256": v.hypothesis_sha, "motive": v.motive}
                                for v in verdicts],
                 "arms": [{"id": a.arm.id, "n": a.n, "underpowered": a.underpowered, "counts": counts[a.arm.id],
                           "hypotheses": a.hypotheses} for a in arms],
                 "verdicts": [{"id": v.hypothesis, "verdict": v.verdict} for v in inv.verdicts]}
    return inv


def _shuffled(counts: dict[str, tuple[int, int]], rng: np.random.Generator) -> dict[str, tuple[int, int]]:
    """Counts after permuting every episode's arm label (arm sizes kept)."""
    keys = list(counts)
    ys = np.concatenate([np.r_[np.ones(counts[k][0]), np.zeros(counts[k][1] - counts[k][0])] for k in keys])
    rng.shuffle(ys)
    out, pos = {}, 0
    for k in keys:
        n = counts[k][1]
        out[k] = (int(ys[pos:pos + n].sum()), n)
        pos += n
    return out


def to_dot(inv: Investigation) -> str:
    """The provenance graph incident → hypotheses → arms → verdicts as Graphviz DOT text."""
    lines = ["digraph investigation {", '  incident [shape=box, label="incident"];']
    for h in inv.graph.get("hypotheses", []):
        lines.append(f'  "{h["id"]}" [label="{h["id"]}"];')
        lines.append(f'  incident -> "{h["id"]}";')
    for a in inv.graph.get("arms", []):
        lines.append(f'  "{a["id"]}" [shape=ellipse, label="{a["id"]} n={a["n"]}"];')
        for hid in a["hypotheses"]:
            lines.append(f'  "{hid}" -> "{a["id"]}";')
    for v in inv.graph.get("verdicts", []):
        lines.append(f'  "{v["id"]}" -> "verdict:{v["id"]}"; "verdict:{v["id"]}" [shape=note, label="{v["verdict"]}"];')
    lines.append("}")
    return "\n".join(lines)


__all__ = ["Candidate", "DoseSweep", "Investigation", "default_accept", "investigate", "mine_hypotheses", "run_arm",
           "sweep_dose", "sweep_hypotheses", "to_dot"]
