"""Progress bars for long CLI commands: one look for every command (description, bar, done/total, elapsed)."""

from __future__ import annotations

from typing import Any


def progress_bar() -> Any:
    """A ``rich`` progress display, not yet started (use it as a context manager or call ``start``)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    transient=False)


def started_bar(total: int | None, desc: str) -> tuple[Any, Any]:
    """(display, task id) of a started bar with one task; the caller advances the task and stops the display."""
    prog = progress_bar()
    task = prog.add_task(desc, total=total)
    prog.start()
    return prog, task
