"""The parts of ``methods/constraint_rot`` import one way (the package README, "Layering").

Every ``import``/``from … import`` of the package by the package itself is read with ``ast`` — at module level,
inside functions and under ``if TYPE_CHECKING:`` alike — and mapped to the part it names. A part may import
itself and the parts listed before it in ``ORDER``, never one listed after it, so no cycle between parts can
come back.
"""

from __future__ import annotations

import ast
from pathlib import Path

import agentmill.methods.constraint_rot as package

PKG = "agentmill.methods.constraint_rot"
ROOT = Path(package.__file__).parent

ORDER = (
    # 1. text and conventions
    "messages", "summary_cache", "stats", "prereg",
    # 2. catalogue
    "predicates", "schema", "catalogue",
    # 3. compactors; 4. grading
    "compactors", "grader", "survival",
    # 5. pinning (core and harness integrations); the attack payload library
    "pinning", "payloads",
    # 6. actors (interface, scripted, endpoint)
    "actors",
    # 7. bench
    "distractors", "generate", "conditions", "loop",
    # 8. attacks; 9. organism (incl. the organism actor)
    "attacks", "organism",
    # 10. framework drivers; 11. analysis, and the run files and text specs the CLI reads
    "frameworks", "metrics", "crossing", "analysis", "runs", "specs", "sessions",
    # the root __init__ (re-exports)
    "__init__",
)
RANK = {part: i for i, part in enumerate(ORDER)}


def part_of_file(path: Path) -> str:
    rel = path.relative_to(ROOT)
    return rel.parts[0].removesuffix(".py")


def part_of_module(name: str) -> str | None:
    """The part a dotted module name inside the package belongs to (None outside the package)."""
    if name == PKG:
        return "__init__"
    if not name.startswith(PKG + "."):
        return None
    return name[len(PKG) + 1:].split(".", 1)[0]


def is_submodule(name: str) -> bool:
    return (ROOT / name).is_dir() or (ROOT / f"{name}.py").is_file()


def module_of(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = [p for p in rel.parts if p != "__init__"]
    return ".".join([PKG, *parts])


def imported_parts(path: Path) -> list[tuple[int, str, str]]:
    """(line, imported module, part) for every import of the package in ``path``, wherever it sits."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    here = module_of(path)
    is_pkg = path.name == "__init__.py"
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                base = here.split(".")
                base = base if is_pkg else base[:-1]
                base = base[:len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod == PKG:  # `from agentmill.methods.constraint_rot import conditions` names a submodule
                names = [f"{PKG}.{a.name}" if is_submodule(a.name) else PKG for a in node.names]
            else:
                names = [mod]
        else:
            continue
        for name in names:
            part = part_of_module(name)
            if part is not None:
                out.append((node.lineno, name, part))
    return out


def test_every_part_is_ranked() -> None:
    parts = {part_of_file(p) for p in ROOT.rglob("*.py")}
    assert parts <= set(ORDER), f"parts missing from ORDER: {sorted(parts - set(ORDER))}"


def test_imports_point_down_the_part_order() -> None:
    wrong = []
    for path in sorted(ROOT.rglob("*.py")):
        src = part_of_file(path)
        for line, name, dst in imported_parts(path):
            if dst not in RANK:
                wrong.append(f"{path.relative_to(ROOT)}:{line} imports {name} (unknown part {dst!r})")
            elif dst != src and RANK[dst] > RANK[src]:
                wrong.append(f"{path.relative_to(ROOT)}:{line} ({src}) imports {name} ({dst}, a later part)")
    assert not wrong, "imports against the layering of the package README:\n" + "\n".join(wrong)


def test_the_scanner_sees_function_level_and_type_checking_imports() -> None:
    # a hand-checkable input: one import at module level, one in a function, one under TYPE_CHECKING
    f = ROOT / "actors" / "base.py"  # holds a TYPE_CHECKING import of the catalogue
    assert any(part == "catalogue" for _, _, part in imported_parts(f))
    g = ROOT / "attacks" / "cases.py"  # imports the loop and the conditions inside functions
    assert {"loop", "conditions", "actors"} <= {part for _, _, part in imported_parts(g)}
