"""CSV/JSONL export of trials and participants [R]: pseudonymous ids p001…, excluded flag and
reasons; ``loop.jsonl`` in the repository's tidy format [C]. Raw PIDs (stored only under ``store_raw_pid: true``)
leave the database only on explicit request (``include_raw_pids``), in their own ``raw_pids`` file."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from agentmill.methods.autocog.web.exclusion import drop_reasons, exclusion_rules

TRIAL_FIELDS = ("participant", "obs_id", "trial_idx", "pair_idx", "is_catch", "option_a_ratings", "option_b_ratings",
                "side_a", "side_pressed", "response", "rt_ms", "excluded")
PART_FIELDS = ("participant", "obs_id", "status", "n_trials", "refresh_count", "focus_loss_count", "blur_ms",
               "excluded", "drop_reasons")
RAW_PID_FIELDS = ("participant", "pid")


def pseudonyms(store) -> dict[str, str]:
    """session_id -> p001… in session creation order (the same numbering in every export)."""
    return {s["session_id"]: f"p{k:03d}" for k, s in enumerate(store.sessions(), start=1)}


def raw_pid_rows(store) -> list[dict]:
    names, raw = pseudonyms(store), store.raw_pids()
    return [{"participant": names[sid], "pid": pid} for sid, pid in sorted(raw.items(), key=lambda kv: names[kv[0]])]


def to_csv(data: list[dict], fields: tuple[str, ...]) -> str:
    """CSV text; list values (ratings) as JSON so ``read_csv_trials`` can restore them."""
    f = io.StringIO()
    w = csv.DictWriter(f, fieldnames=fields, lineterminator="\n")
    w.writeheader()
    for r in data:
        w.writerow({k: json.dumps(v) if isinstance(v, list) else v for k, v in r.items()})
    return f.getvalue()


def to_jsonl(data: list[dict]) -> str:
    return "".join(json.dumps(r, sort_keys=True) + "\n" for r in data)


def rows(store, *, include_excluded: bool = True) -> tuple[list[dict], list[dict]]:
    trials, parts, rules, names = [], [], exclusion_rules(store), pseudonyms(store)
    for s in store.sessions():
        tr = store.trials(s["session_id"])
        reasons = drop_reasons(s, tr, rules) if tr else []
        excluded = bool(reasons)
        pid = names[s["session_id"]]
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


def export(store, out: Path, *, fmt: str = "csv", include_excluded: bool = False,
           include_raw_pids: bool = False) -> list[Path]:
    if fmt not in ("csv", "jsonl"):
        raise ValueError(f"format must be csv or jsonl, got {fmt!r}")
    out.mkdir(parents=True, exist_ok=True)
    trials, parts = rows(store, include_excluded=include_excluded)
    tables = [("trials", trials, TRIAL_FIELDS), ("participants", parts, PART_FIELDS)]
    if include_raw_pids:
        tables.append(("raw_pids", raw_pid_rows(store), RAW_PID_FIELDS))
    paths = []
    for name, data, fields in tables:
        p = out / f"{name}.{fmt}"
        p.write_text(to_csv(data, fields) if fmt == "csv" else to_jsonl(data))
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
