"""AC-8: the ledger is complete and a loop killed at any point resumes to the same head hash and state.json (the
ledger itself — chain, tampering, torn lines — is tested in tests/core/test_ledger.py)."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agentmill.core.ledger import Ledger

ARGS = ["--rounds", "2", "--n-designs", "8", "--max-candidates", "24", "--gt", "ttb", "--eps", "0.25"]


def _cli(*a: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agentmill.cli.main", "autocog", *a], capture_output=True, text=True,
                          timeout=300, **kw)


def _lines(p: Path) -> int:
    try:
        return p.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


@pytest.mark.slow
def test_kill_and_resume_byte_identical(tmp_path) -> None:
    ref = tmp_path / "ref"
    r = _cli("run", "--run-dir", str(ref), *ARGS)
    assert r.returncode == 0, r.stderr
    n_events = _lines(ref / "ledger.jsonl")
    head = Ledger(ref).head
    state = (ref / "state.json").read_bytes()
    assert _cli("audit", str(ref)).returncode == 0
    for k, frac in enumerate((0.15, 0.5, 0.85)):
        d = tmp_path / f"k{k}"
        target = max(1, int(frac * n_events))
        p = subprocess.Popen([sys.executable, "-m", "agentmill.cli.main", "autocog", "run", "--run-dir", str(d),
                              *ARGS], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        t0 = time.time()
        while _lines(d / "ledger.jsonl") < target and p.poll() is None and time.time() - t0 < 120:
            time.sleep(0.005)
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
        killed_at = _lines(d / "ledger.jsonl")
        assert killed_at < n_events, "run finished before the kill"
        r = _cli("resume", str(d))
        assert r.returncode == 0, r.stderr
        assert Ledger(d).head == head, f"kill at event {killed_at}: head differs"
        assert (d / "state.json").read_bytes() == state
        assert _cli("audit", str(d)).returncode == 0
        steps = [json.loads(x)["step"] for x in (d / "ledger.jsonl").read_text().splitlines()]
        assert len(steps) == len(set(steps)) == n_events  # no duplication, no loss
