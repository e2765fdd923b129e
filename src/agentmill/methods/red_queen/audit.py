"""Audit a ReviewWorld run directory: the hash chain verifies, a replay of the ledger equals ``state.json``, every
replacement happened at a checkpoint, and no valid judge-dependent record carries a stale judge tag."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def audit_dir(run_dir: Path) -> dict[str, Any]:
    from agentmill.core.ledger import Ledger
    from agentmill.methods.red_queen.config import RedQueenConfig
    from agentmill.methods.red_queen.review import build_review_search
    from agentmill.methods.red_queen.search import snapshot

    if not (run_dir / "ledger.jsonl").exists():
        raise ValueError(f"{run_dir} has no ledger.jsonl: not a red-queen run directory")
    led = Ledger(run_dir)
    problems = led.verify()
    first = led.events[0] if led.events else None
    if first is None or first["kind"] != "config":
        raise ValueError(f"{run_dir}/ledger.jsonl does not start with a config event")
    cfg_payload = led.payload(first)
    cfg = RedQueenConfig(**cfg_payload["config"])
    desc = cfg_payload["describe"]
    search, _, _ = build_review_search(desc["world"], cfg, world_seed=desc["world_seed"], ledger_dir=run_dir,
                                       check_world=False)
    search._start_or_resume()  # replay only: appends nothing to a non-empty ledger
    state_path = run_dir / "state.json"
    replay = json.loads(json.dumps(snapshot(search)))
    if state_path.exists():
        replay_ok = replay == json.loads(state_path.read_text())
    else:
        replay_ok = False
        problems.append("no state.json (the run did not finish): replay not compared")
    at_cp = all(r["at_eval"] in search.checkpoints for r in search.replacements)
    current = {s: j.judge_id for s, j in search.judges.items()}
    stale = search.ledger.stale_valid(current) if cfg.erasure == "invalidate" else []
    return {"ok": not problems and replay_ok and at_cp and not stale, "chain_problems": problems,
            "replay_equals_snapshot": replay_ok, "replacements_at_checkpoints": at_cp,
            "stale_valid_records": len(stale), "events": len(led.events), "head": led.head,
            "n_evals": search.n_evals, "replacements": len(search.replacements)}
