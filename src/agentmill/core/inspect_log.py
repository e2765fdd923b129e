"""Writing Inspect eval logs (the optional ``inspect`` extra): the import, the output formats and the writer that
every exporter shares (forensics episodes, probe rollouts). Inspect is imported inside functions only, so the core
stays importable without it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from agentmill.core.extras import MissingExtraError

FORMATS = {".eval": "eval", ".json": "json"}
"""Output suffix -> Inspect log format."""


def inspect_api() -> Any:
    """Import Inspect's log, model, tool and scorer modules, or raise :class:`MissingExtraError` naming the extra."""
    try:
        import inspect_ai.log
        import inspect_ai.model
        import inspect_ai.scorer
        import inspect_ai.tool  # noqa: F401  (loaded for the exporters that log tool calls)
    except ImportError as e:
        raise MissingExtraError("inspect", "exporting to Inspect eval logs (inspect-ai)") from e
    return inspect_ai


def packages() -> dict[str, str]:
    """Versions of agentmill and inspect-ai, for an ``EvalSpec``'s ``packages`` field."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("agentmill", "inspect_ai"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = "unknown"
    return out


def write_log(log: Any, out: str | os.PathLike[str], error: type[Exception] = ValueError) -> Path:
    """Write ``log`` with Inspect's ``write_eval_log`` in the format its suffix names (``.eval`` or ``.json``); any
    other suffix raises ``error`` (each exporter passes its own input-error type, which its CLI maps to exit 2)."""
    path = Path(out)
    fmt = FORMATS.get(path.suffix)
    if fmt is None:
        raise error(f"--out {path}: the file name must end in .eval (Inspect's zip log) or .json")
    api = inspect_api()
    path.parent.mkdir(parents=True, exist_ok=True)
    api.log.write_eval_log(log, str(path), format=fmt)
    return path
