"""Gold locations from a patch and the localization metrics, with the recipe's semantics [C].

Gold (pre-patch line numbers): each removed line is a location at its original line; an added line inside an
existing file adds its insertion point (the current original-line counter) unless it extends the previous
location; context lines advance the counter; files the patch creates contribute nothing; adjacent locations in one
file merge (start ≤ previous end + 1).

Per instance: file-level recall |G∩P|/|G|, precision |G∩P|/|P|, F1, exact match, Jaccard (the recipe's
``accuracy`` — not the paper's Accuracy@1); both sets empty -> all 1; either empty -> all 0. Chunk level (same
file): a gold hunk is covered when one prediction encloses it; coverage recall, the mean tightness over covered
hunks (gold length / tightest enclosing prediction length) and chunk precision (predictions enclosing ≥ 1 gold
hunk / predictions). Aggregation: unweighted means over instances with ≥ 1 gold location; failed runs keep zero
scores and count. Recall@1 is the mean file recall of one generation; on single-gold-file instances it is
Accuracy@1.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass

import numpy as np

from agentmill.core.stats import Estimate, bootstrap_ci


@dataclass(frozen=True)
class Location:
    file: str
    start: int
    end: int

    def __post_init__(self) -> None:
        if self.start < 1 or self.end < self.start:
            raise ValueError(f"Location needs 1 <= start <= end, got {self.file}:{self.start}-{self.end}")


HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def merge(locs: Iterable[Location]) -> list[Location]:
    """Sort per file and merge overlapping or adjacent ranges."""
    out: list[Location] = []
    for loc in sorted(locs, key=lambda x: (x.file, x.start, x.end)):
        if out and out[-1].file == loc.file and loc.start <= out[-1].end + 1:
            prev = out[-1]
            out[-1] = Location(prev.file, prev.start, max(prev.end, loc.end))
        else:
            out.append(loc)
    return out


def gold_locations(diff: str, exclude_new_files: bool = True) -> list[Location]:
    """Pre-patch locations of a unified diff (see the module docstring)."""
    locs: list[Location] = []
    file: str | None = None
    new_file = False
    old_line = 0
    for raw in diff.splitlines():
        if raw.startswith("diff --git"):
            file, new_file = None, False
            continue
        if raw.startswith("--- "):
            src = raw[4:].strip()
            new_file = src == "/dev/null"
            file = None if new_file else (src[2:] if src.startswith("a/") else src)
            continue
        if raw.startswith("+++ "):
            if new_file and not exclude_new_files:
                dst = raw[4:].strip()
                file = dst[2:] if dst.startswith("b/") else dst
            continue
        m = HUNK.match(raw)
        if m:
            old_line = int(m.group(1))
            continue
        if file is None or raw.startswith("\\"):
            continue
        if raw.startswith("-"):
            locs.append(Location(file, old_line, old_line))
            old_line += 1
        elif raw.startswith("+"):
            at = max(1, old_line)
            if not (locs and locs[-1].file == file and locs[-1].end >= at - 1):
                locs.append(Location(file, at, at))
        else:
            old_line += 1
    return merge(locs)


@dataclass(frozen=True)
class InstanceScores:
    file_recall: float
    file_precision: float
    file_f1: float
    file_exact: float
    file_jaccard: float
    coverage_recall: float
    avg_prediction_tightness: float
    chunk_precision: float
    n_pred_files: int
    n_pred_lines: int
    has_gold: bool
    status: str = "success"

    def to_dict(self) -> dict:
        return asdict(self)


def score(gold: Sequence[Location], pred: Sequence[Location], status: str = "success") -> InstanceScores:
    """One instance's scores. A failed or skipped run scores zero everywhere (it still counts)."""
    G = {g.file for g in gold}
    P = {p.file for p in pred}
    n_lines = sum(p.end - p.start + 1 for p in pred)
    if status != "success":
        return InstanceScores(0, 0, 0, 0, 0, 0, 0, 0, len(P), n_lines, bool(gold), status)
    if not G and not P:
        rec = prec = f1 = ex = jac = 1.0
    elif not G or not P:
        rec = prec = f1 = ex = jac = 0.0
    else:
        inter = len(G & P)
        rec, prec = inter / len(G), inter / len(P)
        f1 = 2 * rec * prec / (rec + prec) if rec + prec else 0.0
        ex = float(G == P)
        jac = inter / len(G | P)
    covered, tight = 0, []
    for g in gold:
        encl = [p for p in pred if p.file == g.file and p.start <= g.start and p.end >= g.end]
        if encl:
            covered += 1
            best = min(p.end - p.start + 1 for p in encl)
            tight.append((g.end - g.start + 1) / best)
    cov = covered / len(gold) if gold else 0.0
    hits = sum(any(p.file == g.file and p.start <= g.start and p.end >= g.end for g in gold) for p in pred)
    cprec = hits / len(pred) if pred else 0.0
    return InstanceScores(rec, prec, f1, ex, jac, cov, float(np.mean(tight)) if tight else 0.0, cprec, len(P),
                          n_lines, bool(gold), status)


METRICS = ("file_recall", "file_precision", "file_f1", "file_exact", "file_jaccard", "coverage_recall",
           "avg_prediction_tightness", "chunk_precision", "n_pred_files", "n_pred_lines")


def aggregate(scores: Sequence[InstanceScores], *, n_boot: int = 2000, seed: int = 0) -> dict[str, Estimate]:
    """Unweighted means over instances with gold (bootstrap 95 % CIs over instances); ``samples_no_gt`` counts the
    rest. ``file_recall`` is Recall@1 (Accuracy@1 when every instance has one gold file)."""
    rows = [s for s in scores if s.has_gold]
    out: dict[str, Estimate] = {"samples_no_gt": Estimate.exact(len(scores) - len(rows), n=len(scores))}
    if not rows:
        return out
    for m in METRICS:
        x = np.array([float(getattr(s, m)) for s in rows])
        out[m] = bootstrap_ci(x, n_boot=n_boot, seed=seed) if len(x) > 1 else Estimate.exact(float(x[0]), n=1)
    return out
