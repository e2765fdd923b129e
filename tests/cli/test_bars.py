"""cli.bars: the one progress-bar look of every long command."""

from __future__ import annotations

from agentmill.cli.bars import progress_bar, started_bar


def test_started_bar_counts_and_stops() -> None:
    prog, task = started_bar(4, "work")
    try:
        prog.advance(task, 3)
        t = prog.tasks[0]
        assert (t.description, t.total, t.completed) == ("work", 4, 3)
    finally:
        prog.stop()
    fresh = progress_bar()
    assert fresh.tasks == [] and not fresh.live.is_started
