"""The layer arrows of ARCHITECTURE.md §1, enforced by reading every module's imports (AST, no execution).

    cli, serve -> experiments -> methods -> lm, envs -> core

Also: a method never imports another method, and heavy optional dependencies are never imported at module level
(so ``import agentmill.<anything>`` works without the extras, and a missing extra fails with a clear message).

The rooms inside ``experiments/`` (ARCHITECTURE.md §2): a paper's package (``e1xx_<slug>/``) or a composition
(``compose_<name>/``) never imports another such package; a module that defines an ``EXPERIMENT`` is loaded only by
the registry (what several experiments share lives in a concept-named module of their package); ``cli/`` imports no
experiment package (it reaches experiments through the registry); and no module anywhere imports another module's
``_private`` name.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import pytest

from agentmill.core.extras import EXTRA_IMPORTS

SRC = Path(__file__).resolve().parents[1] / "src" / "agentmill"

ALLOWED: dict[str, set[str]] = {
    "core": set(),
    "lm": {"core"},
    "envs": {"core"},
    "methods": {"core", "lm", "envs"},
    "experiments": {"core", "lm", "envs", "methods"},
    "report": {"core", "experiments"},
    "serve": {"core", "lm", "methods"},
    "cli": {"core", "lm", "envs", "methods", "experiments", "report", "serve"},
}
HEAVY = set().union(*EXTRA_IMPORTS.values()) | {"accelerate", "llama_cpp"}
"""Every module an extra brings (``core/extras.py``), plus two that come with them: never imported at module level."""
TORCH_MODULES = {"agentmill.methods.dspark.drafter", "agentmill.methods.dspark.train"}
"""Modules that *are* ``torch.nn`` definitions may import torch at module level. The invariant the lazy rule protects
(importing any light path never loads torch) is kept by ``test_torch_modules_are_imported_lazily``: nothing outside
this set imports them at module level."""


def _modules() -> list[Path]:
    return sorted(p for p in SRC.rglob("*.py"))


def _layer(path: Path) -> str | None:
    rel = path.relative_to(SRC).parts
    return rel[0] if len(rel) > 1 else None


def _imports(tree: ast.AST, path: Path, src: Path = SRC) -> list[tuple[str, int]]:
    out = []
    pkg = ".".join(("agentmill",) + path.relative_to(src).parts[:-1])
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.append((mod, node.lineno))
    return out


def _module_level_imports(tree: ast.Module) -> list[tuple[str, int]]:
    """Imports executed at import time: module body, including inside module-level if/try (not TYPE_CHECKING)."""
    found: list[tuple[str, int]] = []

    def visit(stmts):
        for st in stmts:
            if isinstance(st, ast.Import):
                found.extend((a.name, st.lineno) for a in st.names)
            elif isinstance(st, ast.ImportFrom) and not st.level:
                found.append((st.module or "", st.lineno))
            elif isinstance(st, ast.If):
                if "TYPE_CHECKING" in ast.unparse(st.test):
                    continue
                visit(st.body)
                visit(st.orelse)
            elif isinstance(st, ast.Try):
                visit(st.body)
                for h in st.handlers:
                    visit(h.body)
                visit(st.orelse)
                visit(st.finalbody)
            elif isinstance(st, ast.ClassDef):
                visit(st.body)

    visit(tree.body)
    return found


def arrow_violations(path: Path, src: Path = SRC) -> list[str]:
    """Imports in ``path`` that break the layer arrows (or a method importing another method)."""
    rel = path.relative_to(src).parts
    if len(rel) < 2:
        return []
    layer = rel[0]
    if layer not in ALLOWED:
        return [f"{path}: unknown layer {layer!r}; add it to ARCHITECTURE.md and this test"]
    found = []
    for mod, line in _imports(ast.parse(path.read_text(encoding="utf-8")), path, src):
        parts = mod.split(".")
        if parts[0] != "agentmill" or len(parts) < 2:
            continue
        target = parts[1]
        if target == layer:
            if layer == "methods" and len(parts) > 2 and parts[2] != rel[1]:
                found.append(f"{path}:{line}: method {rel[1]!r} imports method {parts[2]!r}")
        elif target not in ALLOWED[layer]:
            found.append(f"{path}:{line}: layer {layer!r} must not import agentmill.{target}")
    return found


EXPERIMENT_PACKAGE = re.compile(r"^(e\d{3}_\w+|compose_\w+)$")
"""A paper's experiment package (``e162_tree_rollouts``) or a composition (``compose_tree_credit``)."""


def _dotted_in(path: Path, src: Path) -> str:
    name = ".".join(("agentmill",) + path.relative_to(src).with_suffix("").parts)
    return name.removesuffix(".__init__")


def _defines_experiment(path: Path) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return any(isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "EXPERIMENT" for t in n.targets)
               for n in tree.body)


def experiment_modules(src: Path = SRC) -> set[str]:
    """Dotted names of the modules that define an ``EXPERIMENT`` (inside experiment packages)."""
    root = src / "experiments"
    return {_dotted_in(p, src) for p in root.glob("*/*.py")
            if EXPERIMENT_PACKAGE.match(p.parent.name) and p.name != "__init__.py" and _defines_experiment(p)}


def room_violations(path: Path, src: Path = SRC, experiments: set[str] | None = None) -> list[str]:
    """Imports in ``path`` that break the rooms of ``experiments/`` (see the module docstring)."""
    rel = path.relative_to(src).parts
    if len(rel) < 2:
        return []
    experiments = experiment_modules(src) if experiments is None else experiments
    own = rel[1] if rel[0] == "experiments" and len(rel) > 2 and EXPERIMENT_PACKAGE.match(rel[1]) else None
    found = []
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for mod, line in _imports(tree, path, src):
        parts = mod.split(".")
        if parts[:2] != ["agentmill", "experiments"] or len(parts) < 3 or not EXPERIMENT_PACKAGE.match(parts[2]):
            continue
        if rel[0] == "cli":
            found.append(f"{path}:{line}: cli imports experiment package {mod}; use the registry (experiments.get)")
        elif own is not None and parts[2] != own:
            found.append(f"{path}:{line}: experiment package {own!r} imports another package, {mod}")
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        base = _imports(ast.Module(body=[node], type_ignores=[]), path, src)[0][0]
        targets = {base} | {f"{base}.{a.name}" for a in node.names}
        for target in sorted(targets & experiments):
            found.append(f"{path}:{node.lineno}: imports experiment module {target}; share through a concept module")
    return found


@functools.cache
def _module_names(src: Path) -> frozenset[str]:
    return frozenset(_dotted_in(p, src) for p in src.rglob("*.py"))


def private_violations(path: Path, src: Path = SRC) -> list[str]:
    """Imports of another agentmill module's ``_private`` name, directly or as ``alias._name`` on an imported
    module."""
    own = _dotted_in(path, src)
    modules = _module_names(src)
    tree = ast.parse(path.read_text(encoding="utf-8"))
    aliases: dict[str, str] = {}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            mod = _imports(ast.Module(body=[node], type_ignores=[]), path, src)[0][0]
            if not mod.startswith("agentmill"):
                continue
            for a in node.names:
                if f"{mod}.{a.name}" in modules:
                    aliases[a.asname or a.name] = f"{mod}.{a.name}"
                elif a.name.startswith("_") and not a.name.startswith("__") and mod != own:
                    found.append(f"{path}:{node.lineno}: imports private name {mod}.{a.name}")
        elif isinstance(node, ast.Import):
            aliases.update({a.asname: a.name for a in node.names if a.asname and a.name.startswith("agentmill")})
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                and node.attr.startswith("_") and not node.attr.startswith("__")):
            found.append(f"{path}:{node.lineno}: uses private name {aliases[node.value.id]}.{node.attr}")
    return found


_EXPERIMENT_MODULES = experiment_modules()


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(SRC)))
def test_experiment_rooms(path: Path) -> None:
    assert not room_violations(path, experiments=_EXPERIMENT_MODULES)


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(SRC)))
def test_no_private_imports(path: Path) -> None:
    assert not private_violations(path)


def test_every_paper_package_is_registered() -> None:
    """Each experiment package names its paper and lists exactly its experiment modules (the registry's view)."""
    import importlib

    from agentmill.experiments import PAPERS

    on_disk = {p.name for p in (SRC / "experiments").iterdir() if p.is_dir() and EXPERIMENT_PACKAGE.match(p.name)}
    assert {p.rsplit(".", 1)[1] for p in PAPERS} == on_disk
    for package in PAPERS:
        pkg = importlib.import_module(package)
        assert isinstance(pkg.PAPER, str) and pkg.PAPER
        listed = {f"{package}.{m}" for m in pkg.MODULES}
        assert listed == {m for m in _EXPERIMENT_MODULES if m.startswith(package + ".")}, package


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(SRC)))
def test_layer_arrows(path: Path) -> None:
    assert not arrow_violations(path)


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(SRC)))
def test_heavy_dependencies_are_lazy(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    if _dotted(path) in TORCH_MODULES:
        return
    for mod, line in _module_level_imports(tree):
        assert mod.split(".")[0] not in HEAVY, (
            f"{path}:{line}: imports {mod} at module level; import it inside the function that needs it")


def _dotted(path: Path) -> str:
    return ".".join(("agentmill",) + path.relative_to(SRC).with_suffix("").parts)


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(SRC)))
def test_torch_modules_are_imported_lazily(path: Path) -> None:
    if _dotted(path) in TORCH_MODULES:
        return
    for mod, line in _module_level_imports(ast.parse(path.read_text(encoding="utf-8"))):
        assert mod not in TORCH_MODULES, f"{path}:{line}: imports torch module {mod} at module level"


def test_core_is_numpy_only() -> None:
    for path in (SRC / "core").rglob("*.py"):
        for mod, line in _imports(ast.parse(path.read_text()), path):
            top = mod.split(".")[0]
            assert top not in ("torch", "transformers", "matplotlib", "rich"), f"{path}:{line}: core imports {mod}"


def test_checker_catches_violations(tmp_path: Path) -> None:
    """The checker has power: planted violations in a fake source tree are all reported."""
    src = tmp_path / "agentmill"
    for rel, text in {
        "core/bad.py": "from agentmill.lm import load_lm\n",
        "methods/a/core.py": "from agentmill.methods.b import thing\nfrom ..b import other\n",
        "lm/ok.py": "from agentmill.core.stats import Estimate\n",
        "experiments/bad.py": "from agentmill.cli import main\n",
    }.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(text)
    found = [v for p in sorted(src.rglob("*.py")) for v in arrow_violations(p, src)]
    assert len(found) == 4, found
    assert any("must not import agentmill.lm" in v for v in found)
    assert sum("imports method 'b'" in v for v in found) == 2
    heavy = ast.parse("import os\nif True:\n    import torch\ndef f():\n    import ray\n")
    assert [m for m, _ in _module_level_imports(heavy)] == ["os", "torch"]


def test_room_checker_catches_violations(tmp_path: Path) -> None:
    """The room and private-name checkers have power: every planted violation is reported, and the allowed
    imports (own package's concept module, the registry, protocol) are not."""
    src = tmp_path / "agentmill"
    files = {
        "experiments/__init__.py": "",
        "experiments/protocol.py": "",
        "experiments/e901_a/__init__.py": "PAPER = 'a'\n",
        "experiments/e901_a/shared.py": "def helper():\n    pass\n",
        "experiments/e901_a/one.py": ("from agentmill.experiments.e901_a.shared import helper\n"
                                      "from agentmill.experiments import protocol\nEXPERIMENT = 1\n"),
        "experiments/e901_a/two.py": "from agentmill.experiments.e901_a.one import EXPERIMENT as E\nEXPERIMENT = 2\n",
        "experiments/e902_b/__init__.py": "",
        "experiments/e902_b/three.py": "from agentmill.experiments.e901_a.shared import helper\nEXPERIMENT = 3\n",
        "experiments/compose_ab/four.py": "from agentmill.experiments.e901_a import shared\nEXPERIMENT = 4\n",
        "cli/main.py": ("from agentmill.experiments import get\nfrom agentmill.experiments.e901_a.shared import helper\n"
                        "from agentmill.core.x import _hidden\nimport agentmill.core.x as x\ny = x._hidden\n"),
        "core/x.py": "_hidden = 1\n",
    }
    for rel, text in files.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(text)
    exps = experiment_modules(src)
    assert exps == {"agentmill.experiments.e901_a.one", "agentmill.experiments.e901_a.two",
                    "agentmill.experiments.e902_b.three", "agentmill.experiments.compose_ab.four"}
    rooms = {rel: room_violations(src / rel, src, exps) for rel in files}
    assert rooms["experiments/e901_a/one.py"] == []
    assert len(rooms["experiments/e901_a/two.py"]) == 1 and "imports experiment module" in rooms["experiments/e901_a/two.py"][0]
    assert len(rooms["experiments/e902_b/three.py"]) == 1 and "imports another package" in rooms["experiments/e902_b/three.py"][0]
    assert len(rooms["experiments/compose_ab/four.py"]) == 1
    assert len(rooms["cli/main.py"]) == 1 and "cli imports experiment package" in rooms["cli/main.py"][0]
    private = private_violations(src / "cli/main.py", src)
    assert len(private) == 2 and all("_hidden" in v for v in private)
    assert private_violations(src / "core/x.py", src) == []

