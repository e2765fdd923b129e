"""The AutoCog loop ([C] ``main_decision_making_binary.py``; [R]), every step memoised in the hash-chained ledger.

Each step has a stable key (``r2/s1/proposal``) and a deterministic RNG derived from (seed, round, slot, step).
On resume the loop re-runs from the top: a step whose key is in the ledger returns its recorded payload instead
of recomputing, so a run killed at any point continues without loss or duplication and ends with the same ledger
head hash and ``state.json`` as an uninterrupted run.

LLM roles (``uses_lm``) are bound to the ledger: while a step is computed, ``ledger.scope`` names it, and each LM
call the role makes becomes an ``lm_call`` event under that step before its reply is used; on resume the reply comes
back from the ledger. The config event lists the LM-driven roles, so the audit can require their calls.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.ledger import Ledger, canonical
from agentmill.core.records import write_bytes_atomic
from agentmill.core.seeding import derive_seed
from agentmill.methods.autocog.agents.base import PoolView, Verdict
from agentmill.methods.autocog.design import Design
from agentmill.methods.autocog.gate import JSD_THRESHOLD, jsd_gate, power_gate, welch_gate
from agentmill.methods.autocog.library import theory_from_spec
from agentmill.methods.autocog.metrics import metric_from_json, predicted_estimate
from agentmill.methods.autocog.scoring import leaderboard, prospective_scores, raw_errors
from agentmill.methods.autocog.simulate import Data
from agentmill.methods.autocog.theory import sha256


@dataclass(frozen=True)
class LoopConfig:
    """Loop settings; defaults follow the repository [C `src/run_config.py`, `src/autocog.py`]."""

    n_rounds: int = 5
    """Rounds of (2 proposals, data, scoring, verdict, revision); the paper's runs use 5 [C]."""
    n_sim: int = 50
    """Simulated subjects per theory in proposals and backfill (n_runs = 50 [C])."""
    n_real: int = 25
    """Real participants per observation (REAL_N_SUBJECTS = 25 [C])."""
    alpha: float = 0.01
    """Gate level (function default in the code [C]; a stale comment says 0.05)."""
    validation_round: bool = True
    """One final data-only round after the last revision; the surfaced theory is picked after it [R]."""
    on_missing_real: str = "exclude"
    """Observations whose metric failed on real data: 'exclude' (default [R]) or 'paper' (score everyone 1)."""
    seed: int = 0
    """Run seed; every step's RNG derives from (seed, round, slot, step)."""
    gate: str = "welch"
    """Discrimination gate [R]: 'welch' (the paper's [C]), 'power' (Monte Carlo power at
    the real N), 'jsd_static' / 'jsd_sequence' (JSD of the simulated choices [C `src/jsd.py`])."""
    target_power: float = 0.8
    """Power gate: accept iff the estimated power is >= this ([R] default)."""
    jsd_threshold: float = JSD_THRESHOLD
    """JSD gates: accept iff JSD > this (0.0407 [C `configs/jsd_threshold.json`])."""

    def __post_init__(self) -> None:
        if self.gate not in GATES:
            raise ValueError(f"LoopConfig.gate: {self.gate!r} is not one of {', '.join(GATES)}")

    def ledger_json(self) -> dict:
        """The config as ledgered: the gate fields appear only when not at their defaults, so the config event of a
        Welch run (and with it every existing ledger's resume check) is unchanged."""
        d = asdict(self)
        for k, default in (("gate", "welch"), ("target_power", 0.8), ("jsd_threshold", JSD_THRESHOLD)):
            if d[k] == default:
                del d[k]
        return d


GATES = ("welch", "power", "jsd_static", "jsd_sequence")


def _rng(seed: int, *key) -> np.random.Generator:
    return np.random.default_rng(derive_seed(seed, *key))


@dataclass
class RunResult:
    status: str
    leaderboard: list
    surfaced: str | None
    surfaced_spec: dict | None
    n_obs: int
    gate_pass_rate: float
    ledger_head: str
    history: list = field(default_factory=list)
    prospective: dict = field(default_factory=dict)
    """Theory name → score on observations after its admission only (None if none; in-sample otherwise [R])."""


class AutoCogLoop:
    def __init__(self, config: LoopConfig, *, seeds: tuple, advocates: tuple, arbiter, reviser, cohort,
                 run_dir: Path, exclude_pairs: frozenset = frozenset(), force_config: bool = False) -> None:
        self.cfg, self.seeds, self.advocates, self.arbiter, self.reviser, self.cohort = (
            config, seeds, advocates, arbiter, reviser, cohort)
        self.run_dir = Path(run_dir)
        self.ledger = Ledger(self.run_dir)
        self.exclude_pairs = exclude_pairs
        self.force_config = force_config
        self.theories: dict[str, Any] = {}
        self.admitted_round: dict[str, int] = {}
        self.slots: list[str] = []
        self.obs: list[dict] = []
        self.history: list[dict] = []
        roles = {**{f"advocate{k}": a for k, a in enumerate(advocates, 1)}, "arbiter": arbiter, "reviser": reviser}
        self.lm_roles = sorted(name for name, r in roles.items() if getattr(r, "uses_lm", False))
        for name in self.lm_roles:
            roles[name].bind_ledger(self.ledger)

    # -- memoised step --------------------------------------------------------------------------------------
    def _step(self, key: str, kind: str, fn, *, round: int | None = None, slot: int | None = None) -> Any:
        got = self.ledger.get(key)
        if got is not None or self.ledger.has(key):
            return got
        self.ledger.scope = {"step": key, "round": round, "slot": slot, "n": 0}
        try:
            payload = fn()
        finally:
            self.ledger.scope = None
        self.ledger.append(kind, key, payload, round=round, slot=slot)
        return json.loads(canonical(payload))

    def _register(self, spec: dict, rnd: int) -> str:
        t = theory_from_spec(spec)
        if t.content_id not in self.theories:
            self.theories[t.content_id] = t
            self.admitted_round[t.content_id] = rnd
        return t.content_id

    def view(self) -> PoolView:
        return PoolView(self.theories, list(self.slots), self.obs, self.exclude_pairs)

    def _backfill(self, rnd: int) -> None:
        for o in self.obs:
            for tid, t in self.theories.items():
                if tid in o["preds"]:
                    continue
                val = self._step(f"pred/{o['obs_id']}/{tid}", "prediction", lambda: {
                    "value": predicted_estimate(t, o["design"], o["metric"], self.cfg.n_sim,
                                                (o["seed"], "pred")).value}, round=rnd)
                o["preds"][tid] = val["value"]

    def _leaderboard(self) -> list:
        return leaderboard(self.view().scoring_rows(), list(self.theories), on_missing_real=self.cfg.on_missing_real)

    # -- the run --------------------------------------------------------------------------------------------
    def run(self) -> RunResult:
        cfg = self.cfg
        conf = {"config": cfg.ledger_json(), "cohort": self.cohort.describe(),
                "seeds": [s.spec for s in self.seeds]}
        if self.lm_roles:  # absent for programmatic runs, whose config hash is unchanged
            conf["lm_roles"] = self.lm_roles
        rec = self._step("config", "config", lambda: conf)
        if rec != json.loads(canonical(conf)) and not self.force_config:
            raise ValueError("resume with a config different from the ledgered one (use --force-config)")
        for s in self.seeds:
            self.slots.append(self._register(s.spec, 0))
        n_total = cfg.n_rounds + (1 if cfg.validation_round else 0)
        for rnd in range(1, n_total + 1):
            validation = rnd > cfg.n_rounds
            self._step(f"r{rnd}/started", "round_started", lambda: {"round": rnd, "validation": validation},
                       round=rnd)
            for k in (1, 2):
                own, opp = self.theories[self.slots[k - 1]], self.theories[self.slots[2 - k]]
                prop = self._step(f"r{rnd}/s{k}/proposal", "proposal", lambda: self._propose(rnd, k, own, opp),
                                  round=rnd, slot=k)
                self._step(f"r{rnd}/s{k}/gate", "gate_result", lambda: prop["gate"], round=rnd, slot=k)
                obs_id = f"o{rnd:02d}{k}"
                self._step(f"r{rnd}/s{k}/commit", "observation_committed",
                           lambda: {"obs_id": obs_id, "design_id": Design.from_json(prop["design"]).content_id(),
                                    "gate_passed": prop["gate"]["accepted"]}, round=rnd, slot=k)
                self._step(f"r{rnd}/s{k}/request", "data_requested", lambda: {"obs_id": obs_id, "n": cfg.n_real},
                           round=rnd, slot=k)
                if hasattr(self.cohort, "request"):  # idempotent: recruiting for both observations starts now
                    self.cohort.request(obs_id, Design.from_json(prop["design"]))
                self.obs.append({"obs_id": obs_id, "round": rnd, "slot": k, "design": Design.from_json(prop["design"]),
                                 "metric": metric_from_json(prop["metric"]), "real": None, "preds": {},
                                 "gate_passed": prop["gate"]["accepted"], "seed": derive_seed(cfg.seed, obs_id),
                                 "collected": False})
            for o in self.obs[-2:]:
                if not self.ledger.has(f"data/{o['obs_id']}"):
                    data = self.cohort.collect(o["obs_id"], o["design"], cfg.n_real)
                    if data is None:
                        self._write_state("awaiting_data")
                        return self._result("awaiting_data")
                    est = o["metric"](data)
                    self.ledger.append("data_collected", f"data/{o['obs_id']}",
                                       {"data": data.to_json(), "data_sha256": sha256(data.to_json()),
                                        "real": est.value, "real_variance": est.variance,
                                        "n": data.n_subjects}, round=rnd)
                rec = self.ledger.get(f"data/{o['obs_id']}")
                o["real"] = rec["real"]
            self._backfill(rnd)
            lb = self._step(f"r{rnd}/lb_data", "leaderboard", lambda: {"phase": "post_data",
                                                                        "scores": self._leaderboard()}, round=rnd)
            self.history.append({"round": rnd, "phase": "post_data", "scores": dict(lb["scores"])})
            if validation:
                self._step(f"r{rnd}/completed", "round_completed", lambda: {"round": rnd}, round=rnd)
                break
            s1, s2 = (self.theories[i] for i in self.slots)
            v = self._step(f"r{rnd}/verdict", "verdict", lambda: self.arbiter.judge(s1, s2, self.view()).to_json(),
                           round=rnd)
            verdict = Verdict(**v)
            tgt, other = self.slots[verdict.target_slot - 1], self.slots[2 - verdict.target_slot]

            def _revise():
                r = self.reviser.revise(verdict, self.theories[tgt], self.theories[other], self.view(),
                                        _rng(cfg.seed, rnd, verdict.target_slot, "revise"))
                return {"theory": r.theory.spec, "name": r.theory.name, "loss": r.loss,
                        "improved_over_target": r.improved_over_target, "candidates": r.candidates}
            rev = self._step(f"r{rnd}/candidates", "candidate", _revise, round=rnd)
            new_id = self._register(rev["theory"], rnd)
            self.slots[verdict.target_slot - 1] = new_id
            self._step(f"r{rnd}/admitted", "admitted", lambda: {"slot": verdict.target_slot, "theory_id": new_id,
                                                                 "name": rev["name"], "replaced": tgt}, round=rnd)
            self._backfill(rnd)
            lb2 = self._step(f"r{rnd}/lb_admit", "leaderboard", lambda: {"phase": "post_admit",
                                                                          "scores": self._leaderboard()}, round=rnd)
            self.history.append({"round": rnd, "phase": "post_admit", "scores": dict(lb2["scores"])})
            self._step(f"r{rnd}/completed", "round_completed", lambda: {"round": rnd}, round=rnd)
            self._write_state("running")
        res = self._result("done")
        self._write_state("done")
        return res

    def _propose(self, rnd: int, k: int, own, opp) -> dict:
        prop = self.advocates[k - 1].propose(own, opp, self.view(), _rng(self.cfg.seed, rnd, k, "propose"))
        crn = (derive_seed(self.cfg.seed, rnd, k, "gate"),)
        a = predicted_estimate(own, prop.design, prop.metric, self.cfg.n_sim, crn)
        b = predicted_estimate(opp, prop.design, prop.metric, self.cfg.n_sim, crn)
        g = self._gate(own, opp, prop.design, a, b, crn, rnd, k)
        return {"design": prop.design.to_json(), "metric": prop.metric.to_json(), "rationale": prop.rationale,
                "extra": prop.extra, "gate": g.to_json()}

    def _gate(self, own, opp, design, a, b, crn: tuple, rnd: int, k: int):
        """The configured gate on the proposal; the JSD gates simulate both theories with the same random numbers."""
        cfg = self.cfg
        if cfg.gate == "welch":
            return welch_gate(a, b, n_real=cfg.n_real, alpha=cfg.alpha)
        if cfg.gate == "power":
            return power_gate(a, b, n_real=cfg.n_real, alpha=cfg.alpha, target_power=cfg.target_power,
                              rng=_rng(cfg.seed, rnd, k, "power"))
        from agentmill.methods.autocog.simulate import simulate

        da, db = (simulate(t, design, cfg.n_sim, crn) for t in (own, opp))
        return jsd_gate(da, db, kind=cfg.gate.removeprefix("jsd_"), threshold=cfg.jsd_threshold)

    def _prospective(self) -> dict:
        rows = [(o["round"], o["real"], o["preds"]) for o in self.obs if self.ledger.has(f"data/{o['obs_id']}")]
        ps = prospective_scores(rows, self.admitted_round, on_missing_real=self.cfg.on_missing_real)
        return {self.theories[t].name: v for t, v in ps.items()}

    def _result(self, status: str) -> RunResult:
        lb = self._leaderboard() if self.obs and all(o["preds"] for o in self.obs) else []
        surfaced = lb[0][0] if lb and status == "done" else None
        passed = [o["gate_passed"] for o in self.obs]
        return RunResult(status, [(self.theories[t].name, s, t) for t, s in lb], surfaced and self.theories[surfaced].name,
                         surfaced and self.theories[surfaced].spec, len(self.obs),
                         float(np.mean(passed)) if passed else float("nan"), self.ledger.head, self.history,
                         self._prospective() if lb else {})

    def state(self, status: str) -> dict:
        return {"status": status, "ledger_head": self.ledger.head, "n_events": len(self.ledger.events),
                "slots": list(self.slots),
                "theories": {t: {"name": th.name, "spec": th.spec, "admitted_round": self.admitted_round[t]}
                             for t, th in self.theories.items()},
                "observations": [{"obs_id": o["obs_id"], "round": o["round"], "slot": o["slot"],
                                  "design": o["design"].to_json(), "metric": o["metric"].to_json(),
                                  "real": o["real"], "preds": o["preds"], "gate_passed": o["gate_passed"]}
                                 for o in self.obs],
                "leaderboard": self._leaderboard() if self.obs and all(o["preds"] for o in self.obs) else [],
                "raw_errors": raw_errors(self.view().scoring_rows(), list(self.theories)) if self.obs else {},
                "prospective": self._prospective() if self.obs and all(o["preds"] for o in self.obs) else {}}

    def _write_state(self, status: str) -> None:
        write_bytes_atomic(self.run_dir / "state.json", json.dumps(self.state(status), sort_keys=True, indent=1,
                                                                   default=str).encode())
