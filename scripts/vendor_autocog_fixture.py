#!/usr/bin/env python3
"""Build the AutoCog human-data fixture (spec autocog §6.9 "Vendoring recipe") from a git mirror of the authors'
repository, so anyone can check the vendored bytes against the source.

    python scripts/vendor_autocog_fixture.py --mirror /work/.mirror/akjagadish+autocog/repo \
        --out tests/fixtures/autocog_human

What it copies (MIT, https://github.com/akjagadish/autocog at commit 6761c69e):
  - the 10 canonical ``observations/data/round_00{0..4}_obs_0{0,1}.jsonl`` files of each run, bytes unchanged,
    gzipped deterministically (mtime 0, no file name, level 9) -> ``<run>/data/*.jsonl.gz``;
  - ``<run>/observations.json`` extracted from that run's ``observations/state.json`` (designs, metric sources,
    real values, predictions per label, theory sources pi_1..pi_7; transformations listed in NOTICE.md);
  - ``<run>/leaderboard_final.json``: the last "post-admit" block of the run's ``leaderboard.md``;
  - ``theories/{ttb,tallying,ew,wadd}.yaml`` (the seed theory YAMLs, bytes unchanged; spec AC-2 second half);
  - ``LICENSE`` verbatim, ``NOTICE.md`` and ``manifest.json`` (sha256 of every file the loader checks).

Never copied (§6.9): ``*_participants.csv``, ``*_excluded.jsonl``, ``*_og.jsonl``, preregistration per-participant
tables, ``results/hilbig2014/exp1.txt``. The script only reads the paths listed below.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import re
import subprocess
from pathlib import Path

SOURCE_URL = "https://github.com/akjagadish/autocog"
COMMIT = "6761c69e"
RETRIEVED = "2026-11-25"
RUNS = {"binary": "results/human_decision_making_binary/ttb+wadd",
        "cardinal": "results/human_decision_making_cardinal/ttb+tallying"}
CANONICAL = [f"round_{r:03d}_obs_{o:02d}.jsonl" for r in range(5) for o in range(2)]
THEORY_YAMLS = ("ttb", "tallying", "ew", "wadd")
THEORY_DIR = "theories/heuristic_decision_making"
_ROW = re.compile(r"^\s*#\s*\d+\s+(pi_\d+)\s+(-?\d+\.\d+)")


def sha256(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def git_show(mirror: Path, commit: str, path: str) -> bytes:
    return subprocess.run(["git", "-C", str(mirror), "show", f"{commit}:{path}"], check=True,
                          capture_output=True).stdout


def gzip_bytes(b: bytes) -> bytes:
    """Deterministic gzip: the same input always gives the same bytes (mtime 0, empty name)."""
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as f:
        f.write(b)
    return buf.getvalue()


def final_leaderboard(md: str) -> dict[str, float]:
    """Scores of the last ``post-admit`` block of ``leaderboard.md`` (the final leaderboard, §6.9 use 2)."""
    blocks = re.split(r"^## ", md, flags=re.M)
    last = [b for b in blocks if b.strip() and "post-admit" in b.splitlines()[0]]
    if not last:
        raise ValueError("leaderboard.md: no post-admit block")
    rows = [_ROW.match(line) for line in last[-1].splitlines()]
    return {m.group(1): float(m.group(2)) for m in rows if m}


def extract_observations(state: dict) -> dict:
    """state.json -> the fixture's observations.json (shape documented in methods/autocog/fixtures.py).

    Transformations: ``predicted_values`` (a list of {label, value, variance}) becomes a {label: value} map plus a
    {label: variance} map; ``data_path`` points at the gzipped copy; each observation gets ``obs_id``, ``round`` and
    ``index``; the theory sources are collected once per label (pi_1/pi_2 from the round-0 proposers, pi_3..pi_7
    from each round's ``next_theory``) with the round after which each was admitted (seeds: null)."""
    obs, theories = [], {}
    for r, rnd in enumerate(state["rounds"]):
        if "verdict" in rnd:
            raise ValueError("state.json has arbiter verdicts: extend the extraction to keep them")
        for i, o in enumerate(rnd["observations"]):
            lab = o["proposer_label"]
            if lab not in theories:
                theories[lab] = {**{k: o["proposer_theory"].get(k) for k in
                                    ("description", "predict_source", "policy_source", "parameters", "rationale")},
                                 "admitted_after_round": None}
            obs.append({"obs_id": f"round_{r:03d}_obs_{i:02d}", "round": r, "index": i,
                        "data_path": "data/" + Path(o["data_path"]).name + ".gz", "proposer_label": lab,
                        "experiment": o["experiment"], "metric": o["metric"], "real_value": o["real_value"],
                        "real_variance": o["real_variance"],
                        "predicted_values": {p["label"]: p["value"] for p in o["predicted_values"]},
                        "predicted_variances": {p["label"]: p["variance"] for p in o["predicted_values"]}})
        nt = rnd.get("next_theory")
        if nt is not None:
            theories[rnd["next_theory_label"]] = {**{k: nt.get(k) for k in ("description", "predict_source",
                                                                           "policy_source", "parameters",
                                                                           "rationale")},
                                                  "admitted_after_round": r}
    return {"observations": obs, "theories": dict(sorted(theories.items(), key=lambda kv: int(kv[0][3:]))),
            "verdicts": None,
            "note": "state.json at this commit stores no arbiter verdicts (no 'verdict' key in any round)"}


def build(mirror: Path, out: Path, commit: str = COMMIT, retrieved: str = RETRIEVED) -> dict:
    full = subprocess.run(["git", "-C", str(mirror), "rev-parse", commit], check=True, capture_output=True,
                          text=True).stdout.strip()
    files: dict[str, bytes] = {}
    originals: list[tuple[str, str, str]] = []  # (repo path, sha256, what became of it)

    def take(repo_path: str) -> bytes:
        b = git_show(mirror, full, repo_path)
        originals.append((repo_path, sha256(b), ""))
        return b

    lic = take("LICENSE")
    files["LICENSE"] = lic
    for run, base in RUNS.items():
        for name in CANONICAL:
            b = take(f"{base}/observations/data/{name}")
            files[f"{run}/data/{name}.gz"] = gzip_bytes(b)
        state = json.loads(take(f"{base}/observations/state.json"))
        files[f"{run}/observations.json"] = (json.dumps(extract_observations(state), indent=1) + "\n").encode()
        lb = final_leaderboard(take(f"{base}/leaderboard.md").decode())
        files[f"{run}/leaderboard_final.json"] = (json.dumps(lb, indent=1) + "\n").encode()
    for name in THEORY_YAMLS:
        files[f"theories/{name}.yaml"] = take(f"{THEORY_DIR}/{name}.yaml")

    derived = {rel: sha256(b) for rel, b in sorted(files.items())}
    files["NOTICE.md"] = notice(full, retrieved, originals, derived).encode()
    out.mkdir(parents=True, exist_ok=True)
    for rel, b in files.items():
        p = out / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b)
    manifest = {"source": SOURCE_URL, "commit": full, "retrieved": retrieved, "license": "MIT",
                "files": {rel: sha256(b) for rel, b in sorted(files.items())},
                "originals": {p: h for p, h, _ in originals}}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def notice(full: str, retrieved: str, originals, derived: dict[str, str]) -> str:
    lines = [
        "# Attribution: AutoCog human-data fixture",
        "",
        f"Source: {SOURCE_URL} (commit `{full}`), retrieved {retrieved} from a git mirror of that repository.",
        "Copyright (c) 2026 Akshay Kumar Jagadish; MIT licence, text verbatim in `LICENSE`. Built by",
        "`scripts/vendor_autocog_fixture.py` (re-run it against the same commit to reproduce every byte).",
        "",
        "## Transformations",
        "",
        "- `<run>/data/*.jsonl.gz`: the canonical per-observation JSONL files, bytes unchanged, gzipped (mtime 0, no",
        "  name, level 9). `gunzip -c` gives the original bytes (sha256 below).",
        "- `<run>/observations.json`: extracted from `observations/state.json`: per observation the design",
        "  (`experiment`), the metric source and rationale, `real_value`, `real_variance`, the predictions as",
        "  {label: value} and {label: variance} maps, `obs_id`/`round`/`index` and `data_path` (the .gz copy); the",
        "  theory sources pi_1..pi_7 (description, predict/policy source, parameters, rationale) once per label with",
        "  the round after which each was admitted. The repository's state.json holds no arbiter verdicts at this",
        "  commit, so none are vendored. LLM-written self-experiment transcripts (`self_exp/`) are not vendored.",
        "- `<run>/leaderboard_final.json`: the scores of the last `post-admit` block of `leaderboard.md`.",
        "- `theories/*.yaml`: the seed theory files of `theories/heuristic_decision_making/`, bytes unchanged.",
        "- `LICENSE`: verbatim.",
        "",
        "Runs: `binary` = `results/human_decision_making_binary/ttb+wadd/`, `cardinal` =",
        "`results/human_decision_making_cardinal/ttb+tallying/`.",
        "",
        "Never vendored (spec autocog §6.9): `*_participants.csv`, `*_excluded.jsonl`, `*_og.jsonl`, preregistration",
        "per-participant tables, `results/hilbig2014/exp1.txt` (third-party data).",
        "",
        "## Original files (repository path, sha256 of the bytes at the commit)",
        "",
    ]
    lines += [f"- `{p}` `{h}`" for p, h, _ in originals]
    lines += ["", "## Derived files (fixture path, sha256)", ""]
    lines += [f"- `{rel}` `{h}`" for rel, h in derived.items()]
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mirror", type=Path, required=True, help="bare git dir of akjagadish/autocog")
    ap.add_argument("--out", type=Path, default=Path("tests/fixtures/autocog_human"))
    ap.add_argument("--commit", default=COMMIT)
    ap.add_argument("--retrieved", default=RETRIEVED, help="retrieval date written into NOTICE.md")
    a = ap.parse_args()
    man = build(a.mirror, a.out, a.commit, a.retrieved)
    print(f"wrote {len(man['files'])} files to {a.out} (+ manifest.json)")


if __name__ == "__main__":
    main()
