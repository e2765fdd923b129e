"""Experiments grouped by the paper they reproduce: the unit of the report's overview and of the verdict tables.

A reader asks "does paper X hold up?" before "does experiment e162.tree_synth pass?", so every rendering starts from
papers. An experiment belongs to the paper package (``experiments.PAPERS``) whose directory name starts with the
experiment id's prefix (``e162.collapse_law`` -> ``e162_tree_rollouts``); that package's ``__init__`` names the
paper (``PAPER``) and its docstring's first line says what the paper claims. An experiment outside every package
(a test's fake) forms a paper of its own prefix, named by its ``Experiment.paper``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import import_module

from agentmill.experiments import PAPERS
from agentmill.experiments.protocol import Experiment


@dataclass(frozen=True)
class Paper:
    """One paper and its experiments, in registry order."""

    key: str
    """The experiment-id prefix, ``e162``; also the anchor of its section in ``docs/verdicts.md``."""
    slug: str
    """File name of its report page without ``.html``: the package directory (``e162_tree_rollouts``)."""
    label: str
    """Short name for tables: ``E162`` (the prefix, upper case)."""
    citation: str
    """Authors, title and arXiv id as the package's ``PAPER`` gives them."""
    headline: str
    """What the paper claims, in one line (the package docstring's first line, without the ``E162,`` prefix)."""
    experiments: tuple[Experiment, ...]


def _package_for(prefix: str) -> str | None:
    """A paper's package is named by its prefix and a slug (``e162`` -> ``e162_tree_rollouts``); a composition's
    prefix is its whole package name (``compose_tree_credit.advantage_auroc`` -> ``compose_tree_credit``)."""
    for package in PAPERS:
        name = package.rsplit(".", 1)[1]
        if name == prefix or (not name.startswith("compose_") and name.split("_", 1)[0] == prefix):
            return package
    return None


def is_composition(paper: Paper) -> bool:
    """A composition (``compose_<name>/``) of several papers' methods, not a paper: the report lists it apart."""
    return paper.key.startswith("compose_")


def _label(prefix: str) -> str:
    """``E162`` for a paper; ``C-tree-credit`` for the composition ``compose_tree_credit``."""
    if prefix.startswith("compose_"):
        return "C-" + prefix.removeprefix("compose_").replace("_", "-")
    return prefix.upper()


def _headline(doc: str | None, label: str) -> str:
    first = (doc or "").strip().split("\n\n", 1)[0]
    first = " ".join(first.split())
    rest = re.sub(rf"^{re.escape(label)}\s*[,:]\s*", "", first, flags=re.IGNORECASE)
    return rest[:1].upper() + rest[1:]


def paper_of(exp: Experiment) -> str:
    """The citation of ``exp``'s paper (its package's ``PAPER``; ``exp.paper`` outside every package)."""
    package = _package_for(exp.id.split(".", 1)[0])
    return getattr(import_module(package), "PAPER", exp.paper) if package else exp.paper


def group_by_paper(experiments: Mapping[str, Experiment]) -> list[Paper]:
    """The papers of ``experiments`` in order of first appearance, each with its experiments."""
    groups: dict[str, list[Experiment]] = {}
    for exp in experiments.values():
        groups.setdefault(exp.id.split(".", 1)[0], []).append(exp)
    out = []
    for prefix, exps in groups.items():
        label = _label(prefix)
        package = _package_for(prefix)
        if package is not None:
            mod = import_module(package)
            out.append(Paper(prefix, package.rsplit(".", 1)[1], label, getattr(mod, "PAPER", exps[0].paper),
                             _headline(mod.__doc__, label), tuple(exps)))
        else:
            slug = re.sub(r"[^a-z0-9_-]", "_", prefix.lower()) or "other"
            out.append(Paper(prefix, slug, label, exps[0].paper, exps[0].title, tuple(exps)))
    return out
