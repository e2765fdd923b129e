"""The layer arrows of ARCHITECTURE.md §1, enforced by reading every module's imports (AST, no execution).

    cli, serve -> experiments -> methods -> lm, envs -> core

Also: a method never imports another method, and heavy optional dependencies are never imported at module level
(so ``import agentmill.<anything>`` works without the extras, and a missing extra fails with a clear message).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

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
HEAVY = {"torch", "transformers", "fastapi", "uvicorn", "ray", "textworld", "peft", "trl", "openai", "selenium",
         "gguf", "accelerate", "llama_cpp"}
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
