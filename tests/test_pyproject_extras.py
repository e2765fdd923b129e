"""Every extra that src/ tells a user to install exists in pyproject.toml.

A hint naming an extra pip does not know is worse than none: ``pip install 'agentmill[verl]'`` only warns
"does not provide the extra" and installs nothing, so the user gets the same ImportError again. The hostile-input
probe (issue 20, item 8) found exactly that in the verl adapter. Two sources are read: the text of every file under
``src/agentmill`` (messages, docstrings, READMEs: ``agentmill[a,b]``) and, through the AST, the literal extras
passed to ``MissingExtraError`` and ``require``, whose message is built at run time, and those an experiment
``requires=`` or a paper package ``REQUIRES`` (the runner and ``agentmill list`` turn them into the install line).
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "agentmill"
NAMED = re.compile(r"agentmill\[([^\]\s]*)\]")
PLACEHOLDERS = {"extra", "x"}
"""Metasyntactic names in docstrings that describe the hint's format (core/extras.py, experiments/runner.py)."""


def _declared() -> set[str]:
    return set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])


def named_in_text(text: str) -> set[str]:
    """The extras an ``agentmill[...]`` in ``text`` names; an f-string's ``{...}`` field is skipped (it joins names
    that ``missing_extras`` has already checked against the table)."""
    out: set[str] = set()
    for m in NAMED.finditer(text):
        if "{" not in m.group(1):
            out.update(n.strip() for n in m.group(1).split(","))
    return out - PLACEHOLDERS


def named_in_calls(tree: ast.AST) -> set[str]:
    """Literal extras in code: the first argument of ``MissingExtraError(...)`` or ``require(...)`` (a name, or a
    list/tuple of names), an ``Experiment(requires=...)`` and a package's ``REQUIRES = ...`` (sets of names)."""
    out: set[str] = set()

    def names(node: ast.AST) -> None:
        out.update(x.value for x in ast.walk(node) if isinstance(x, ast.Constant) and isinstance(x.value, str))

    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "REQUIRES" for t in node.targets):
            names(node.value)
        if not isinstance(node, ast.Call):
            continue
        for kw in node.keywords:
            if kw.arg == "requires":
                names(kw.value)
        f = node.func
        if node.args and (f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None) \
                in ("MissingExtraError", "require"):
            arg = node.args[0]
            items = arg.elts if isinstance(arg, (ast.List, ast.Tuple)) else [arg]
            out.update(x.value for x in items if isinstance(x, ast.Constant) and isinstance(x.value, str))
    return out


def _sources() -> list[Path]:
    return [p for p in sorted(SRC.rglob("*")) if p.is_file() and "__pycache__" not in p.parts]


def test_the_scanners_see_what_they_should() -> None:
    """Hand-checkable inputs for both readers (a reader that finds nothing would pass the real test vacuously)."""
    assert named_in_text("pip install 'agentmill[hf,peft]' or agentmill[verl]; agentmill[{','.join(m)}]") == \
        {"hf", "peft", "verl"}
    assert named_in_text("`` (pip install 'agentmill[x]')`` names agentmill[extra]") == set()
    tree = ast.parse("raise MissingExtraError('trl', 'w')\nraise base.MissingExtraError(('hf', 'peft'), 'w')\n"
                     "raise MissingExtraError(missing, 'w')\nraise ImportError('x')\nrequire('gymnasum', 'w')\n"
                     "E = Experiment(id='e', requires=frozenset({'autocog_e2e', 'hf'}))\n"
                     "REQUIRES = frozenset({'constraint_rot'})\nrequire(extra, 'w')")
    assert named_in_calls(tree) == {"trl", "hf", "peft", "gymnasum", "autocog_e2e", "constraint_rot"}


def test_every_extra_named_in_src_is_declared_in_pyproject() -> None:
    declared = _declared()
    where: dict[str, list[str]] = {}
    for path in _sources():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # binary assets name no extras
        names = named_in_text(text)
        if path.suffix == ".py":
            names |= named_in_calls(ast.parse(text, filename=str(path)))
        for name in names:
            where.setdefault(name, []).append(str(path.relative_to(ROOT)))
    # the scan reaches messages, MissingExtraError calls, experiments' requires= and E164's REQUIRES
    assert {"hf", "trl", "serve", "autogen", "autocog-e2e", "constraint-rot"} <= set(where)
    unknown = {name: files for name, files in where.items() if name not in declared}
    assert not unknown, f"extras named in src/ but absent from pyproject.toml: {unknown}"
