"""``agentmill kernelpro`` through ``main([...])``: the task table, the exploit suite, and clear errors."""

from __future__ import annotations

import pytest

from agentmill.cli.main import main


def test_tasks_lists_the_suite(capsys) -> None:
    assert main(["kernelpro", "tasks"]) == 0
    out = capsys.readouterr().out
    assert "softmax_rows" in out and "AI 42.7" in out


@pytest.mark.slow  # ~4 s: six exploits compiled and run in the sandbox
def test_exploit_suite_catches_everything(capsys) -> None:
    assert main(["kernelpro", "wall", "--task", "sum", "--exploit-suite"]) == 0
    out = capsys.readouterr().out
    assert out.count("caught") == 6 and "MISSED" not in out


@pytest.mark.numba
@pytest.mark.slow  # ~4 s: one sandboxed child imports numba and compiles three planted exploits
def test_numba_exploit_suite_catches_everything(capsys) -> None:
    pytest.importorskip("numba")
    assert main(["kernelpro", "wall", "--task", "vadd", "--exploit-suite", "--backend", "numba"]) == 0
    out = capsys.readouterr().out
    assert out.count("caught") == 5 and "MISSED" not in out and "by policy" in out


def test_unknown_task_is_a_clear_error(capsys) -> None:
    code = main(["kernelpro", "wall", "--task", "nope", "--exploit-suite"])
    assert code != 0
    assert "unknown task" in capsys.readouterr().err
