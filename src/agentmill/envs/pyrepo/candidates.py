"""Candidate patches for a bug instance, labelled by the full oracle, and the known-kernel pool generator.

A candidate is the full text of every file it touches (over the base tree, bug included), so applying it is a
plain overwrite of a fresh copy. Kinds for a seeded instance:

- ``revert``: the gold fix (the base text);
- ``same_site``: another member of the mutated token's family at the same place (``<`` where the original was
  ``<=`` and the bug ``>=``); usually wrong, sometimes equivalent — the oracle decides;
- ``noop``: the buggy code unchanged;
- ``wrong_site``: a plausible one-token edit at another site of the same file, bug left in place;
- ``partial``: for a multi-site bug, one site fixed.

Each candidate's label ``y`` is the full oracle: FAIL_TO_PASS ∪ PASS_TO_PASS all pass. The generator of bayes_ship's
live control (:class:`PoolGenerator`) draws the next candidate from the correct or the incorrect pool according to
the current candidate's true label and a known kernel (b₀, P_fix, P_break), without replacement.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from agentmill.core.seeding import rng_for
from agentmill.envs.pyrepo.corpus import PyRepo
from agentmill.envs.pyrepo.mutate import FAMILIES, Mutation, RepoTask, mutations, unified_diff
from agentmill.envs.pyrepo.oracle import SandboxLimits, TestReport


@dataclass
class Candidate:
    """One candidate patch for ``task_id``. ``files``: relative path -> full text after the patch."""

    task_id: str
    cand_id: str
    kind: str
    files: dict[str, str]
    diff: str
    """Unified diff from the buggy tree to this candidate (empty for ``noop``)."""
    y: int | None = None
    """1 iff the full oracle passes (None until verified)."""
    oracle_wall_s: float | None = None
    oracle_cpu_s: float | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Candidate:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


def _cand(task: RepoTask, repo: PyRepo, kind: str, k: int, files: dict[str, str], **meta: Any) -> Candidate:
    diff = "".join(unified_diff(p, task.bug_files.get(p, repo.read(p)), files[p]) for p in sorted(files))
    return Candidate(task.instance_id, f"{task.instance_id}:{kind}{k}", kind, files, diff, meta=dict(meta))


def make_candidates(task: RepoTask, repo: PyRepo, *, n_wrong_site: int = 1, seed: int = 0) -> list[Candidate]:
    """The LM-free candidate set of a seeded instance (unlabelled; see :func:`verify`)."""
    out: list[Candidate] = []
    base = {p: repo.read(p) for p in task.bug_files}
    out.append(_cand(task, repo, "revert", 0, dict(base)))
    out.append(_cand(task, repo, "noop", 0, dict(task.bug_files)))
    ms = task.mutation_objects()
    if len(ms) == 1:
        m = ms[0]
        fam = FAMILIES.get(m.op)
        if fam:
            alts = [t for t in fam if t not in (m.old, m.new)]
            for k, alt in enumerate(alts[:2]):
                # the buggy line holds m.new at [col, col + len(m.new)): replace it with another family member
                bug_m = Mutation(m.file, m.line, m.col, m.col + len(m.new), m.new, alt, m.op)
                out.append(_cand(task, repo, "same_site", k, {m.file: bug_m.apply(task.bug_files[m.file])},
                                 token=alt))
        elif m.op == "off_by_one":
            other = str(int(m.old) * 2 - int(m.new))  # the other neighbour of the original constant
            if int(other) >= 0:
                bug_m = Mutation(m.file, m.line, m.col, m.col + len(m.new), m.new, other, m.op)
                out.append(_cand(task, repo, "same_site", 0, {m.file: bug_m.apply(task.bug_files[m.file])},
                                 token=other))
    else:
        for k, m in enumerate(ms):
            files = dict(task.bug_files)
            files[m.file] = Mutation(m.file, m.line, m.col, m.col + len(m.new), m.new, m.old, m.op).apply(files[m.file])
            out.append(_cand(task, repo, "partial", k, files))
    rng = rng_for("pyrepo.candidates", task.instance_id, seed)
    for f in sorted(task.bug_files)[:1]:
        buggy = task.bug_files[f]
        bug_lines = {m.line for m in ms if m.file == f}
        others = [m for m in mutations(f, buggy) if m.line not in bug_lines]
        picked = 0
        for i in rng.permutation(len(others)):
            if picked >= n_wrong_site:
                break
            try:
                text = others[int(i)].apply(buggy)
                compile(text, f, "exec")
            except (ValueError, SyntaxError):
                continue
            out.append(_cand(task, repo, "wrong_site", picked, {f: text}, line=others[int(i)].line))
            picked += 1
    return out


def oracle_report(task: RepoTask, repo: PyRepo, files: dict[str, str],
                  limits: SandboxLimits | None = None) -> TestReport:
    """The full selected suite on base + ``files`` (test files are never taken from a candidate)."""
    safe = {p: t for p, t in files.items() if p in repo.source_files()}
    return repo.run_tests(safe, limits=limits)


def verify(cand: Candidate, task: RepoTask, repo: PyRepo) -> Candidate:
    """Label ``cand`` with the full oracle (in place; returns it)."""
    rep = oracle_report(task, repo, cand.files)
    cand.y = int(rep.all_pass(task.fail_to_pass + task.pass_to_pass))
    cand.oracle_wall_s, cand.oracle_cpu_s = rep.wall_s, rep.cpu_s
    cand.meta["oracle_status"] = rep.status
    return cand


class PoolGenerator:
    """Draws candidates from a labelled pool with a known kernel: the first is correct with probability ``b0``;
    after a correct one the next is correct with probability ``1 - p_break``, after an incorrect one with
    probability ``p_fix``. Without replacement; when the wanted side is empty the other side is used and
    ``forced`` counts it; ``None`` when the pool is exhausted."""

    def __init__(self, pool: Sequence[Candidate], *, b0: float, p_fix: float, p_break: float, seed: int = 0):
        for name, v in (("b0", b0), ("p_fix", p_fix), ("p_break", p_break)):
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {v}")
        if any(c.y is None for c in pool):
            raise ValueError("every candidate in the pool needs its oracle label y (run verify first)")
        self.b0, self.p_fix, self.p_break = b0, p_fix, p_break
        self.good = [c for c in pool if c.y == 1]
        self.bad = [c for c in pool if c.y == 0]
        self.rng: np.random.Generator = rng_for("pyrepo.pool", seed, len(pool))
        self.last: Candidate | None = None
        self.forced = 0

    def next(self) -> Candidate | None:
        if not self.good and not self.bad:
            return None
        p = self.b0 if self.last is None else (1 - self.p_break if self.last.y == 1 else self.p_fix)
        want_good = bool(self.rng.random() < p)
        side = self.good if want_good else self.bad
        if not side:
            side = self.bad if want_good else self.good
            self.forced += 1
        c = side.pop(int(self.rng.integers(len(side))))
        self.last = c
        return c
