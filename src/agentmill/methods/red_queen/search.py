"""The Red Queen search, top to bottom (``RedQueenSearch.run``).

1. Seed the archive with node 0; every slot starts in epoch 1 with its incumbent judge frozen.
2. Until ``budget`` evaluations:
   a. UCB-Air: if n_evals^α ≥ |archive|, Thompson-sample a parent by clade metaproductivity and add
      ``workspace.expand(parent)`` as its child (None = an unviable proposal, logged) [C HGM].
   b. Thompson-sample the node to evaluate: θ ~ Beta(1 + S_clade, 1 + F_clade) over valid records [C].
   c. Least-measured cell: the node's role with fewest valid records, then that role's least-measured task [C].
   d. Evaluate under the slot's frozen judge (dependent roles only) and append the record with its ``dep``, judge
      ``tags`` and epoch vector.
   e. At a checkpoint (8, 16, 32, … and the budget), each slot tests K challengers against its incumbent on the
      sealed anchor; a replacement advances the slot's epoch and invalidates every dependent record tagged with the
      displaced judge (an ``invalidate`` event; records are never deleted).
3. Final pick: the node with the highest best-belief over its valid records among nodes with ≥ ``min_node_evals``;
   fallback: balanced utility (mean over roles of mean per-task posterior mean, empty cells 0.5) [C].

Every random choice draws from ``core.seeding.rng_for(seed, n_evals, stage)``, so a run killed at any event and
resumed from its ledger continues bit-identically: resume replays the ledger into the same state and goes on.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from agentmill.core.seeding import rng_for
from agentmill.methods.red_queen.anchor import SealedAnchor
from agentmill.methods.red_queen.archive import ArchiveRecord, ArchiveView, Node, thompson_pick
from agentmill.methods.red_queen.config import RedQueenConfig
from agentmill.methods.red_queen.ledger import EventLog, RoleSpec, UtilityLedger, UtilityRecord
from agentmill.methods.red_queen.stats import best_belief, checkpoints, mcnemar_replace


class Workspace(Protocol):
    def roles(self) -> list[RoleSpec]: ...

    def seed(self) -> Any: ...

    def expand(self, parent: Node, rng: np.random.Generator) -> Any | None: ...

    def evaluate(self, node: Node, role: RoleSpec, task: str, judge: Any | None,
                 rng: np.random.Generator) -> int | tuple[int, Any]: ...


class JudgeSlot(Protocol):
    slot: int
    anchor: SealedAnchor
    audit_labels_used: int

    def incumbent(self) -> Any: ...

    def challengers(self, view: ArchiveView, rng: np.random.Generator) -> list[Any]: ...

    def judge_from_spec(self, spec: dict[str, Any]) -> Any: ...


@dataclass
class RunResult:
    best_node: int
    best_state: Any
    best_belief: float
    replacements: list[dict[str, Any]]
    """(slot, from, to, at_eval, statistic, p_or_bb, invalidated, judge spec) per replacement."""
    epochs: dict[int, int]
    n_valid: int
    n_invalid: int
    anchor_tests_run: int
    audit_labels_used: int
    n_nodes: int
    n_evals: int
    checkpoint_log: list[dict[str, Any]] = field(default_factory=list)
    """Per (checkpoint, slot): the tests run, the decision and the pick just before it."""
    final_judges: dict[int, dict[str, Any]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def final_pick(ledger: UtilityLedger, cfg: RedQueenConfig) -> tuple[int, float]:
    """(node, its best-belief) by the final-pick rule; best-belief NaN when the fallback decided."""
    from scipy.special import betaincinv

    n = ledger.n_nodes
    S = np.array([ledger.node_counts(i)[0] for i in range(n)])
    F = np.array([ledger.node_counts(i)[1] for i in range(n)])
    ok = (S + F) >= cfg.min_node_evals
    if ok.any():
        bb = np.where(ok, betaincinv(1.0 + S, 1.0 + F, cfg.bb_epsilon), -1.0)
        i = int(np.argmax(bb))
        return i, float(bb[i])
    util = []
    for i in range(n):
        s, cnt = ledger.role_task_success(i)
        post = np.where(cnt > 0, (1 + s) / (2 + cnt), 0.5)
        util.append(float(np.mean([post[r, :len(role.tasks)].mean() for r, role in enumerate(ledger.roles)])))
    return int(np.argmax(util)), float("nan")


class RedQueenSearch:
    """Search over ``workspace`` with one :class:`JudgeSlot` per judge slot. ``ledger_dir`` (optional) holds the
    hash-chained ledger and ``state.json``; opening a directory with events resumes the run."""

    def __init__(self, workspace: Workspace, slots: dict[int, JudgeSlot], config: RedQueenConfig,
                 ledger_dir: str | Path | None = None, *, bookkeeping: str = "incremental",
                 describe: dict[str, Any] | None = None) -> None:
        self.workspace = workspace
        self.slots = dict(sorted(slots.items()))
        self.config = config
        self.roles = list(workspace.roles())
        for r in self.roles:
            if r.kind == "evaluator_dependent" and r.slot not in self.slots:
                raise ValueError(f"role {r.name} depends on slot {r.slot}, which has no JudgeSlot")
        for s, js in self.slots.items():
            if len(js.anchor) < config.min_anchor_outcomes:
                raise ValueError(f"slot {s}: the anchor has {len(js.anchor)} items, fewer than min_anchor_outcomes "
                                 f"= {config.min_anchor_outcomes}; use a larger anchor or lower min_anchor_outcomes")
        self.ledger_dir = Path(ledger_dir) if ledger_dir is not None else None
        self.log = EventLog(self.ledger_dir)
        self.ledger = UtilityLedger(self.roles, n_slots=max(self.slots, default=-1) + 1, mode=bookkeeping)
        self.nodes: list[Node] = []
        self.judges: dict[int, Any] = {s: js.incumbent() for s, js in self.slots.items()}
        self.epoch: dict[int, int] = dict.fromkeys(self.slots, 1)
        self.checkpoints = checkpoints(config.budget, config.checkpoint_base, config.checkpoint_min)
        self.n_evals = 0
        self.anchor_tests_run = 0
        self.audit_labels_used = 0
        self.replacements: list[dict[str, Any]] = []
        self.checkpoint_log: list[dict[str, Any]] = []
        self._done_checkpoints: set[tuple[int, int]] = set()
        self._expanded_at: set[int] = set()
        self.describe = describe or {}

    # -- the algorithm ----------------------------------------------------------------------------------------
    def run(self) -> RunResult:
        cfg = self.config
        self._start_or_resume()
        self._run_checkpoints()  # a run resumed right after a checkpoint's evaluation finishes that checkpoint first
        while self.n_evals < cfg.budget:
            # a. UCB-Air expansion (once per evaluation index: a resumed run does not redo a logged one)
            if self.n_evals ** cfg.ucb_air_alpha >= len(self.nodes) and self.n_evals not in self._expanded_at:
                self._expand()
            # b. Thompson sampling over clade metaproductivity (valid records only)
            node = thompson_pick(self.ledger, rng_for(cfg.seed, self.n_evals, "pick"))
            # c. least-measured cell
            role, task = self._least_measured_cell(node)
            # d. evaluate under the frozen judge
            self._evaluate(node, role, task)
            # e. checkpoint: challengers, the replacement statistic, selective erasure
            self._run_checkpoints()
        result = self.result()
        if self.ledger_dir is not None:
            from agentmill.core.records import write_json_atomic

            write_json_atomic(self.ledger_dir / "state.json", snapshot(self))
        return result

    def _expand(self) -> None:
        cfg = self.config
        self._expanded_at.add(self.n_evals)
        parent = thompson_pick(self.ledger, rng_for(cfg.seed, self.n_evals, "parent"))
        state = self.workspace.expand(self.nodes[parent], rng_for(cfg.seed, self.n_evals, "expand"))
        if state is None:
            self.log.append("unviable", f"unviable/{self.n_evals}", {"parent": parent, "at_eval": self.n_evals})
            return
        self._add_node(parent, state, self.n_evals)
        self.log.append("node", f"node/{len(self.nodes) - 1}", {"parent": parent, "state": state,
                                                                 "at_eval": self.n_evals})

    def _add_node(self, parent: int | None, state: Any, at_eval: int) -> None:
        nid = self.ledger.add_node(parent)
        self.nodes.append(Node(nid, parent, state, at_eval))

    def _least_measured_cell(self, node: int) -> tuple[int, int]:
        counts = self.ledger.task_counts(node)
        per_role = [int(counts[r, :len(role.tasks)].sum()) for r, role in enumerate(self.roles)]
        r = int(np.argmin(per_role))
        return r, int(np.argmin(counts[r, :len(self.roles[r].tasks)]))

    def _evaluate(self, node: int, r: int, t: int) -> None:
        cfg = self.config
        role = self.roles[r]
        dependent = role.kind == "evaluator_dependent"
        judge = self.judges[role.slot] if dependent else None
        out = self.workspace.evaluate(self.nodes[node], role, role.tasks[t], judge,
                                      rng_for(cfg.seed, self.n_evals, "eval"))
        outcome, artifact = out if isinstance(out, tuple) else (out, None)
        if outcome not in (0, 1, True, False):
            raise ValueError(f"workspace.evaluate returned {outcome!r}; outcomes are 0 or 1")
        rec = UtilityRecord(len(self.ledger.records), node, r, t, int(outcome),
                            (role.slot,) if dependent else (), {role.slot: judge.judge_id} if dependent else {},
                            tuple(self.epoch[s] for s in self.slots), self.n_evals + 1, artifact)
        self.log.append("eval", f"eval/{self.n_evals + 1}", rec.to_payload(self.roles))
        self.ledger.append(rec)
        self.n_evals += 1

    def _run_checkpoints(self) -> None:
        if self.n_evals not in self.checkpoints or not self.config.judge_evolution:
            return
        for s in self.slots:
            if (self.n_evals, s) not in self._done_checkpoints:
                self._checkpoint(s)

    def _checkpoint(self, s: int) -> None:
        cfg = self.config
        js = self.slots[s]
        inc = self.judges[s]
        pick_before, _ = final_pick(self.ledger, cfg)
        view = self.view(s)
        used_before = js.audit_labels_used
        chs = list(js.challengers(view, rng_for(cfg.seed, "challengers", self.n_evals, s)))
        k = len(chs)
        tests: list[dict[str, Any]] = []
        winner, stat_value = None, float("nan")
        if cfg.statistic == "mcnemar":
            best_margin = 0
            for ch in chs:
                pc = js.anchor.compare(inc, ch)
                ok, p = mcnemar_replace(pc.ch_only, pc.inc_only, alpha=cfg.alpha, n_tests=k)
                tests.append({"judge": ch.judge_id, "b": pc.ch_only, "c": pc.inc_only, "n": pc.n, "p": p,
                              "pass": ok})
                if ok and pc.ch_only - pc.inc_only > best_margin:  # the largest b − c among passing wins
                    winner, stat_value, best_margin = ch, p, pc.ch_only - pc.inc_only
        else:
            si, fi = js.anchor.counts(inc)
            best = best_belief(si, fi, cfg.bb_epsilon) if si + fi >= cfg.min_anchor_outcomes else -1.0
            tests.append({"judge": inc.judge_id, "S": si, "F": fi, "bb": best, "incumbent": True})
            for ch in chs:
                sc, fc = js.anchor.counts(ch)
                if sc + fc < cfg.min_anchor_outcomes:
                    continue
                bb = best_belief(sc, fc, cfg.bb_epsilon)
                tests.append({"judge": ch.judge_id, "S": sc, "F": fc, "bb": bb})
                if bb > best:  # strict: the incumbent, listed first, keeps ties
                    winner, stat_value, best = ch, bb, bb
        self.anchor_tests_run += k
        self.audit_labels_used += js.audit_labels_used - used_before
        entry = {"at_eval": self.n_evals, "slot": s, "incumbent": inc.judge_id, "statistic": cfg.statistic,
                 "tests": tests, "replaced": winner is not None, "pick_before": pick_before,
                 "audit_labels": js.audit_labels_used - used_before, "n_challengers": k}
        if hasattr(js, "state"):  # what the slot carries between checkpoints (audited documents), for resume
            entry["slot_state"] = js.state()
        if winner is not None:
            entry["new_judge"] = winner.to_spec()
            entry["stat_value"] = stat_value
        self.log.append("checkpoint", f"checkpoint/{self.n_evals}/{s}", entry)
        self._apply_checkpoint(entry)

    def _apply_checkpoint(self, entry: dict[str, Any], invalidated: list[int] | None = None) -> None:
        """Apply a checkpoint decision (live or replayed): replace, then invalidate (logged when live)."""
        s, n = entry["slot"], entry["at_eval"]
        if "slot_state" in entry and hasattr(self.slots[s], "restore"):
            self.slots[s].restore(entry["slot_state"])
        self.checkpoint_log.append(entry)
        self._done_checkpoints.add((n, s))
        if not entry["replaced"]:
            return
        new = self.slots[s].judge_from_spec(entry["new_judge"])
        old = self.judges[s]
        self.judges[s] = new
        self.epoch[s] += 1
        rep = {"slot": s, "from": old.judge_id, "to": new.judge_id, "at_eval": n, "statistic": entry["statistic"],
               "p_or_bb": entry["stat_value"], "invalidated": 0, "judge": entry["new_judge"]}
        if self.config.erasure == "invalidate":
            live = invalidated is None
            idx = self.ledger.invalidate(s, new.judge_id, n)
            if not live and idx != invalidated:
                raise ValueError(f"ledger replay: checkpoint {n} slot {s} invalidates {len(idx)} records, the ledger "
                                 f"says {len(invalidated or [])}: the ledger does not belong to this run")
            rep["invalidated"] = len(idx)
            if live:
                self.log.append("invalidate", f"invalidate/{n}/{s}", {
                    "slot": s, "records": _ranges(idx), "count": len(idx),
                    "reason": f"judge {old.judge_id} replaced by {new.judge_id} at evaluation {n}"})
        self.replacements.append(rep)

    def view(self, s: int) -> ArchiveView:
        inc = self.judges[s].judge_id
        recs = tuple(ArchiveRecord(r.node, self.roles[r.role].name, r.outcome, r.tags.get(s), r.valid, r.at_eval,
                                   r.artifact) for r in self.ledger.records if r.tags.get(s) == inc)
        return ArchiveView(tuple(self.nodes), recs, s, inc, self.n_evals, self.epoch[s])

    def result(self) -> RunResult:
        best, bb = final_pick(self.ledger, self.config)
        n_valid = self.ledger.n_valid
        return RunResult(best, self.nodes[best].state, bb, list(self.replacements), dict(self.epoch), n_valid,
                         len(self.ledger.records) - n_valid, self.anchor_tests_run, self.audit_labels_used,
                         len(self.nodes), self.n_evals, list(self.checkpoint_log),
                         {s: j.to_spec() for s, j in self.judges.items()})

    # -- start and resume -------------------------------------------------------------------------------------
    def _config_payload(self) -> dict[str, Any]:
        return {"config": self.config.to_dict(), "roles": [[r.name, r.kind, list(r.tasks), r.slot] for r in self.roles],
                "incumbents": {str(s): j.to_spec() for s, j in self.judges.items()}, "describe": self.describe}

    def _start_or_resume(self) -> None:
        if self.nodes:
            return
        events = self.log.events()
        want = json.loads(json.dumps(self._config_payload(), default=_jsonable))
        if not events:
            self.log.append("config", "config", want)
            self._seed_node()
            return
        kind, _, have = events[0]
        if kind != "config":
            raise ValueError("the ledger does not start with a config event: not a Red Queen ledger")
        if have != want:
            diff = sorted(k for k in set(have["config"]) | set(want["config"])
                          if have["config"].get(k) != want["config"].get(k))
            raise ValueError("resuming with a config that differs from the ledgered one"
                             + (f" (fields: {', '.join(diff)})" if diff else " (roles, incumbents or world)")
                             + "; use a new --out directory or the original settings")
        pending: dict[str, Any] | None = None
        for kind, step, payload in events[1:]:
            if pending is not None and kind != "invalidate":
                raise ValueError(f"ledger event {step}: the replacement at checkpoint {pending['at_eval']} slot "
                                 f"{pending['slot']} has no invalidate event after it: the ledger was edited")
            if kind == "node":
                self._add_node(payload["parent"], payload["state"], payload["at_eval"])
                if payload["parent"] is not None:
                    self._expanded_at.add(payload["at_eval"])
            elif kind == "unviable":
                self._expanded_at.add(payload["at_eval"])
            elif kind == "eval":
                self._replay_eval(payload)
            elif kind == "checkpoint":
                self.anchor_tests_run += payload["n_challengers"]
                self.audit_labels_used += payload["audit_labels"]
                if payload["replaced"] and self.config.erasure == "invalidate":
                    pending = payload
                else:
                    self._apply_checkpoint(payload)
            elif kind == "invalidate":
                if pending is None:
                    raise ValueError(f"ledger event {step}: an invalidation without its checkpoint")
                self._apply_checkpoint(pending, invalidated=_expand_ranges(payload["records"]))
                pending = None
        if pending is not None:  # killed between the decision and its invalidate event: redo it live
            self._apply_checkpoint(pending)
        if not self.nodes:  # killed right after the config event
            self._seed_node()

    def _seed_node(self) -> None:
        self._add_node(None, self.workspace.seed(), 0)
        self.log.append("node", "node/0", {"parent": None, "state": self.nodes[0].state, "at_eval": 0})

    def _replay_eval(self, p: dict[str, Any]) -> None:
        r = next(i for i, role in enumerate(self.roles) if role.name == p["role"])
        t = self.roles[r].tasks.index(p["task"])
        rec = UtilityRecord(len(self.ledger.records), p["node"], r, t, int(p["outcome"]), tuple(p["dep"]),
                            {int(k): v for k, v in p["tags"].items()}, tuple(p["epoch"]), self.n_evals + 1,
                            p.get("artifact"))
        self.ledger.append(rec)
        self.n_evals += 1


def _ranges(idx: list[int]) -> list[list[int]]:
    """Sorted indices as inclusive [start, end] ranges."""
    out: list[list[int]] = []
    for i in idx:
        if out and out[-1][1] == i - 1:
            out[-1][1] = i
        else:
            out.append([i, i])
    return out


def _expand_ranges(ranges: list[list[int]]) -> list[int]:
    return [i for a, b in ranges for i in range(a, b + 1)]


def _jsonable(o: Any) -> Any:
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, np.generic):
        return o.item()
    raise TypeError(f"not JSON serialisable: {type(o)}")


def snapshot(search: RedQueenSearch) -> dict[str, Any]:
    """What ``state.json`` holds and what ``audit`` rebuilds from the ledger: counts, epochs, judges, the head."""
    led = search.ledger
    return {"n_evals": search.n_evals, "n_nodes": len(search.nodes), "epochs": {str(k): v for k, v in
                                                                              search.epoch.items()},
            "judges": {str(s): j.judge_id for s, j in search.judges.items()},
            "node_counts": [list(led.node_counts(i)) for i in range(led.n_nodes)],
            "n_valid": led.n_valid, "n_invalid": len(led.records) - led.n_valid,
            "anchor_tests_run": search.anchor_tests_run, "audit_labels_used": search.audit_labels_used,
            "head": search.log.ledger.head if search.log.ledger is not None else None}
