"""Which optional extra brings which import, and the one error a missing extra raises.

The core install (numpy, scipy, rich, matplotlib) runs the closed-form experiments, the registry and the report;
everything else comes in an extra of ``pyproject.toml``. Code that needs an extra imports it inside the function
that needs it and, when the import fails, raises :class:`MissingExtraError` naming the ``pip install`` line. The
experiment runner checks an experiment's declared extras before it runs, and turns a ``ModuleNotFoundError`` inside
a run into the same hint through :func:`extra_for_module`. ``tests/core/test_extras.py`` holds this table to the
extras of ``pyproject.toml``.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable, Sequence

EXTRA_IMPORTS: dict[str, tuple[str, ...]] = {
    "hf": ("torch", "transformers", "gguf", "safetensors", "sentencepiece"),
    "openai": ("openai", "httpx", "pydantic"),
    "serve": ("fastapi", "uvicorn", "httpx", "prometheus_client", "openai"),
    "ray": ("ray",),
    "trl": ("trl",),
    "textworld": ("textworld",),
    "gymnasium": ("gymnasium",),
    "peft": ("peft",),
    "constraint-rot": ("yaml", "aiosmtpd", "icalendar"),
    "langchain": ("langchain", "langchain_core", "langchain_openai", "langgraph"),
    "openai-agents": ("agents",),
    "autogen": ("autogen_core", "autogen_agentchat"),
    "autocog": ("yaml", "pandas"),
    "autocog-e2e": ("selenium", "httpx"),
    "router": ("cmaes",),
    "coding": ("pyflakes", "jsonschema", "pytest"),
    "cuda-static": ("nvidia",),
    "kernelpro": ("numba",),
    "agents": ("minisweagent",),
    "inspect": ("inspect_ai",),
}
"""Extra name -> the top-level modules it must make importable (the first listed extra wins for a shared one)."""

OUTSIDE_ALL: dict[str, str] = {
    "llamacpp": "llama-cpp-python, the peer row of benchmarks/engine_vs_llamacpp.py; it compiles llama.cpp for ~9 "
                "minutes, so neither README command installs it and no test needs it",
}
"""Extras that ``all`` leaves out on purpose, with the reason (benchmark-only dependencies that build from source)."""


class MissingExtraError(ImportError):
    """An optional dependency is missing; the message names the ``pip install 'agentmill[extra]'`` fix.

    ``extra`` is one extra's name or several (``("hf", "peft")`` -> ``pip install 'agentmill[hf,peft]'``)."""

    def __init__(self, extra: str | Sequence[str], what: str) -> None:
        names = [extra] if isinstance(extra, str) else list(extra)
        which = f"the '{names[0]}' extra" if len(names) == 1 else \
            "the " + ", ".join(f"'{n}'" for n in names[:-1]) + f" and '{names[-1]}' extras"
        super().__init__(f"{what} needs {which}: pip install 'agentmill[{','.join(names)}]'")
        self.extra = names[0]
        self.extras = tuple(names)


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def missing_extras(extras: Iterable[str]) -> list[str]:
    """The extras among ``extras`` whose modules are not all importable here (unknown names raise)."""
    out = []
    for extra in sorted(extras):
        if extra not in EXTRA_IMPORTS:
            raise KeyError(f"unknown extra {extra!r}; known: {', '.join(sorted(EXTRA_IMPORTS))}")
        if not all(_importable(m) for m in EXTRA_IMPORTS[extra]):
            out.append(extra)
    return out


def extra_for_module(module: str | None) -> str | None:
    """The extra that provides top-level module ``module`` (``"torch.nn"`` -> ``"hf"``), or None."""
    if not module:
        return None
    top = module.split(".")[0]
    return next((extra for extra, mods in EXTRA_IMPORTS.items() if top in mods), None)


def require(extra: str, what: str) -> None:
    """Raise :class:`MissingExtraError` unless ``extra`` is installed."""
    if missing_extras([extra]):
        raise MissingExtraError(extra, what)
