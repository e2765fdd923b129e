"""Kill-and-resume harness for AC-8 (AC-8, an engineering claim [R]).

Starts a run as a child process in its own session, waits until its ledger holds ``at_event`` lines, sends SIGKILL
to the whole process group (the crash the ledger's fsync-per-event design must survive), then runs the resume
command to completion. The commands are argument lists supplied by the caller, so the method layer does not
depend on the CLI; AC-8's experiment passes ``agentmill autocog run …`` / ``resume …``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path


def ledger_lines(run_dir: Path) -> int:
    """Complete lines in ``run_dir/ledger.jsonl`` (0 when absent)."""
    try:
        return (Path(run_dir) / "ledger.jsonl").read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


@dataclass(frozen=True)
class KillResult:
    target: int
    """Ledger line count at which the kill was requested."""
    killed_at: int
    """Ledger lines present right after the kill (-1: the run finished before the target)."""
    resume_rc: int
    resume_s: float
    """Wall time of the resume command (P6 compares it with the uninterrupted run)."""
    resume_stderr: str


def kill_at(cmd: Sequence[str], run_dir: Path, at_event: int, *, timeout: float = 300.0,
            poll_s: float = 0.005) -> int:
    """Run ``cmd`` and SIGKILL its process group once ``run_dir``'s ledger has ``at_event`` lines.

    Returns the ledger line count after the kill, or -1 when the run exited before reaching ``at_event``.
    """
    if at_event < 1:
        raise ValueError(f"at_event must be >= 1, got {at_event}")
    p = subprocess.Popen(list(cmd), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    t0 = time.monotonic()
    try:
        while ledger_lines(run_dir) < at_event and p.poll() is None:
            if time.monotonic() - t0 > timeout:
                raise TimeoutError(f"run did not reach ledger event {at_event} within {timeout} s")
            time.sleep(poll_s)
        finished = p.poll() is not None
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    return -1 if finished else ledger_lines(run_dir)


def kill_and_resume(run_cmd: Sequence[str], resume_cmd: Sequence[str], run_dir: Path, at_event: int, *,
                    timeout: float = 300.0) -> KillResult:
    """Kill a fresh run at ``at_event`` ledger lines, then resume it to completion."""
    killed = kill_at(run_cmd, run_dir, at_event, timeout=timeout)
    t0 = time.monotonic()
    r = subprocess.run(list(resume_cmd), capture_output=True, text=True, timeout=timeout)
    return KillResult(at_event, killed, r.returncode, time.monotonic() - t0, r.stderr[-500:])


def ledger_steps(run_dir: Path) -> list[str]:
    """Step keys in ledger order (duplicates would show as repeated keys)."""
    path = Path(run_dir) / "ledger.jsonl"
    return [json.loads(x)["step"] for x in path.read_text().splitlines() if x.strip()]
