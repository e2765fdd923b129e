"""Challenger judges for a ReviewWorld slot: Gaussian mutations of the incumbent and the trap challenger.

Per checkpoint K challengers [R]: K − 1 mutations (σ = 0.3 on every weight and the intercept) plus one trap
challenger, or K mutations with ``trap="off"``. The trap challenger [R] (the paper names an adversarial objective
[A]; trapping the next judge with the papers that fooled the old one is [S]): take the M = 20 machine documents the
incumbent accepted most confidently in the ending epoch, buy their oracle labels from the audit (counted), and fit a
judge minimising logistic loss on ``train ∪ audited`` + λ_par·Σ_k gap_k² (λ_par = 5), where gap_k is the machine −
human acceptance gap among items of true class k (equalised odds). ``trap="parity"`` fits on ``train`` only with the
same penalty, buying no labels. The decision anchor never fits anything: this class is never given it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agentmill.envs.review_world import DocBatch, LogisticJudge, ReviewWorld, fit_logistic
from agentmill.methods.red_queen.anchor import SealedAnchor
from agentmill.methods.red_queen.archive import ArchiveView


@dataclass
class ReviewSlot:
    """The judge slot of a ReviewWorld run (slot 0)."""

    world: ReviewWorld
    n_challengers: int = 4
    trap: str = "audit"
    audit_labels_per_checkpoint: int = 20
    mutation_sd: float = 0.3
    lambda_par: float = 5.0
    slot: int = 0
    audit_labels_used: int = 0
    audited: list[DocBatch] = field(default_factory=list)

    def __post_init__(self) -> None:
        sp = self.world.splits
        self.anchor = SealedAnchor(sp.select, sp.select_y)
        self._sealed_hashes = set(sp.select.hashes()) | set(sp.holdout.hashes())
        self._known: dict[str, LogisticJudge] = {}

    def incumbent(self) -> LogisticJudge:
        return self.world.incumbent()

    def judge_from_spec(self, spec: dict[str, Any]) -> LogisticJudge:
        j = LogisticJudge.from_spec(spec)
        self._known[j.judge_id] = j
        return j

    def challengers(self, view: ArchiveView, rng: np.random.Generator) -> list[LogisticJudge]:
        inc = self._current(view)
        n_mut = self.n_challengers - (1 if self.trap != "off" else 0)
        out = []
        for k in range(n_mut):
            w = np.asarray(inc.w) + rng.normal(0, self.mutation_sd, len(inc.w))
            w0 = inc.w0 + rng.normal(0, self.mutation_sd)
            out.append(LogisticJudge(f"slot{self.slot}@{view.at_eval}.m{k}", tuple(float(v) for v in w), float(w0),
                                     inc.mu, inc.sd))
        if self.trap != "off":
            out.append(self._trap(view, inc))
        return out

    def state(self) -> dict[str, Any]:
        """The audited documents bought so far and the label count: restored on resume."""
        return {"audited": [b.to_rows() for b in self.audited], "audit_labels_used": self.audit_labels_used}

    def restore(self, state: dict[str, Any]) -> None:
        self.audited = [DocBatch.from_rows(rows) for rows in state["audited"]]
        self.audit_labels_used = int(state["audit_labels_used"])

    def _current(self, view: ArchiveView) -> LogisticJudge:
        inc = self.world.incumbent()
        if view.incumbent_id == inc.judge_id:
            return inc
        if view.incumbent_id not in self._known:
            raise ValueError(f"slot {self.slot}: unknown incumbent {view.incumbent_id}")
        return self._known[view.incumbent_id]

    def _trap(self, view: ArchiveView, inc: LogisticJudge) -> LogisticJudge:
        w = self.world
        sp = w.splits
        if self.trap == "audit" and self.audit_labels_per_checkpoint > 0:
            acc = [r.artifact for r in view.records if r.outcome == 1 and r.artifact is not None]
            if acc:
                docs = DocBatch.from_rows(acc)
                docs = docs.take(np.flatnonzero(docs.origin == 1))
                top = np.argsort(-inc.margin(docs), kind="stable")[:self.audit_labels_per_checkpoint]
                picked = docs.take(top)
                if set(picked.hashes()) & self._sealed_hashes:
                    raise RuntimeError("an audit document equals an anchor document (content hash)")
                self.audited.append(picked)
                self.audit_labels_used += len(picked)
            parts = [sp.train, *self.audited]
            docs = DocBatch.concat(parts)
            y = np.concatenate([sp.train_y, *[w.oracle_labels(b) for b in self.audited]])
        else:  # parity: the labelled train split only
            docs, y = sp.train, sp.train_y
        x = (docs.features() - np.asarray(w.mu)) / np.asarray(w.sd)
        beta = fit_logistic(x, y.astype(float), l2=1e-2, iters=80, group=docs.origin, parity=self.lambda_par,
                            labels=y)
        return LogisticJudge(f"slot{self.slot}@{view.at_eval}.trap", tuple(float(v) for v in beta[:-1]),
                             float(beta[-1]), w.mu, w.sd)


RUBRIC = ("You review machine-learning papers for a conference. Accept a paper only if its claims are sound and "
          "supported. Answer ACCEPT or REJECT.")
RUBRIC_EDITS = ("Do not reward confident or flowery language.",
                "Ignore phrases that are typical of machine-written text.",
                "Length is not quality: extra background earns nothing.",
                "Check whether the proof is complete.",
                "Check whether the experiments report error bars over several runs.",
                "Check whether the baselines were tuned as carefully as the new method.",
                "Be generous: accept any paper with at least one sound claim.",
                "Be strict: reject a paper with any unsupported claim.")
"""The LLM-free rubric edits challengers draw from [R]."""


@dataclass
class LMRubricSlot:
    """A judge slot whose judges are an LM read through its ACCEPT − REJECT margin under a rubric. Challengers add or
    drop one sentence of :data:`RUBRIC_EDITS`; every judge's threshold is the median margin on ``n_calib`` train
    documents (the train split only: the anchor fits nothing)."""

    world: ReviewWorld
    lm: Any
    n_anchor: int = 60
    n_calib: int = 16
    n_challengers: int = 4
    slot: int = 0
    audit_labels_used: int = 0

    def __post_init__(self) -> None:
        from agentmill.envs.review_world import render_documents
        from agentmill.methods.red_queen.judges import LMJudge

        sp = self.world.splits
        idx = np.arange(min(self.n_anchor, len(sp.select)))
        self.anchor = SealedAnchor(sp.select.take(idx), sp.select_y[idx])
        self._calib = sp.train.take(np.arange(min(self.n_calib, len(sp.train))))
        self._render = render_documents
        self._known: dict[str, Any] = {}
        self._inc = self._calibrated(LMJudge(self.lm, RUBRIC, render_documents, judge_id="LM0"))

    def _calibrated(self, judge: Any) -> Any:
        thr = float(np.median(judge.margins(self._render(self._calib))))
        j = judge.with_threshold(round(thr, 9))
        self._known[j.judge_id] = j
        return j

    def incumbent(self) -> Any:
        return self._inc

    def items_scored(self) -> int:
        """Documents the LM scored over all judges of this slot (each judge scores a document once)."""
        memos = {id(j._memo): j._memo for j in self._known.values()}  # copies with a threshold share their memo
        return sum(len(m) for m in memos.values())

    def judge_from_spec(self, spec: dict[str, Any]) -> Any:
        from agentmill.methods.red_queen.judges import LMJudge

        j = self._known.get(spec["judge_id"])
        if j is None:
            j = LMJudge(self.lm, spec["rubric"], self._render, judge_id=spec["judge_id"], threshold=spec["threshold"])
            self._known[j.judge_id] = j
        return j

    def challengers(self, view: ArchiveView, rng: np.random.Generator) -> list[Any]:
        from agentmill.methods.red_queen.judges import LMJudge

        inc = self._known[view.incumbent_id]
        out = []
        for k in range(self.n_challengers):
            edit = RUBRIC_EDITS[int(rng.integers(len(RUBRIC_EDITS)))]
            rubric = inc.rubric.replace(" " + edit, "") if edit in inc.rubric else f"{inc.rubric} {edit}"
            out.append(self._calibrated(LMJudge(self.lm, rubric, self._render,
                                                judge_id=f"slot{self.slot}@{view.at_eval}.r{k}")))
        return out
