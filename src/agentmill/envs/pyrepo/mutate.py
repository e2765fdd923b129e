"""Seeded bugs: single-token mutations of covered functions, kept only when the suite kills them.

Operators (each a one-token edit on one line, so the gold patch is one line): comparison swap (``<``↔``<=``,
``>``↔``>=``, ``==``↔``!=``), arithmetic swap (``+``↔``-``, ``*``↔``//``), small-int off-by-one (``n`` → ``n±1``
for ``|n| ≤ 10``), boolean operator swap (``and``↔``or``), condition negation (``if c:`` → ``if not (c):``),
removal of ``not``, constant swap (``True``↔``False``) and ``return name`` → ``return None``. Only lines inside a
function body (not its docstring) are mutated.

A mutant is kept iff it compiles, and a screening run (the test files named after its module, or the whole suite
when none is) fails at least 1 and at most 20 % of the tests it ran, with no collection error and no timeout; the
full suite then gives FAIL_TO_PASS (tests failing on the mutant) and PASS_TO_PASS (the rest of the selected suite),
SWE-bench's convention. The gold patch is the reverse diff (mutant -> base). Every attempt is appended to a JSONL
log (fsynced), so an interrupted mining run resumes and the rejection log is kept.
"""

from __future__ import annotations

import ast
import difflib
import hashlib
import io
import json
import os
import re
import tokenize
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from agentmill.core.records import append_jsonl
from agentmill.core.seeding import rng_for
from agentmill.envs.pyrepo.corpus import PyRepo, git, pyrepo_cache
from agentmill.envs.pyrepo.oracle import SandboxLimits

SWAPS: dict[str, tuple[str, tuple[str, ...]]] = {
    "<": ("cmp_swap", ("<=",)), "<=": ("cmp_swap", ("<",)), ">": ("cmp_swap", (">=",)), ">=": ("cmp_swap", (">",)),
    "==": ("cmp_swap", ("!=",)), "!=": ("cmp_swap", ("==",)),
    "+": ("arith_swap", ("-",)), "-": ("arith_swap", ("+",)), "*": ("arith_swap", ("//",)),
    "//": ("arith_swap", ("*",)),
    "and": ("bool_swap", ("or",)), "or": ("bool_swap", ("and",)),
    "True": ("const_swap", ("False",)), "False": ("const_swap", ("True",)),
}
FAMILIES: dict[str, tuple[str, ...]] = {
    "cmp_swap": ("<", "<=", ">", ">=", "==", "!="), "arith_swap": ("+", "-", "*", "//"),
    "bool_swap": ("and", "or"), "const_swap": ("True", "False"),
}
"""Same-site alternatives for wrong candidate patches (another member of the token's family)."""
MAX_FAIL_SHARE = 0.20


@dataclass(frozen=True)
class Mutation:
    """One token edit: ``line`` (1-based), columns ``[col, end_col)`` of that line hold ``old``; it becomes ``new``."""

    file: str
    line: int
    col: int
    end_col: int
    old: str
    new: str
    op: str

    @property
    def id(self) -> str:
        h = hashlib.sha256(f"{self.file}:{self.line}:{self.col}:{self.op}:{self.new}".encode()).hexdigest()
        return h[:12]

    def apply(self, text: str) -> str:
        lines = text.splitlines(keepends=True)
        ln = lines[self.line - 1]
        if ln[self.col:self.end_col] != self.old:
            raise ValueError(f"mutation {self.id}: {self.file}:{self.line} does not hold {self.old!r} at "
                             f"column {self.col}")
        lines[self.line - 1] = ln[:self.col] + self.new + ln[self.end_col:]
        return "".join(lines)


def _function_lines(tree: ast.AST) -> set[int]:
    """Lines inside function bodies, docstrings excluded."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
                    and isinstance(body[0].value.value, str):
                body = body[1:]
            for st in body:
                out.update(range(st.lineno, (st.end_lineno or st.lineno) + 1))
    return out


def mutations(path: str, text: str) -> list[Mutation]:
    """Every candidate mutation of one source file (compilation is checked later)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    inside = _function_lines(tree)
    out: list[Mutation] = []
    toks = list(tokenize.generate_tokens(io.StringIO(text).readline))
    for i, t in enumerate(toks):
        (ln, c0), (ln2, c1) = t.start, t.end
        if ln != ln2 or ln not in inside:
            continue
        s = t.string
        if (t.type == tokenize.OP or t.type == tokenize.NAME) and s in SWAPS:
            op, news = SWAPS[s]
            out += [Mutation(path, ln, c0, c1, s, n, op) for n in news]
        elif t.type == tokenize.NUMBER and re.fullmatch(r"\d+", s) and int(s) <= 10:
            out += [Mutation(path, ln, c0, c1, s, str(int(s) + d), "off_by_one") for d in (1, -1) if int(s) + d >= 0]
        elif t.type == tokenize.NAME and s == "not":
            prev, nxt = toks[i - 1].string if i else "", toks[i + 1].string if i + 1 < len(toks) else ""
            if prev != "is" and nxt != "in":
                end = c1 + 1 if text.splitlines()[ln - 1][c1:c1 + 1] == " " else c1
                out.append(Mutation(path, ln, c0, end, text.splitlines()[ln - 1][c0:end], "", "remove_not"))
    lines = text.splitlines()
    for node in ast.walk(tree):
        if isinstance(node, (ast.If, ast.While)) and node.lineno in inside and node.test.end_lineno == node.lineno:
            t = node.test
            seg = lines[t.lineno - 1][t.col_offset:t.end_col_offset]
            out.append(Mutation(path, t.lineno, t.col_offset, t.end_col_offset, seg, f"not ({seg})", "negate_cond"))
        elif isinstance(node, ast.Return) and isinstance(node.value, ast.Name) and node.lineno in inside:
            v = node.value
            out.append(Mutation(path, v.lineno, v.col_offset, v.end_col_offset, v.id, "None", "return_none"))
    return out


def compiles(text: str) -> bool:
    try:
        compile(text, "<mutant>", "exec")
        return True
    except (SyntaxError, ValueError):
        return False


def unified_diff(path: str, before: str, after: str) -> str:
    """A git-style unified diff of one file (``a/`` and ``b/`` prefixes, 3 lines of context)."""
    lines = difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                 f"a/{path}", f"b/{path}", n=3)
    out = []
    for ln in lines:
        out.append(ln if ln.endswith("\n") else ln + "\n\\ No newline at end of file\n")
    return f"diff --git a/{path} b/{path}\n" + "".join(out) if out else ""


@dataclass
class RepoTask:
    """One bug instance (SWE-bench's fields where they exist)."""

    instance_id: str
    repo: str
    """``name==version`` of the corpus package (or ``minicalc==0.0`` for the fixture)."""
    kind: str
    """``seeded`` (a mutation) or ``release`` (a real fix between adjacent releases)."""
    base_commit: str
    """The fixed tree (the package as released)."""
    bug_commit: str
    """The buggy tree: a commit in the repository's git (objects only) that sherloc's snapshot reads."""
    bug_files: dict[str, str]
    """Relative path -> full buggy text of every file the bug changes (applied over the base tree)."""
    gold_patch: str
    """Unified diff buggy -> fixed."""
    fail_to_pass: list[str]
    pass_to_pass: list[str]
    issue: str
    """Issue style (a): failing test ids and assertion messages; frames inside the package source removed."""
    issue_full: str
    """Issue style (b): the full short tracebacks (they name the buggy line; easy; reported separately)."""
    mutations: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RepoTask:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})

    @property
    def gold_files(self) -> list[str]:
        return sorted(self.bug_files)

    def mutation_objects(self) -> list[Mutation]:
        return [Mutation(**m) for m in self.mutations]


def bug_commit(repo: PyRepo, files: dict[str, str], ref: str) -> str:
    """A commit on top of the base holding ``files`` (git objects and a ref only; the work tree is untouched)."""
    index = repo.root / ".git" / f"pyrepo-index-{os.getpid()}-{ref}"
    env = {"GIT_INDEX_FILE": str(index)}
    try:
        git(repo.root, "read-tree", repo.commit, env=env)
        for rel, text in files.items():
            blob = git(repo.root, "hash-object", "-w", "--stdin", input=text.encode("utf-8"))
            git(repo.root, "update-index", "--add", "--cacheinfo", f"100644,{blob},{rel}", env=env)
        tree = git(repo.root, "write-tree", env=env)
        commit = git(repo.root, "commit-tree", tree, "-p", repo.commit, "-m", f"pyrepo {ref}")
        git(repo.root, "update-ref", f"refs/pyrepo/{ref}", commit)
        return commit
    finally:
        index.unlink(missing_ok=True)


FRAME = re.compile(r"^(\S[^:\n]*\.py):(\d+): in ")


def issue_texts(repo: PyRepo, failing: Sequence[str], reprs: dict[str, str], max_tests: int = 3) -> tuple[str, str]:
    """(stripped, full) issue texts from the failing tests' short tracebacks."""
    tests = [t.rstrip("/") + "/" for t in repo.tests]
    head = f"Running the test suite of {repo.name} {repo.version} gives {len(failing)} failing test(s):"
    stripped, full = [head], [head]
    for tid in list(failing)[:max_tests]:
        text = reprs.get(tid, "")
        stripped.append(f"\nFAILED {tid}")
        full.append(f"\nFAILED {tid}\n{text.strip()}")
        keep = False
        for ln in text.splitlines():
            m = FRAME.match(ln)
            if m:
                keep = any(m.group(1).startswith(t) for t in tests)
                if keep:
                    stripped.append(ln)
                continue
            if keep or ln.startswith("E "):
                stripped.append(ln)
    if len(failing) > max_tests:
        more = f"\n... and {len(failing) - max_tests} more failing test(s)"
        stripped.append(more)
        full.append(more)
    return "\n".join(stripped).strip() + "\n", "\n".join(full).strip() + "\n"


def screen_targets(repo: PyRepo, file: str) -> list[str]:
    """The test files named after ``file``'s module (``test_<stem>.py`` or a stem match), else [] (whole suite)."""
    stem = Path(file).stem
    if stem == "__init__":
        stem = Path(file).parent.name
    files = repo.test_files()
    exact = [f for f in files if Path(f).stem in (f"test_{stem}", f"{stem}_test")]
    return exact or [f for f in files if stem in Path(f).stem]


def _read_log(path: Path) -> list[dict[str, Any]]:
    rows = []
    if path.exists():
        for ln in path.read_text(encoding="utf-8").splitlines():
            try:
                rows.append(json.loads(ln))
            except ValueError:  # a torn last line after a crash
                pass
    return rows


def candidate_order(repo: PyRepo, seed: int) -> list[Mutation]:
    """All compilable mutations of the repo's source files in a seeded order, files interleaved (round-robin) so
    the first instances come from different modules."""
    per_file: list[list[Mutation]] = []
    for rel in repo.source_files():
        text = repo.read(rel)
        ms = mutations(rel, text)
        rng = rng_for("pyrepo.mutate", repo.sha256, rel, seed)
        per_file.append([ms[i] for i in rng.permutation(len(ms))])
    rng = rng_for("pyrepo.mutate.files", repo.sha256, seed)
    per_file = [per_file[i] for i in rng.permutation(len(per_file))]
    out: list[Mutation] = []
    while any(per_file):
        for lst in per_file:
            if lst:
                out.append(lst.pop(0))
    return out


def try_mutation(repo: PyRepo, m: Mutation) -> tuple[RepoTask | None, str]:
    """Screen and confirm one mutation; (task, "kept") or (None, reason)."""
    base = repo.read(m.file)
    text = m.apply(base)
    if not compiles(text):
        return None, "does not compile"
    lim = SandboxLimits(wall_s=max(15.0, 3 * repo.suite_wall_s + 10))
    targets = screen_targets(repo, m.file)
    n_suite = len(repo.passing)
    if targets:
        r = repo.run_tests({m.file: text}, targets, limits=lim)
        ran = [i for i in repo.passing if i.split("::", 1)[0] in targets]
        if r.status != "ok":
            return None, f"screen: {r.status}"
        if r.collection_errors:
            return None, "screen: collection error"
        fails = [i for i in ran if r.outcomes.get(i) != "passed"]
        if not fails:
            return None, "screen: survived"
        if len(fails) > MAX_FAIL_SHARE * max(len(ran), 1) and len(fails) > 1:
            return None, f"screen: kills too many ({len(fails)}/{len(ran)})"
    r = repo.run_tests({m.file: text}, limits=lim)
    if r.status != "ok":
        return None, f"confirm: {r.status}"
    if r.collection_errors:
        return None, "confirm: collection error"
    f2p = [i for i in repo.passing if r.outcomes.get(i) != "passed"]
    if not f2p:
        return None, "confirm: survived"
    if len(f2p) > MAX_FAIL_SHARE * n_suite:
        return None, f"confirm: kills too many ({len(f2p)}/{n_suite})"
    iid = f"{repo.name}-{repo.version}-{m.id}"
    commit = bug_commit(repo, {m.file: text}, iid)
    issue, issue_full = issue_texts(repo, f2p, r.reprs)
    task = RepoTask(iid, repo.key, "seeded", repo.commit, commit, {m.file: text}, unified_diff(m.file, text, base),
                    f2p, [i for i in repo.passing if i not in f2p], issue, issue_full, [asdict(m)])
    return task, "kept"


def seed_bugs(repo: PyRepo, n: int, *, seed: int = 0, max_tries: int | None = None,
              cache: str | os.PathLike[str] | None = None, log: str | os.PathLike[str] | None = None,
              progress=None) -> list[RepoTask]:
    """Up to ``n`` seeded-bug instances of ``repo`` (the first ``n`` kept mutants in the seeded order). Attempts
    are logged to ``log`` (default: the pyrepo cache, keyed by the sdist hash and seed) and reused on the next call,
    so mining is paid once."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    path = Path(log) if log is not None else pyrepo_cache(cache) / "tasks" / f"{repo.sha256}-seed{seed}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    done = {r["mutation_id"]: r for r in _read_log(path)}
    tasks: list[RepoTask] = []
    tries = 0
    for m in candidate_order(repo, seed):
        if len(tasks) >= n or (max_tries is not None and tries >= max_tries):
            break
        row = done.get(m.id)
        if row is None:
            if not compiles(m.apply(repo.read(m.file))):
                continue  # not an attempt: never reaches pytest
            tries += 1
            task, why = try_mutation(repo, m)
            row = {"mutation_id": m.id, "mutation": asdict(m), "kept": task is not None, "reason": why,
                   "task": task.to_dict() if task else None}
            append_jsonl(path, row)
        if row["kept"]:
            tasks.append(RepoTask.from_dict(row["task"]))
            if progress:
                progress(len(tasks), n)
    return tasks


def attempts(repo: PyRepo, *, seed: int = 0, cache: str | os.PathLike[str] | None = None) -> list[dict[str, Any]]:
    """The mining log (kept and rejected attempts, with reasons) of ``seed_bugs``."""
    return _read_log(pyrepo_cache(cache) / "tasks" / f"{repo.sha256}-seed{seed}.jsonl")


def iter_mutants(repo: PyRepo) -> Iterator[Mutation]:
    for rel in repo.source_files():
        yield from mutations(rel, repo.read(rel))
