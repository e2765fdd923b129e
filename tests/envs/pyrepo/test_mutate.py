"""Mutation operators on a hand-checkable module; gold diffs."""

from __future__ import annotations

import pytest

from agentmill.envs.pyrepo.mutate import Mutation, compiles, mutations, unified_diff

SRC = '''"""Module doc: x < y here is prose."""
LIMIT = 3 < 4


def f(a, b):
    """Docstring with a < b."""
    if a < b and not a:
        return True
    return a + 1


def g(x):
    return x
'''


def _ops(path: str = "m.py") -> dict[tuple[int, str, str], str]:
    return {(m.line, m.old, m.new): m.op for m in mutations(path, SRC)}


def test_operators_found_inside_functions_only() -> None:
    ops = _ops()
    assert ops[(7, "<", "<=")] == "cmp_swap"
    assert ops[(7, "and", "or")] == "bool_swap"
    assert ops[(7, "not ", "")] == "remove_not"
    assert ops[(7, "a < b and not a", "not (a < b and not a)")] == "negate_cond"
    assert ops[(8, "True", "False")] == "const_swap"
    assert ops[(9, "+", "-")] == "arith_swap"
    assert ops[(9, "1", "2")] == "off_by_one" and ops[(9, "1", "0")] == "off_by_one"
    assert ops[(13, "x", "None")] == "return_none"
    assert not any(line in (1, 2, 6) for line, _, _ in ops)  # module docstring, module level, function docstring


def test_apply_and_reverse_diff() -> None:
    m = Mutation("m.py", 9, 13, 14, "+", "-", "arith_swap")
    text = m.apply(SRC)
    assert text.splitlines()[8] == "    return a - 1" and compiles(text)
    diff = unified_diff("m.py", text, SRC)
    assert diff.startswith("diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n")
    assert "-    return a - 1\n+    return a + 1\n" in diff
    with pytest.raises(ValueError, match="does not hold"):
        Mutation("m.py", 9, 12, 13, "+", "-", "arith_swap").apply(SRC)


def test_every_mutation_is_one_line_and_ids_are_unique() -> None:
    ms = mutations("m.py", SRC)
    assert len({m.id for m in ms}) == len(ms)
    for m in ms:
        changed = [a for a, b in zip(SRC.splitlines(), m.apply(SRC).splitlines()) if a != b]
        assert len(changed) == 1
