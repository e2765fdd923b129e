"""Ground-truth leakage check (AC-12 [R]; the repository tests the same, ``tests/test_prompt_no_gt_leak.py`` [C]): no
prompt the loop sends may contain the hidden ground truth's name, prose or code tokens.

The tokens of a ground truth are (1) its names (registry name, display name, recovery key), matched as whole words,
case-insensitively; (2) its prose, verbatim; (3) its code: every line of its rule's source at least
``MIN_LINE`` characters long (whitespace-normalised) and every identifier the rule uses that the library defines
(``wadd_delta``, ``dial_weights``, ``power_shift`` …), as whole identifiers, and those helpers' lines. A library
theory's "code" is the Python function that computes its Δ (``library.RULES``); an LLM-written ``CodeTheory``'s code is
its source.
"""

from __future__ import annotations

import ast
import inspect
import re
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass

from agentmill.methods.autocog import library as L

MIN_LINE = 12
"""Shorter code lines (``d = A - B``) are too generic to call a leak [R]."""


@dataclass(frozen=True)
class GTTokens:
    names: tuple[str, ...]
    prose: str
    lines: tuple[str, ...]
    identifiers: tuple[str, ...]

    def all(self) -> list[str]:
        return [*self.names, self.prose, *self.lines, *self.identifiers]


def _code_of(theory) -> str:
    src = getattr(theory, "source", None)
    if src:
        return src
    factory = theory.spec.get("factory", "")
    rule = L.RULES.get(factory)
    fn = rule[2] if rule else theory.prob
    return textwrap.dedent(inspect.getsource(fn))


def _norm(line: str) -> str:
    return " ".join(line.split())


def gt_tokens(theory, *, extra_names: Iterable[str] = ()) -> GTTokens:
    """The distinctive tokens of ``theory`` (a LibraryTheory or CodeTheory); ``extra_names``: e.g. the recovery
    key ("dial3")."""
    code = _code_of(theory)
    lines = [_norm(x) for x in code.splitlines()]
    lines = [x for x in lines if len(x) >= MIN_LINE]
    used = {n.id for n in ast.walk(ast.parse(code)) if isinstance(n, ast.Name)}
    used |= {n.name for n in ast.walk(ast.parse(code)) if isinstance(n, ast.FunctionDef)}
    library_names = {k for k, v in vars(L).items() if callable(v) and getattr(v, "__module__", "") == L.__name__}
    idents = sorted(x for x in used if x in library_names and len(x) >= 3)
    for helper in idents:  # the library helpers the rule calls are its code too (dial -> dial_weights)
        lines += [y for y in map(_norm, inspect.getsource(getattr(L, helper)).splitlines()) if len(y) >= MIN_LINE]
    names = {theory.name, theory.spec.get("factory", ""), *extra_names}
    return GTTokens(tuple(sorted(n for n in names if n)), theory.prose, tuple(dict.fromkeys(lines)),
                    tuple(sorted(set(idents))))


def find_leaks(prompts: Iterable[str], tokens: GTTokens) -> list[tuple[int, str]]:
    """``(prompt index, token)`` for every token found in a prompt; empty means no leak."""
    hits = []
    for i, p in enumerate(prompts):
        flat = _norm(p)
        for n in tokens.names:
            if re.search(rf"(?<![\w]){re.escape(n)}(?![\w])", p, re.I):
                hits.append((i, n))
        if tokens.prose and tokens.prose in p:
            hits.append((i, tokens.prose))
        hits += [(i, x) for x in tokens.lines if x in flat]
        hits += [(i, x) for x in tokens.identifiers if re.search(rf"(?<![\w]){re.escape(x)}(?![\w])", p)]
    return hits
