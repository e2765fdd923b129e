"""Audit of a run directory [R]: hash chain, blobs, required event kinds, state.json vs ledger head.

Lives in the method (not only the CLI) because AC-8's experiment audits every kill point in-process; the CLI's
``agentmill autocog audit`` prints the same list. When the config event lists LM-driven roles (``lm_roles``),
every step such a role drove (``proposal`` of advocate k, ``verdict`` of the arbiter, ``candidate`` of the reviser)
must be preceded by at least one ``lm_call`` event keyed under it (``<step>/lmNN``), and no two ``lm_call``
events of one step may repeat a request (a call made again after a resume would).
"""

from __future__ import annotations

import json
from pathlib import Path

from agentmill.core.ledger import Ledger

REQUIRED_KINDS = ("config", "round_started", "proposal", "gate_result", "observation_committed", "data_requested",
                  "data_collected", "prediction", "leaderboard", "verdict", "candidate", "admitted",
                  "round_completed")
"""Kinds every finished run holds ([R] per-round list; a run of >= 1 round has a verdict/candidate/admitted)."""


def audit(run_dir: Path) -> list[str]:
    """Problems found in ``run_dir``; an empty list means the run passes the audit."""
    run_dir = Path(run_dir)
    if not (run_dir / "ledger.jsonl").exists():
        return [f"{run_dir}: no ledger.jsonl"]
    led = Ledger(run_dir)
    problems = led.verify()
    if led.repaired:
        problems.append(f"torn last line: {led.repaired}")
    kinds = {e["kind"] for e in led.events}
    problems += [f"required event kind {k!r} missing" for k in REQUIRED_KINDS if k not in kinds]
    started = {e["round"] for e in led.events if e["kind"] == "round_started"}
    completed = {e["round"] for e in led.events if e["kind"] == "round_completed"}
    problems += [f"round {r} started but never completed" for r in sorted(started - completed)]
    problems += lm_call_problems(led)
    sp = run_dir / "state.json"
    if sp.exists():
        st = json.loads(sp.read_text())
        if st.get("status") == "done" and st.get("ledger_head") != led.head:
            problems.append("state.json does not match the ledger head")
    return problems


LM_STEP_ROLE = {"proposal": "advocate{slot}", "verdict": "arbiter", "candidate": "reviser"}
"""Step kind -> the role that drives it (``{slot}`` = the event's slot)."""


def lm_call_problems(led: Ledger) -> list[str]:
    """Missing or repeated ``lm_call`` events for the steps LM roles drove (nothing to check without LM roles)."""
    config = next((led.payload(e) for e in led.events if e["kind"] == "config"), None)
    lm_roles = set((config or {}).get("lm_roles", ()))
    if not lm_roles:
        return []
    calls: dict[str, list[tuple[int, str]]] = {}
    for e in led.events:
        if e["kind"] == "lm_call":
            parent = e["step"].rsplit("/lm", 1)[0]
            calls.setdefault(parent, []).append((e["seq"], led.payload(e)["request_sha256"]))
    problems = []
    for e in led.events:
        role = LM_STEP_ROLE.get(e["kind"], "").format(slot=e["slot"])
        if role not in lm_roles:
            continue
        mine = [c for c in calls.get(e["step"], []) if c[0] < e["seq"]]
        if not mine:
            problems.append(f"step {e['step']!r} ({role}) has no lm_call event")
        seen = [h for _, h in mine]
        if len(seen) != len(set(seen)):
            problems.append(f"step {e['step']!r} repeats an lm_call request")
    return problems
