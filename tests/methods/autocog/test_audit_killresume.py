"""The run audit and the kill-and-resume harness (AC-8), on hand-built ledgers and a scripted child."""

from __future__ import annotations

import sys

from agentmill.methods.autocog.audit import REQUIRED_KINDS, audit
from agentmill.methods.autocog.killresume import kill_at, ledger_lines, ledger_steps
from agentmill.core.ledger import Ledger


def _full_ledger(d, *, complete: bool = True) -> Ledger:
    led = Ledger(d)
    for i, k in enumerate(REQUIRED_KINDS):
        if k == "round_completed" and not complete:
            continue
        led.append(k, f"s{i}", {"i": i}, round=None if k == "config" else 1)
    return led


def test_audit_passes_a_complete_ledger_and_names_gaps(tmp_path) -> None:
    _full_ledger(tmp_path / "ok")
    assert audit(tmp_path / "ok") == []
    _full_ledger(tmp_path / "open", complete=False)
    probs = audit(tmp_path / "open")
    assert "required event kind 'round_completed' missing" in probs and "round 1 started but never completed" in probs
    assert audit(tmp_path / "none") == [f"{tmp_path / 'none'}: no ledger.jsonl"]


def test_audit_flags_state_that_disagrees_with_the_ledger(tmp_path) -> None:
    _full_ledger(tmp_path)
    (tmp_path / "state.json").write_text('{"status": "done", "ledger_head": "beef"}')
    assert audit(tmp_path) == ["state.json does not match the ledger head"]


WRITER = ("import sys, time\np = sys.argv[1]\nfor i in range(int(sys.argv[2])):\n"
          "    open(p, 'a').write('{\"step\": \"s%d\"}\\n' % i)\n    time.sleep(float(sys.argv[3]))\n")


def test_kill_at_stops_a_writer_mid_run(tmp_path) -> None:
    cmd = [sys.executable, "-c", WRITER, str(tmp_path / "ledger.jsonl"), "200", "0.02"]
    got = kill_at(cmd, tmp_path, 3)
    assert 3 <= got < 200 and ledger_lines(tmp_path) == got
    assert ledger_steps(tmp_path) == [f"s{i}" for i in range(got)]


def test_kill_at_reports_a_run_that_finished_first(tmp_path) -> None:
    cmd = [sys.executable, "-c", WRITER, str(tmp_path / "ledger.jsonl"), "2", "0"]
    assert kill_at(cmd, tmp_path, 5) == -1 and ledger_lines(tmp_path) == 2
