"""The renamed-repository control: the same repository with its package, module and top-level names replaced.

A localizer that has seen ``cachetools`` in pretraining may find ``cachetools/func.py`` from the issue's vocabulary
alone. Renaming the package, every module and every top-level function and class to meaningless but stable
identifiers (``pkg_3f9a01``, ``mod_…``, ``fn_…``, ``cls_…``), in the code *and* in the issue text, keeps the bug and
its difficulty and removes what memory could match; the Acc@1 drop between the two views is the memorised part of
recall (the paper's caveat, its claim S-7 here).

How: the names come from the code's AST (module-level ``def``/``class``; never dunders, private names of one
character or builtins), the replacement from Python's tokenizer (NAME tokens only, so strings, comments and keywords
are untouched and every line keeps its number); files the tokenizer rejects, and non-Python text, get a
whole-word regex replacement. File paths move with their modules, so a gold location maps by path alone and its
lines stay valid. The map is a pure function of the names (sha256), so two runs rename identically.
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import io
import keyword
import re
import tokenize
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath

from agentmill.methods.sherloc.evaluate import Location
from agentmill.methods.sherloc.snapshot import RepoSnapshot

_RESERVED = frozenset(dir(builtins)) | frozenset(keyword.kwlist) | frozenset(keyword.softkwlist)


def _fresh(kind: str, name: str) -> str:
    return f"{kind}_{hashlib.sha256(f'{kind}:{name}'.encode()).hexdigest()[:6]}"


@dataclass(frozen=True)
class Renaming:
    """What was renamed: identifiers (old -> new) renamed wherever they occur (packages, top-level functions and
    classes), module names (old -> new) renamed only where they name a module, and file paths (old -> new)."""

    names: Mapping[str, str]
    modules: Mapping[str, str]
    paths: Mapping[str, str]

    def path(self, p: str) -> str:
        return self.paths.get(p, p)

    def text(self, s: str) -> str:
        """``s`` (issue text, non-Python files) with every renamed identifier replaced as a whole word, and module
        names replaced where a ``.`` or ``/`` precedes them (``pkg.mod``, ``src/pkg/mod.py``): a module called
        ``func`` is renamed in a traceback's path, not in the prose word "func"."""
        s = _word_sub(s, self.names)
        return _word_sub(s, self.modules, after=r"(?<=[./])")

    def locations(self, locs: Iterable[Location]) -> list[Location]:
        return [Location(self.path(loc.file), loc.start, loc.end) for loc in locs]


def _word_sub(s: str, names: Mapping[str, str], after: str = r"(?<![A-Za-z0-9_])") -> str:
    """``s`` with every key of ``names`` that stands as a whole word (longest first) replaced; ``after`` is the
    look-behind that must precede it (default: no identifier character)."""
    if not names:
        return s
    pat = re.compile(after + "(" + "|".join(re.escape(k) for k in sorted(names, key=len, reverse=True))
                     + r")(?![A-Za-z0-9_])")
    return pat.sub(lambda m: names[m.group(1)], s)


def _package_roots(py_paths: Iterable[str], excluded: frozenset[str]) -> set[str]:
    """Directories of the outermost importable packages (an ``__init__.py`` whose parent has none), at any depth
    (``src/`` layouts too), outside excluded directories (tests stay where the filtered view hides them)."""
    inits = {str(PurePosixPath(p).parent) for p in py_paths if PurePosixPath(p).name == "__init__.py"}
    return {d for d in inits if str(PurePosixPath(d).parent) not in inits
            and not any(x in excluded for x in PurePosixPath(d).parts)}


def _root_of(p: str, roots: set[str]) -> str | None:
    for r in roots:
        if p.startswith(r + "/"):
            return r
    return None


def plan(snapshot: RepoSnapshot, excluded: Iterable[str] = ()) -> Renaming:
    """The renaming of ``snapshot``: its packages, their modules and their modules' top-level functions and classes.

    Names are collected in package files outside ``excluded`` directory names (pass the filtered view's, so test
    directories are neither renamed into view nor mined for names); the replacement applies to every file."""
    ex = frozenset(excluded)
    py = [p for p in snapshot.files() if p.endswith(".py")]
    roots = _package_roots(py, ex)
    names: dict[str, str] = {}
    modules: dict[str, str] = {}
    for r in sorted(roots):
        leaf = PurePosixPath(r).name
        if leaf.isidentifier() and leaf not in _RESERVED:
            names[leaf] = _fresh("pkg", leaf)
    for p in py:
        root = _root_of(p, roots)
        if root is None:
            continue
        inner = PurePosixPath(p).relative_to(root).parts
        if any(x in ex for x in inner[:-1]):
            continue
        for d in inner[:-1]:
            if d.isidentifier() and d not in _RESERVED:
                modules.setdefault(d, _fresh("mod", d))
        stem = PurePosixPath(p).stem
        if stem != "__init__" and stem.isidentifier() and stem not in _RESERVED and not stem.startswith("__"):
            modules.setdefault(stem, _fresh("mod", stem))
        try:
            tree = ast.parse(snapshot.text(p))
        except (SyntaxError, ValueError):
            continue
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                n = node.name
                if n.startswith("__") or len(n.lstrip("_")) < 2 or n in _RESERVED:
                    continue
                names.setdefault(n, _fresh("cls" if isinstance(node, ast.ClassDef) else "fn", n))
    for m in list(modules):
        if m in names:  # a module named like one of its functions follows the identifier's renaming
            modules[m] = names[m]
    paths = {}
    for p in snapshot.all_paths():
        root = _root_of(p, roots)
        if root is None:
            continue
        parts = PurePosixPath(p).parts
        k = len(PurePosixPath(root).parts) - 1  # the package directory's own index; its parents keep their names
        ren = {**modules, **names}
        new = list(parts[:k]) + [ren.get(x, x) for x in parts[k:-1]]
        leaf = PurePosixPath(parts[-1])
        new.append(ren.get(leaf.stem, leaf.stem) + leaf.suffix if leaf.suffix in (".py", ".pyi") else parts[-1])
        q = "/".join(new)
        if q != p:
            paths[p] = q
    return Renaming(names, modules, paths)


def _rename_python(src: str, r: Renaming) -> str | None:
    """``src`` with NAME tokens renamed, line for line; None when the tokenizer rejects it. Identifiers are renamed
    everywhere; a module name only inside an ``import``/``from`` statement or right after ``<package or module>.``,
    so a local variable that shares a module's name keeps it."""
    lines = src.splitlines(keepends=True)
    edits: dict[int, list[tuple[int, int, str]]] = {}
    known = set(r.names) | set(r.modules)
    in_import = False
    prev: list[tokenize.TokenInfo] = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(src).readline):
            if tok.type in (tokenize.NEWLINE, tokenize.ENDMARKER):
                in_import = False
            elif tok.type == tokenize.NAME and tok.string in ("import", "from") and (
                    not prev or prev[-1].type in (tokenize.NEWLINE, tokenize.NL, tokenize.INDENT, tokenize.DEDENT)
                    or (prev[-1].type == tokenize.OP and prev[-1].string == ";")):
                in_import = True
            if tok.type == tokenize.NAME:
                new = r.names.get(tok.string)
                if new is None and tok.string in r.modules:
                    dotted = (len(prev) >= 2 and prev[-1].type == tokenize.OP and prev[-1].string == "."
                              and prev[-2].type == tokenize.NAME and prev[-2].string in known)
                    if in_import or dotted:
                        new = r.modules[tok.string]
                if new is not None:
                    (row, c0), (_, c1) = tok.start, tok.end
                    edits.setdefault(row - 1, []).append((c0, c1, new))
            if tok.type not in (tokenize.COMMENT, tokenize.NL):
                prev = (prev + [tok])[-2:]
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return None
    for row, es in edits.items():
        ln = lines[row]
        for c0, c1, new in sorted(es, reverse=True):
            ln = ln[:c0] + new + ln[c1:]
        lines[row] = ln
    return "".join(lines)


def apply(snapshot: RepoSnapshot, renaming: Renaming) -> RepoSnapshot:
    """A new snapshot with the renaming applied to every text file and path (binary, large and link entries keep
    their kind under their new path)."""
    files: dict[str, str] = {}
    for p in snapshot.all_paths():
        if not snapshot.is_text(p):
            continue
        t = snapshot.text(p)
        new = _rename_python(t, renaming) if p.endswith((".py", ".pyi")) else None
        files[renaming.path(p)] = new if new is not None else renaming.text(t)
    kinds = {renaming.path(p): k for p, k in snapshot.kinds.items() if k != "text"}
    targets = {renaming.path(p): t for p, t in snapshot.targets.items()}
    sizes = {renaming.path(p): n for p, n in snapshot.sizes.items() if snapshot.kinds.get(p) != "text"}
    sizes.update({p: len(t.encode("utf-8", errors="replace")) for p, t in files.items()})
    return RepoSnapshot(files, kinds=kinds, targets=targets,
                        non_utf8=frozenset(renaming.path(p) for p in snapshot.non_utf8),
                        commit=snapshot.commit + "+renamed", sizes=sizes)


def renamed(snapshot: RepoSnapshot, issue: str, gold: Iterable[Location],
            excluded: Iterable[str] = ()) -> tuple[RepoSnapshot, str, list[Location]]:
    """The renamed view of one instance: snapshot, issue text and gold locations, all under one renaming."""
    r = plan(snapshot, excluded)
    return apply(snapshot, r), r.text(issue), r.locations(gold)
