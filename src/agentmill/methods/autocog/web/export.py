"""CSV/JSONL export of trials and participants (spec autocog §6.8): pseudonymous ids p001…, excluded flag and
reasons; ``loop.jsonl`` in the repository's tidy format (§2.1). Raw PIDs are never exported."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from agentmill.methods.autocog.web.exclusion import drop_reasons

TRIAL_FIELDS = ("participant", "obs_id", "trial_idx", "pair_idx", "is_catch", "option_a_ratings", "option_b_ratings",
                "side_a", "side_pressed", "response", "rt_ms", "excluded")
PART_FIELDS = ("participant", "obs_id", "status", "n_trials", "refresh_count", "focus_loss_count", "blur_ms",
               "excluded", "drop_reasons")


def rows(store, *, include_excluded: bool = True) -> tuple[list[dict], list[dict]]:
    trials, parts = [], []
    for k, s in enumerate(store.sessions(), start=1):
        tr = store.trials(s["session_id"])
        reasons = drop_reasons(s, tr) if tr else []
        excluded = bool(reasons)
        pid = f"p{k:03d}"
        parts.append({"participant": pid, "obs_id": s["obs_id"], "status": s["status"], "n_trials": len(tr),
                      "refresh_count": s["refresh_count"], "focus_loss_count": s["focus_loss_count"],
                      "blur_ms": s["blur_ms"], "excluded": excluded, "drop_reasons": ";".join(reasons)})
        if excluded and not include_excluded:
            continue
        for t in tr:
            trials.append({"participant": pid, "obs_id": s["obs_id"], "trial_idx": t["trial_idx"],
                           "pair_idx": t["pair_idx"], "is_catch": bool(t["is_catch"]),
                           "option_a_ratings": json.loads(t["a_json"]), "option_b_ratings": json.loads(t["b_json"]),
                           "side_a": t["side_a"], "side_pressed": t["side_pressed"],
                           "response": t["response_option"], "rt_ms": t["rt_ms"], "excluded": excluded})
    return trials, parts


def export(store, out: Path, *, fmt: str = "csv", include_excluded: bool = False) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    trials, parts = rows(store, include_excluded=include_excluded)
    paths = []
    for name, data, fields in (("trials", trials, TRIAL_FIELDS), ("participants", parts, PART_FIELDS)):
        p = out / f"{name}.{fmt}"
        if fmt == "csv":
            with open(p, "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=fields)
                w.writeheader()
                for r in data:
                    w.writerow({k: json.dumps(v) if isinstance(v, list) else v for k, v in r.items()})
        else:
            p.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in data))
        paths.append(p)
    loop = out / "loop.jsonl"
    loop.write_text("".join(json.dumps({"subject_id": t["participant"], "option_a_ratings": t["option_a_ratings"],
                                        "option_b_ratings": t["option_b_ratings"], "response": t["response"]}) + "\n"
                            for t in trials if not t["is_catch"]))
    paths.append(loop)
    return paths


def read_csv_trials(path: Path) -> list[dict]:
    """Re-import ``trials.csv`` with the exported types (round-trip check)."""
    out = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            out.append({"participant": r["participant"], "obs_id": r["obs_id"], "trial_idx": int(r["trial_idx"]),
                        "pair_idx": int(r["pair_idx"]), "is_catch": r["is_catch"] == "True",
                        "option_a_ratings": json.loads(r["option_a_ratings"]),
                        "option_b_ratings": json.loads(r["option_b_ratings"]), "side_a": r["side_a"],
                        "side_pressed": r["side_pressed"], "response": int(r["response"]),
                        "rt_ms": float(r["rt_ms"]), "excluded": r["excluded"] == "True"})
    return out
