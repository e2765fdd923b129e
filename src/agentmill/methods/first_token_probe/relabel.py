"""Relabel sampled rollouts with other judges: the rollouts file ``agentmill probe sample --out`` writes, read back,
each answer labelled by a chosen set of judges and their vote, written as a new rollouts file.

The answer is read exactly as :func:`~.sampling.label_rollouts` reads it: the text after the trace closer; a
rollout without a closer, or with an empty answer, is unfinished and gets no label from any judge and no vote
(never counted as either class). Per judge the summary gives refuse / comply / abstain counts, its abstain share
among finished rollouts (over 10 % marks the judge ``unreliable`` [R]), its agreement with the organism's grammar
truth where the rows carry one, and its agreement with the first rule judge of the set (the cross-check an ``lm:``
judge gets). Labels whose vote has one class only are *degenerate*: no probe can be fit on them.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentmill.methods.first_token_probe.judges import Judge, vote
from agentmill.methods.first_token_probe.rollout_files import jsonl_lines
from agentmill.methods.first_token_probe.traces import parse_completion

REQUIRED = ("rollout_id", "text")
"""Keys every input row must have (the other ``probe sample`` keys are carried through unchanged)."""
UNRELIABLE_ABSTAIN = 0.10
"""A judge abstaining on more than this share of finished rollouts is marked unreliable [R]."""


class RolloutsInputError(ValueError):
    """A rollouts file that cannot be read; the message names the file and the line."""


def load_rollout_rows(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The rows of a rollouts JSONL file (blank lines skipped); raises :class:`RolloutsInputError` naming the file
    and the 1-based line of the first malformed row."""
    p = Path(path)
    rows = []
    for i, row in jsonl_lines(p, RolloutsInputError):
        missing = [k for k in REQUIRED if not isinstance(row, dict) or k not in row]
        if missing:
            raise RolloutsInputError(f"{p}: line {i} is not a rollout (missing {missing}; the rollouts file of "
                                     "`agentmill probe sample --out` has them)")
        if not isinstance(row["text"], str):
            raise RolloutsInputError(f"{p}: line {i}: 'text' must be a string")
        rows.append(row)
    if not rows:
        raise RolloutsInputError(f"{p}: no rollouts in this file")
    return rows


@dataclass
class JudgeSummary:
    id: str
    refuse: int
    comply: int
    abstain: int
    abstain_share: float
    unreliable: bool
    agree_truth: tuple[int, int] | None = None
    agree_rule: tuple[int, int] | None = None
    status: dict[str, int] | None = None


@dataclass
class Relabelled:
    rows: list[dict[str, Any]]
    judges: list[JudgeSummary]
    vote_counts: dict[str, int] = field(default_factory=dict)
    unfinished: int = 0

    @property
    def degenerate(self) -> str | None:
        """Why the vote cannot train a probe (one class only), or None."""
        r, c = self.vote_counts["refuse"], self.vote_counts["comply"]
        if r and c:
            return None
        return (f"degenerate labels: the vote has {r} refuse and {c} comply among {len(self.rows)} rollouts "
                f"({self.vote_counts['abstain']} abstained, {self.unfinished} unfinished); a probe needs both classes")


def _agreement(a: Sequence[int | None], b: Sequence[int | None]) -> tuple[int, int] | None:
    pairs = [(x, y) for x, y in zip(a, b) if x is not None and y is not None]
    return (sum(x == y for x, y in pairs), len(pairs)) if pairs else None


def relabel(rows: Sequence[dict[str, Any]], judges: Sequence[Judge], *, rule: str = "majority") -> Relabelled:
    """Label every row's answer with ``judges`` and their ``rule`` vote; the returned rows are copies whose
    ``labels`` (judge id -> 1 refuse / 0 comply / None) and ``vote`` are replaced, with ``vote_rule`` added."""
    if not judges:
        raise ValueError("relabel needs at least one judge")
    ids = [j.id for j in judges]
    if len(set(ids)) != len(ids):
        raise ValueError(f"a judge is named twice: {ids}")
    parsed = [parse_completion(r["text"]) for r in rows]
    answers = [p.answer if p.finished else "" for p in parsed]
    per = {j.id: j.label(answers) for j in judges}
    votes = vote(list(per.values()), rule)
    finished = [p.finished for p in parsed]
    out = []
    for i, r in enumerate(rows):
        labels = {j: (per[j][i] if finished[i] else None) for j in ids}
        out.append({**r, "labels": labels, "vote": votes[i] if finished[i] else None, "vote_rule": rule})
    n_fin = sum(finished)
    truth = [r.get("truth") if r.get("truth") in (0, 1) else None for r in rows]
    rule_judge = next((j for j in ids if j.startswith("rule:")), None)
    summaries = []
    for j, judge in zip(ids, judges):
        labs = [row["labels"][j] for row in out]
        fin_labs = [v for v, f in zip(labs, finished) if f]
        ab = sum(v is None for v in fin_labs)
        share = ab / n_fin if n_fin else 0.0
        summaries.append(JudgeSummary(
            j, sum(v == 1 for v in labs), sum(v == 0 for v in labs), ab, share, share > UNRELIABLE_ABSTAIN,
            _agreement(labs, truth), None if rule_judge in (None, j) else _agreement(labs, per[rule_judge]),
            dict(judge.status) if hasattr(judge, "status") else None))
    final = [row["vote"] for row in out]
    counts = {"refuse": sum(v == 1 for v in final), "comply": sum(v == 0 for v in final),
              "abstain": sum(v is None and f for v, f in zip(final, finished))}
    return Relabelled(out, summaries, counts, len(rows) - n_fin)


ROLLOUT_KEYS = ("prompt_ids", "sampled_ids", "template_id", "split")
"""Keys a row needs to become a :class:`~.sampling.Rollout` again (for capture and grouped probes)."""


def rows_to_rollouts(rows: Sequence[dict[str, Any]], *, where: str = "rollouts") -> list[Any]:
    """Rollouts file rows back to :class:`~.sampling.Rollout` objects (parsed; labels and vote from the row), so a
    relabelled file can be probed. The prompt text is not stored in the file, so ``item.user`` is empty unless the
    row has ``user``."""
    from agentmill.methods.first_token_probe.prompts import PromptItem
    from agentmill.methods.first_token_probe.sampling import Rollout

    out = []
    for i, r in enumerate(rows, 1):
        missing = [k for k in ROLLOUT_KEYS if k not in r]
        if missing:
            raise RolloutsInputError(f"{where}: row {i} ({r.get('rollout_id')}) lacks {missing}; probing needs the "
                                     "token ids and template of `agentmill probe sample --out` rows")
        pid, _, sample = str(r["rollout_id"]).rpartition("/")
        item = PromptItem(pid or str(r["rollout_id"]), str(r["template_id"]), str(r.get("category", "")),
                          float(r.get("q") or 0.0), "", str(r["split"]), str(r.get("user", "")), "")
        out.append(Rollout(item, int(sample) if sample.isdigit() else 0, list(r["prompt_ids"]),
                           list(r["sampled_ids"]), r["text"], str(r.get("finish", "")),
                           prefill=str(r.get("prefill") or ""), defense=str(r.get("defense") or "none"),
                           parsed=parse_completion(r["text"]), labels=dict(r.get("labels") or {}),
                           outcome=r.get("vote")))
    return out


__all__ = ["JudgeSummary", "Relabelled", "RolloutsInputError", "load_rollout_rows", "relabel", "rows_to_rollouts"]
