"""Loader and verifier for the human-data fixture (README deviation 11): use 1 (integrity), use 2 (scorer regression),
use 3 (metric sources rerun in the sandbox). The fixture is vendored at ``tests/fixtures/autocog_human`` (built by
``scripts/vendor_autocog_fixture.py``); the loader takes a path so it may live anywhere.

Layout this module reads (file names as in the repository [C]; JSON shapes ours, README deviation 11):

    DIR/manifest.json            {"source": url, "commit": sha, "files": {relative path: sha256 of the file}}
    DIR/LICENSE, DIR/NOTICE.md   attribution (the repository's MIT text; source, commit, hashes, transformations)
    DIR/<run>/observations.json  {"observations": [{"obs_id", "round", "index", "data_path", "experiment",
                                   "metric": {"metric_source", "rationale"}, "real_value", "real_variance",
                                   "predicted_values": {label: float | null}, "predicted_variances", ...}],
                                   "theories": {label: {"predict_source", "parameters", ...}}}
    DIR/<run>/leaderboard_final.json   {label: final post-admit score}
    DIR/<run>/data/*.jsonl.gz    canonical participant rows (subject_id, option ratings, response, …)

with ``<run>`` in ``binary`` | ``cardinal``. Every path in the manifest must stay inside DIR.
"""

from __future__ import annotations

import fnmatch
import gzip
import hashlib
import json
from pathlib import Path

from agentmill.methods.autocog.scoring import leaderboard

RUNS = ("binary", "cardinal")
REQUIRED = ("LICENSE", "NOTICE.md")
NEVER_VENDOR = ("*_participants.csv", "*_excluded.jsonl*", "*_og.jsonl*", "exp1.txt")
"""[R] per-participant tables with Prolific IDs / browser flags and third-party data must never be vendored."""
TOLERANCE = 5e-4
"""Scorer regression [R]: the leaderboards must match 'to 3 decimals'."""


def _sha256_file(p: Path) -> str:
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def load_manifest(root: Path) -> dict:
    """ValueError when DIR or its manifest is missing or malformed (bad input, not a failed check)."""
    root = Path(root)
    if not root.is_dir():
        raise ValueError(f"fixture {root}: no such directory")
    mp = root / "manifest.json"
    if not mp.is_file():
        raise ValueError(f"fixture {root}: manifest.json missing")
    try:
        man = json.loads(mp.read_text())
    except ValueError:
        raise ValueError(f"fixture {mp}: not JSON") from None
    if not isinstance(man, dict) or not isinstance(man.get("files"), dict) or not man["files"]:
        raise ValueError(f"fixture {mp}: needs a non-empty 'files' mapping of relative path -> sha256")
    return man


def verify_fixture(root: Path) -> list[str]:
    """Integrity problems (empty list = verified): hash mismatches, missing or unlisted files, attribution files
    absent, paths escaping DIR, files that must never be vendored."""
    root = Path(root).resolve()
    man = load_manifest(root)
    problems = []
    for rel, want in sorted(man["files"].items()):
        p = (root / rel).resolve()
        if root not in p.parents:
            problems.append(f"{rel}: path leaves the fixture directory")
        elif not p.is_file():
            problems.append(f"{rel}: listed in the manifest but missing")
        elif _sha256_file(p) != want:
            problems.append(f"{rel}: sha256 differs from the manifest")
    present = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()} - {"manifest.json"}
    problems += [f"{rel}: present but not in the manifest" for rel in sorted(present - set(man["files"]))]
    problems += [f"{name}: attribution file missing" for name in REQUIRED if not (root / name).is_file()]
    problems += [f"{rel}: must never be vendored (personal or third-party data)" for rel in sorted(present)
                 if any(fnmatch.fnmatch(Path(rel).name, pat) for pat in NEVER_VENDOR)]
    return problems


def load_run(root: Path, run: str) -> tuple[dict, dict]:
    if run not in RUNS:
        raise ValueError(f"run must be one of {', '.join(RUNS)}, got {run!r}")
    d = Path(root) / run
    out = []
    for name in ("observations.json", "leaderboard_final.json"):
        p = d / name
        if not p.is_file():
            raise ValueError(f"fixture {d}: {name} missing")
        try:
            out.append(json.loads(p.read_text()))
        except ValueError:
            raise ValueError(f"fixture {p}: not JSON") from None
    obs, final = out
    if not isinstance(obs.get("observations"), list) or not obs["observations"]:
        raise ValueError(f"fixture {d / 'observations.json'}: needs a non-empty 'observations' list")
    return obs, final


def read_rows(path: Path) -> list[dict]:
    """One canonical data file's rows in file order (gzipped or plain JSONL)."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    rows = []
    with opener(path, "rt") as f:
        for k, line in enumerate(f):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except ValueError:
                raise ValueError(f"fixture {path}: line {k + 1} is not JSON") from None
    return rows


def data_summary(root: Path, run: str) -> dict:
    """Rows and distinct participants over the run's canonical data files (gzipped or plain JSONL). Subject ids
    restart in every file (one file = one observation's participants), so a participant is a (file, subject_id)."""
    n_rows, subjects, files = 0, set(), sorted((Path(root) / run / "data").glob("*.jsonl*"))
    for p in files:
        rows = read_rows(p)
        n_rows += len(rows)
        subjects.update((p.name, row.get("subject_id")) for row in rows)
    return {"files": len(files), "rows": n_rows, "participants": len(subjects)}


def replay_scores(root: Path, run: str, *, on_missing_real: str = "paper") -> dict:
    """Scorer regression [R]: the committed real values and predictions through ``scoring.leaderboard`` against the
    authors' final leaderboard. ``passed`` when the label sets are equal and every label agrees to 3 decimals (same
    printed value and |diff| <= ``TOLERANCE``). The authors' rule keeps an observation whose metric failed on the real
    data (real value null) with every theory at normalised distance 1 (``on_missing_real="paper"``; the
    cardinal run has one); the project's default ``"exclude"`` drops it and is reported as ``leaderboard_exclude``."""
    obs, final = load_run(root, run)
    labels = sorted({k for o in obs["observations"] for k in o.get("predicted_values", {})})
    rows = [(o.get("real_value"), o.get("predicted_values", {})) for o in obs["observations"]]
    ours = dict(leaderboard(rows, labels, on_missing_real=on_missing_real))
    diffs = {k: abs(ours[k] - float(final[k])) for k in labels if k in final}
    same_print = all(f"{ours[k]:.3f}" == f"{float(final[k]):.3f}" for k in labels if k in final)
    missing = sorted(set(labels) ^ set(final))
    return {"run": run, "n_obs": len(rows), "on_missing_real": on_missing_real,
            "n_missing_real": sum(r is None for r, _ in rows),
            "leaderboard": sorted(ours.items(), key=lambda kv: -kv[1]),
            "leaderboard_exclude": leaderboard(rows, labels, on_missing_real="exclude"),
            "expected": {k: float(v) for k, v in final.items()}, "max_abs_diff": max(diffs.values(), default=0.0),
            "label_mismatch": missing,
            "passed": not missing and same_print and max(diffs.values(), default=0.0) <= TOLERANCE,
            **data_summary(root, run)}


METRIC_TOLERANCE = 1e-9
"""AC-13 [R]: a rerun metric equals the committed ``real_value`` within 1e-9."""
REWRITTEN = {
    ("cardinal", "round_001_obs_00"): "canonical file rewritten after the metric ran: the repository's "
    "round_001_obs_00_og.jsonl (not vendored) gives the committed 0.644620811287478 exactly; the canonical "
    "file has 36 more rows (2,304 vs 2,268) and gives 0.661806",
    ("cardinal", "round_001_obs_01"): "canonical file rewritten after the metric ran: on the repository's "
    "round_001_obs_01_og.jsonl (not vendored) the metric raises ValueError (shapes (4,) (5,)), hence the committed "
    "null; on the canonical file (2,250 vs 2,286 rows) it returns 0.675556",
}
"""[D] checked 2026-11-25 by rerunning both metric sources in the sandbox on the ``_og.jsonl`` files of the mirror at
commit 6761c69e (in memory only). Attached as the reason when these observations do not reproduce."""


def reproduce_metrics(root: Path, run: str, *, max_obs: int | None = None) -> list[dict]:
    """AC-13 [R]: every committed metric source rerun in the sandbox (:mod:`frame_metric`) on its observation's
    vendored rows in file order. One dict per observation: ``value``/``variance`` ours, ``real_value``/
    ``real_variance`` committed, ``status`` = ``reproduced`` (|diff| <= 1e-9, or both null: the metric fails on the
    real data again), ``differs``, or ``non_reproducible`` with ``reason`` (the rerun raised, the sandbox refused
    the source, or the data file is known to have been rewritten after the metric ran: ``REWRITTEN``). ``max_obs``
    limits the reruns to the first observations (smoke runs)."""
    from agentmill.methods.autocog.frame_metric import run_frame_metric
    from agentmill.methods.autocog.sandbox import SandboxError

    obs, _ = load_run(root, run)
    out = []
    for o in obs["observations"][:max_obs]:
        rows = read_rows(Path(root) / run / o["data_path"])
        real, rec = o.get("real_value"), {"obs_id": o["obs_id"], "real_value": o.get("real_value"),
                                          "real_variance": o.get("real_variance"), "n_rows": len(rows)}
        try:
            res = run_frame_metric(o["metric"]["metric_source"], rows)
        except SandboxError as e:
            out.append({**rec, "value": None, "variance": None, "status": "non_reproducible",
                        "reason": f"sandbox: {type(e).__name__}: {e}"})
            continue
        v, err = res["value"], res["error"]
        if v is None and real is None:
            status, reason = "reproduced", f"metric fails on the real data, as committed ({err})"
        elif v is None:
            status, reason = "non_reproducible", f"rerun raised {err}"
        elif real is None:
            status, reason = "differs", "committed real_value is null but the rerun returns a value"
        else:
            ok = abs(v - real) <= METRIC_TOLERANCE
            status, reason = ("reproduced" if ok else "differs"), ("" if ok else f"|diff| {abs(v - real):.3g}")
        if status == "differs" and (run, o["obs_id"]) in REWRITTEN:
            status, reason = "non_reproducible", f"{reason}; {REWRITTEN[run, o['obs_id']]}".lstrip("; ")
        var_diff = (abs(res["variance"] - o["real_variance"]) if res["variance"] is not None
                    and o.get("real_variance") is not None else None)
        out.append({**rec, "value": v, "variance": res["variance"], "abs_diff": None if v is None or real is None
                    else abs(v - real), "variance_abs_diff": var_diff, "status": status, "reason": reason})
    return out
