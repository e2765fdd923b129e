"""The experiment registry: one package per paper, each listing its experiment modules.

A paper's package (``e162_tree_rollouts/`` …) names its paper in ``__init__``, lists its modules in ``MODULES`` and,
when defining its experiments already needs an extra (E164 builds its claims from a YAML pre-registration), names
it in ``REQUIRES``; each module defines one module-level ``EXPERIMENT``. Nothing is imported until it is needed:
``get("e162.x")`` imports only the E162 package's modules; ``registry()`` imports every package whose ``REQUIRES``
are installed and leaves the others in :func:`unavailable` (``agentmill list`` shows them with the ``pip install``
line; ``get`` of one of their ids raises that line); experiment modules import torch and the like inside the
functions that need them (``tests/test_layering.py``), so the core install lists and runs the closed-form
experiments; a duplicate id is an error.

To add an experiment: write ``e1xx_<slug>/<what>.py`` with ``EXPERIMENT = Experiment(...)`` and append ``"<what>"``
to that package's ``MODULES``. A new paper's package is appended to ``PAPERS``.
"""

from __future__ import annotations

import difflib
from importlib import import_module

from agentmill.core.extras import MissingExtraError, missing_extras
from agentmill.experiments.protocol import PROFILES, Claim, Experiment, RunContext

PAPERS: tuple[str, ...] = (
    "agentmill.experiments.e162_tree_rollouts",
    "agentmill.experiments.e163_backtrack_maze",
    "agentmill.experiments.e164_constraint_rot",
    "agentmill.experiments.e165_g2po",
    "agentmill.experiments.e166_router",
    "agentmill.experiments.e167_world_model",
    "agentmill.experiments.e168_metis",
    "agentmill.experiments.e169_sherloc",
    "agentmill.experiments.e170_bayes_ship",
    "agentmill.experiments.e171_first_token_probe",
    "agentmill.experiments.e172_cliff_tokens",
    "agentmill.experiments.e173_progress_advantage",
    "agentmill.experiments.e174_forensics",
    "agentmill.experiments.e175_crosscoder",
    "agentmill.experiments.e176_autocog",
    "agentmill.experiments.e177_kernelpro",
    "agentmill.experiments.e178_red_queen",
    "agentmill.experiments.e179_dspark",
    "agentmill.experiments.compose_tree_credit",
    "agentmill.experiments.compose_pinned_serving",
    "agentmill.experiments.compose_injection_control",
)
"""Each paper's experiment package. Compositions (``compose_<name>/``) are listed here too when they land."""


def paper_modules(package: str) -> tuple[str, ...]:
    """The dotted experiment modules of one paper's package (imports only its light ``__init__``)."""
    return tuple(f"{package}.{name}" for name in import_module(package).MODULES)


def all_modules(papers: tuple[str, ...] = PAPERS) -> tuple[str, ...]:
    return tuple(m for p in papers for m in paper_modules(p))


def missing_for(package: str) -> list[str]:
    """The extras a paper's package needs to define its experiments that are not installed here."""
    return missing_extras(getattr(import_module(package), "REQUIRES", ()))


def unavailable() -> dict[str, list[str]]:
    """Paper packages whose experiments cannot be defined on this install -> their missing extras."""
    return {p: m for p in PAPERS if (m := missing_for(p))}


_registry: dict[str, Experiment] | None = None
_by_paper: dict[str, dict[str, Experiment]] = {}


class DuplicateExperimentError(ValueError):
    pass


def build_registry(modules: tuple[str, ...] | None = None) -> dict[str, Experiment]:
    """Import ``modules`` (default: every paper's) and map each ``EXPERIMENT.id`` to it."""
    reg: dict[str, Experiment] = {}
    for name in all_modules() if modules is None else modules:
        exp = getattr(import_module(name), "EXPERIMENT", None)
        if not isinstance(exp, Experiment):
            raise TypeError(f"{name} must define a module-level EXPERIMENT = Experiment(...)")
        if exp.id in reg:
            raise DuplicateExperimentError(f"experiment id {exp.id!r} is registered twice ({name})")
        reg[exp.id] = exp
    return reg


def registry() -> dict[str, Experiment]:
    """Every experiment this install can define, in paper order (see :func:`unavailable` for the rest)."""
    global _registry
    if _registry is None:
        _registry = build_registry(all_modules(tuple(p for p in PAPERS if not missing_for(p))))
    return _registry


def _paper_of(exp_id: str) -> str | None:
    """The package whose experiments carry ids starting with ``exp_id``'s paper prefix (``e162.x`` -> E162's)."""
    prefix = exp_id.split(".", 1)[0]
    for package in PAPERS:
        if package.rsplit(".", 1)[1].split("_", 1)[0] == prefix:
            return package
    return None


def get(exp_id: str) -> Experiment:
    """The experiment with id ``exp_id``, importing only its paper's package; a typo fails with the closest ids."""
    if _registry is not None and exp_id in _registry:
        return _registry[exp_id]
    package = _paper_of(exp_id)
    if package is not None:
        missing = missing_for(package)
        if missing:
            raise MissingExtraError(missing, f"the experiments of {package.rsplit('.', 1)[1]} ({exp_id})")
        if package not in _by_paper:
            _by_paper[package] = build_registry(paper_modules(package))
        if exp_id in _by_paper[package]:
            return _by_paper[package][exp_id]
    reg = registry()
    if exp_id in reg:
        return reg[exp_id]
    close = difflib.get_close_matches(exp_id, list(reg), n=3, cutoff=0.5)
    hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    raise KeyError(f"no experiment {exp_id!r}.{hint} Run 'agentmill list' to see all ids.")


def __getattr__(name: str) -> tuple[str, ...]:
    # ``MODULES`` (every experiment module, flat) is computed on first use so importing the registry stays cheap.
    if name == "MODULES":
        return all_modules()
    raise AttributeError(name)


__all__ = ["Claim", "Experiment", "RunContext", "PROFILES", "PAPERS", "registry", "get", "build_registry",
           "paper_modules", "all_modules", "missing_for", "unavailable", "DuplicateExperimentError"]
