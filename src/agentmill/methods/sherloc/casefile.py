"""The diagnostic case file: a versioned JSON document (``agentmill.casefile/1``), its parser and validator.

The five findings fields come from the paper's output format [P][C]; the document around them is agentmill's
[R]: identity of the repository and issue, numbered locations, findings that cite location ids, confidence,
provenance and a trace of the run. :data:`SCHEMA` (JSON Schema draft 2020-12) ships in this module and is printed
by ``agentmill sherloc schema``.

- :func:`parse_final` reads a model's final answer: the paper's ``<findings>`` bullets (labels matched
  case-insensitively; consecutive labelled bullets form one finding; unlabelled bullets go to ``notes``) and
  ``<locations>`` lines (``path:L10-L20``, ``path:L10``, ``path:10-20``; anything else is kept in ``notes`` as
  raw text), or a JSON object in the schema.
- :func:`validate` checks the schema (every failing JSON pointer listed in one :class:`CaseFileError`), then,
  with a snapshot: files exist, ``1 ≤ start ≤ end ≤ line count`` (an end past the file is clamped *and flagged*),
  overlapping ranges in a file merged, duplicates dropped, ids unique and referenced ids existing.
- :func:`render` gives the text injected into a repair agent (``full`` or ``locations``).
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

SCHEMA_ID = "agentmill.casefile/1"
FIELDS = {"location explanation": "explanation", "root cause": "root_cause", "solution idea": "solution_idea",
          "dependencies": "dependencies", "testing impact": "testing_impact"}

_str = {"type": "string"}
SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "$id": "https://agentmill.invalid/schemas/casefile-1.json",
    "title": "agentmill diagnostic case file, version 1",
    "type": "object",
    "required": ["schema", "instance_id", "repo", "issue_sha256", "locations", "findings", "notes"],
    "properties": {
        "schema": {"const": SCHEMA_ID},
        "instance_id": _str,
        "repo": {"type": "object", "required": ["name", "commit"],
                 "properties": {"name": _str, "commit": {"type": "string", "pattern": "^([0-9a-f]{40})?$"},
                                "tree_hash": _str}},
        "issue_sha256": {"type": "string", "pattern": "^([0-9a-f]{64})?$"},
        "locations": {"type": "array", "maxItems": 200, "items": {
            "type": "object", "required": ["id", "file", "start", "end"], "additionalProperties": False,
            "properties": {"id": {"type": "string", "pattern": "^L[0-9]+$"},
                           "file": {"type": "string", "minLength": 1, "maxLength": 4096,
                                    "pattern": "^(?!/)(?!.*\\\\)(?!(.*/)?\\.\\.(/|$))[^\\x00]+$"},
                           "start": {"type": "integer", "minimum": 1},
                           "end": {"type": "integer", "minimum": 1},
                           "symbol": {"type": ["string", "null"]}}}},
        "findings": {"type": "array", "items": {
            "type": "object", "required": ["location_ids", "explanation", "root_cause", "solution_idea",
                                           "dependencies", "testing_impact"],
            "properties": {"location_ids": {"type": "array", "items": _str}, "explanation": _str,
                           "root_cause": _str, "solution_idea": _str,
                           "dependencies": {"type": "array", "items": _str},
                           "testing_impact": {"type": "array", "items": _str}}}},
        "notes": {"type": "array", "items": _str},
        "confidence": {"type": "object", "properties": {
            "score": {"type": ["number", "null"], "minimum": 0, "maximum": 1},
            "features": {"type": "object", "additionalProperties": {"type": "number"}}, "model": _str}},
        "provenance": {"type": "object"},
        "trace": {"type": "object", "properties": {
            "status": _str, "reason": _str, "turns": {"type": "integer", "minimum": 0},
            "tool_calls": {"type": "object", "additionalProperties": {"type": "integer"}},
            "tokens_in": {"type": "integer"}, "tokens_out": {"type": "integer"},
            "tool_output_tokens": {"type": "integer"}, "wall_s": {"type": "number"}}},
    },
}


class CaseFileError(ValueError):
    """A case file that fails validation; ``problems`` lists ``(json_pointer, message)`` pairs, all in the text."""

    def __init__(self, problems: Sequence[tuple[str, str]]) -> None:
        self.problems = list(problems)
        super().__init__("invalid case file: " + "; ".join(f"{p or '/'}: {m}" for p, m in self.problems))


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def new_case_file(instance_id: str, repo_name: str = "", commit: str = "", tree_hash: str = "",
                  issue: str = "") -> dict[str, Any]:
    return {"schema": SCHEMA_ID, "instance_id": instance_id,
            "repo": {"name": repo_name, "commit": commit, "tree_hash": tree_hash},
            "issue_sha256": sha256_text(issue) if issue else "", "locations": [], "findings": [], "notes": [],
            "confidence": {"score": None, "features": {}, "model": ""}, "provenance": {}, "trace": {}}


LOC_RE = re.compile(r"^\s*(?:[-*•]\s*)?`?([^\s:`]+):L?(\d+)(?:\s*-\s*L?(\d+))?`?(?:\s*\(([^)]*)\))?\s*$")
TAG_RE = {t: re.compile(rf"<{t}>(.*?)(?:</{t}>|$)", re.S | re.I) for t in ("findings", "locations")}
BULLET = re.compile(r"^\s*(?:[-*•]|\d+[.)])\s+(.*)$")
LABEL = re.compile(r"^\**\s*(location explanation|root cause|solution idea|dependencies|testing impact)\s*\**\s*:"
                   r"\s*\**\s*(.*)$", re.I)


def _split_list(text: str) -> list[str]:
    parts = [p.strip() for p in re.split(r";|\n", text) if p.strip()]
    return parts if parts else ([] if not text.strip() else [text.strip()])


def parse_final(text: str, *, instance_id: str = "", repo_name: str = "", commit: str = "", tree_hash: str = "",
                issue: str = "") -> dict[str, Any]:
    """A case file from a final answer (tagged bullets and locations, or a JSON object in the schema). Raises
    ``ValueError`` when the text holds neither ``<locations>`` nor a case-file JSON object."""
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            obj = json.loads(stripped)
        except ValueError as e:
            raise ValueError(f"final answer looks like JSON but does not parse: {e}") from None
        if not isinstance(obj, dict):
            raise ValueError("final answer JSON is not an object")
        cf = new_case_file(instance_id, repo_name, commit, tree_hash, issue)
        cf.update(obj)
        return cf
    lm = TAG_RE["locations"].search(text)
    if lm is None:
        raise ValueError("no <locations> block in the final answer")
    cf = new_case_file(instance_id, repo_name, commit, tree_hash, issue)
    for ln in lm.group(1).splitlines():
        if not ln.strip():
            continue
        m = LOC_RE.match(ln)
        if m is None:
            cf["notes"].append(f"unparsed location line: {ln.strip()[:300]}")
            continue
        s = int(m.group(2))
        e = int(m.group(3)) if m.group(3) else s
        cf["locations"].append({"id": f"L{len(cf['locations']) + 1}", "file": m.group(1), "start": s, "end": e,
                                "symbol": m.group(4)})
    fm = TAG_RE["findings"].search(text)
    findings: list[dict[str, Any]] = []
    cur: dict[str, Any] | None = None
    if fm is not None:
        for ln in fm.group(1).splitlines():
            b = BULLET.match(ln)
            body = b.group(1) if b else ln.strip()
            if not body:
                continue
            lab = LABEL.match(body)
            if lab is None:
                if b is not None or cur is None:
                    cf["notes"].append(body)
                else:  # a continuation line of the previous labelled bullet
                    cur["_last"] = cur.get("_last")
                    key = cur.get("_last")
                    if key in ("dependencies", "testing_impact"):
                        cur[key].extend(_split_list(body))
                    elif key:
                        cur[key] = (cur[key] + " " + body).strip()
                continue
            key = FIELDS[lab.group(1).lower()]
            if cur is None or key in cur["_seen"]:
                cur = {"location_ids": [], "explanation": "", "root_cause": "", "solution_idea": "",
                       "dependencies": [], "testing_impact": [], "_seen": set()}
                findings.append(cur)
            cur["_seen"].add(key)
            cur["_last"] = key
            val = lab.group(2).strip()
            if key in ("dependencies", "testing_impact"):
                cur[key] = _split_list(val)
            else:
                cur[key] = val
    ids = [loc["id"] for loc in cf["locations"]]
    for k, f in enumerate(findings):
        f.pop("_seen", None)
        f.pop("_last", None)
        # which locations a finding explains: paired in order when counts match, else all of them [R]
        f["location_ids"] = [ids[k]] if len(findings) == len(ids) and len(ids) > 1 else list(ids)
        deps = []
        for d in f["dependencies"]:
            m = LOC_RE.match(d)
            hit = [loc["id"] for loc in cf["locations"] if m and loc["file"] == m.group(1)
                   and loc["start"] == int(m.group(2))]
            deps.append(hit[0] if hit else d)
        f["dependencies"] = deps
    cf["findings"] = findings
    return cf


def schema_problems(cf: Any) -> list[tuple[str, str]]:
    """Every schema violation as (JSON pointer, message)."""
    try:
        import jsonschema
    except ImportError:
        raise ImportError("case-file validation needs jsonschema: pip install 'agentmill[coding]'") from None
    v = jsonschema.Draft202012Validator(SCHEMA)
    out = []
    for err in sorted(v.iter_errors(cf), key=lambda e: list(map(str, e.absolute_path))):
        ptr = "/" + "/".join(str(p) for p in err.absolute_path)
        out.append((ptr if ptr != "/" else "", err.message[:300]))
    return out


def validate(cf: Any, snapshot: Any = None, *, max_locations: int | None = None) -> tuple[dict[str, Any], list[str]]:
    """(normalised copy, flags). Raises :class:`CaseFileError` naming every failing field (JSON pointers)."""
    problems = schema_problems(cf)
    if problems:
        raise CaseFileError(problems)
    cf = copy.deepcopy(cf)
    flags: list[str] = []
    locs = cf["locations"]
    seen_ids: set[str] = set()
    for i, loc in enumerate(locs):
        if loc["id"] in seen_ids:
            problems.append((f"/locations/{i}/id", f"duplicate location id {loc['id']!r}"))
        seen_ids.add(loc["id"])
        if loc["end"] < loc["start"]:
            problems.append((f"/locations/{i}/end", f"end {loc['end']} < start {loc['start']}"))
        if snapshot is not None:
            if not snapshot.has(loc["file"]):
                problems.append((f"/locations/{i}/file", f"{loc['file']!r} is not in the repository snapshot"))
            elif not snapshot.is_text(loc["file"]):
                problems.append((f"/locations/{i}/file", f"{loc['file']!r} is not a text file"))
            else:
                n = len(snapshot.lines(loc["file"]))
                if loc["start"] > n:
                    problems.append((f"/locations/{i}/start", f"start {loc['start']} is past the end of "
                                                              f"{loc['file']} ({n} lines)"))
                elif loc["end"] > n:
                    flags.append(f"/locations/{i}/end: clamped from {loc['end']} to {n} (end of {loc['file']})")
                    loc["end"] = n
    for j, f in enumerate(cf["findings"]):
        for k, lid in enumerate(f["location_ids"]):
            if lid not in seen_ids:
                problems.append((f"/findings/{j}/location_ids/{k}", f"unknown location id {lid!r}"))
    if problems:
        raise CaseFileError(problems)
    # merge overlapping ranges and drop duplicates, per file (ids of merged ranges map to the kept one)
    kept: list[dict[str, Any]] = []
    alias: dict[str, str] = {}
    for loc in sorted(locs, key=lambda x: (x["file"], x["start"], x["end"])):
        prev = kept[-1] if kept else None
        if prev is not None and prev["file"] == loc["file"] and loc["start"] <= prev["end"]:
            what = "duplicate dropped" if (loc["start"], loc["end"]) == (prev["start"], prev["end"]) else "merged"
            flags.append(f"location {loc['id']} ({loc['file']}:{loc['start']}-{loc['end']}) {what} into {prev['id']}")
            prev["end"] = max(prev["end"], loc["end"])
            alias[loc["id"]] = prev["id"]
        else:
            kept.append(loc)
    order = {loc["id"]: i for i, loc in enumerate(locs)}
    kept.sort(key=lambda x: order[x["id"]])
    if max_locations is not None and len(kept) > max_locations:
        flags.append(f"{len(kept) - max_locations} location(s) beyond max_locations={max_locations} dropped")
        dropped = {loc["id"] for loc in kept[max_locations:]}
        kept = kept[:max_locations]
        alias.update({d: "" for d in dropped})
    cf["locations"] = kept
    for f in cf["findings"]:
        ids = []
        for lid in f["location_ids"]:
            lid = alias.get(lid, lid)
            if lid and lid not in ids:
                ids.append(lid)
        f["location_ids"] = ids
        f["dependencies"] = [alias.get(d, d) or d for d in f["dependencies"]]
    return cf, flags


def locations_of(cf: Mapping[str, Any]) -> list[tuple[str, int, int]]:
    return [(loc["file"], int(loc["start"]), int(loc["end"])) for loc in cf.get("locations", [])]


def render(cf: Mapping[str, Any], mode: str = "full") -> str:
    """The text a repair agent receives: ``locations`` (the ranges only) or ``full`` (ranges and findings)."""
    if mode not in ("full", "locations"):
        raise ValueError(f"render mode must be 'full' or 'locations', got {mode!r}")
    lines = ["A localization report for this issue (it may be wrong):", "Suspect locations:"]
    for loc in cf.get("locations", []):
        sym = f" ({loc['symbol']})" if loc.get("symbol") else ""
        lines.append(f"- [{loc['id']}] {loc['file']}:L{loc['start']}-L{loc['end']}{sym}")
    if mode == "full":
        for k, f in enumerate(cf.get("findings", []), 1):
            lines.append(f"Finding {k} (locations {', '.join(f['location_ids']) or '-'}):")
            for label, key in (("Location explanation", "explanation"), ("Root cause", "root_cause"),
                               ("Solution idea", "solution_idea")):
                if f.get(key):
                    lines.append(f"- {label}: {f[key]}")
            if f.get("dependencies"):
                lines.append(f"- Dependencies: {'; '.join(f['dependencies'])}")
            if f.get("testing_impact"):
                lines.append(f"- Testing impact: {'; '.join(f['testing_impact'])}")
    return "\n".join(lines)
