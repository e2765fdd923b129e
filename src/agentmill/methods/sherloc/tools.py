"""The four read-only tools over a :class:`RepoSnapshot`, and the tool-call parser for SHERLOC's JSON shapes.

Semantics follow the recipe [C] (docs/methods/sherloc.md, "Tools"): ``repo_tree``, ``view_file`` (header
``File: <path> (lines s-e)``, lines as ``%4d: text``, range clamping, a 1000-line cap, "not found" with up to 3
suggestions), ``codebase_search`` (case-insensitive literal substring, a window of 10 lines around each hit) and
``connected_tree`` (intra-project imports and importers). Every error is text returned to the model; it costs a
turn, never the run. Paths are refused, as text, when absolute, containing ``..`` after normalisation, a NUL byte
or a backslash, or longer than 4,096 characters; symlinks are shown as ``-> target`` and never followed.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections import defaultdict
from collections.abc import Callable, Mapping
from typing import Any

from agentmill.envs.office.tools import ToolResult
from agentmill.methods.sherloc.config import SherlocConfig
from agentmill.methods.sherloc.snapshot import RepoSnapshot

TOOL_NAMES = ("repo_tree", "view_file", "codebase_search", "connected_tree")
MAX_PATH = 4096
MAX_QUERY = 200
IMPORT_RE = re.compile(r"^\s*(?:from\s+(\.*)([\w.]*)\s+import\s+([\w.*, ()]+)|import\s+([\w.]+(?:\s*,\s*[\w.]+)*))")


def approx_tokens(text: str) -> int:
    """Default token count when no tokenizer is given: ~4 characters per token [R]."""
    return (len(text) + 3) // 4


class RangeSet:
    """Line ranges shown to the model, per file (for the grounding feature)."""

    def __init__(self) -> None:
        self.ranges: dict[str, list[tuple[int, int]]] = defaultdict(list)

    def add(self, path: str, start: int, end: int) -> None:
        if end >= start:
            self.ranges[path].append((start, end))

    def covers(self, path: str, start: int, end: int) -> float:
        """Share of lines ``start..end`` that were shown."""
        seen = set()
        for s, e in self.ranges.get(path, []):
            seen.update(range(max(s, start), min(e, end) + 1))
        return len(seen) / max(1, end - start + 1)

    def to_dict(self) -> dict[str, list[list[int]]]:
        return {p: [list(r) for r in rs] for p, rs in self.ranges.items()}


def check_path(path: Any) -> tuple[str | None, str | None]:
    """(normalised POSIX relative path, None) or (None, reason refused)."""
    if not isinstance(path, str) or not path:
        return None, "path must be a non-empty string"
    if len(path) > MAX_PATH:
        return None, f"path longer than {MAX_PATH} characters"
    if "\x00" in path:
        return None, "path contains a NUL byte"
    if "\\" in path:
        return None, "path contains a backslash; use POSIX paths relative to the repository root"
    if path.startswith("/"):
        return None, "absolute paths are refused; use a path relative to the repository root"
    norm = posixpath.normpath(path)
    if norm == ".." or norm.startswith("../") or "/../" in norm or norm.startswith("/"):
        return None, "paths outside the repository ('..') are refused"
    return (norm if norm != "." else ""), None


class Tools:
    """The four tools over one snapshot. ``tokenizer(text) -> int`` counts output tokens (recorded per call)."""

    def __init__(self, snapshot: RepoSnapshot, cfg: SherlocConfig = SherlocConfig(),
                 tokenizer: Callable[[str], int] = approx_tokens) -> None:
        self.snap, self.cfg, self.tokenizer = snapshot, cfg, tokenizer
        self.view = snapshot.files(cfg)
        if not self.view:
            raise ValueError("the filtered view is empty: every file is hidden by exclude_dirs/file_extensions")
        self.viewed = RangeSet()
        self.calls: list[dict[str, Any]] = []
        self._imports: dict[str, list[str]] | None = None

    # -- helpers ------------------------------------------------------------------------------------------------
    def _result(self, name: str, text: str, ok: bool = True) -> ToolResult:
        cap = self.cfg.max_tool_output_tokens
        if cap is not None and self.tokenizer(text) > cap:
            keep = text[: cap * 4]
            while keep and self.tokenizer(keep) > cap:
                keep = keep[: int(len(keep) * 0.9)]
            text = keep + f"\n[output truncated to {cap} tokens]"
        self.calls.append({"tool": name, "ok": ok, "tokens": self.tokenizer(text)})
        return ToolResult("", name, ok, text if ok else "", None if ok else text)

    def _suggest(self, path: str) -> list[str]:
        base = posixpath.basename(path).lower()
        same = [p for p in self.snap.all_paths() if posixpath.basename(p).lower() == base]
        rest = [p for p in self.snap.all_paths() if p not in same and base and (
            base in posixpath.basename(p).lower() or posixpath.basename(p).lower() in base)]
        return (same + rest)[:3]

    # -- the tools ----------------------------------------------------------------------------------------------
    def repo_tree(self) -> ToolResult:
        lines: list[str] = []
        seen_dirs: set[str] = set()
        for p in self.view:
            parts = p.split("/")
            for d in range(1, len(parts)):
                key = "/".join(parts[:d])
                if key not in seen_dirs:
                    seen_dirs.add(key)
                    lines.append("  " * (d - 1) + parts[d - 1] + "/")
            name = parts[-1]
            kind = self.snap.kinds.get(p)
            if kind == "symlink":
                name += f" -> {self.snap.targets.get(p, '?')}"
            elif kind == "submodule":
                name += " (submodule)"
            elif self.cfg.show_line_counts:
                name += f" ({len(self.snap.lines(p))} lines)"
            lines.append("  " * (len(parts) - 1) + name)
        return self._result("repo_tree", "\n".join(lines))

    def view_file(self, path: Any, view_range: Any = None) -> ToolResult:
        norm, why = check_path(path)
        if why:
            return self._result("view_file", f"Error: {why}: {str(path)[:200]!r}", ok=False)
        assert norm is not None
        if not self.snap.has(norm):
            sug = self._suggest(norm)
            tail = ("\nDid you mean: " + ", ".join(sug)) if sug else ""
            return self._result("view_file", f"Error: file not found: {norm}{tail}", ok=False)
        kind = self.snap.kinds[norm]
        if kind == "symlink":
            return self._result("view_file", f"{norm} is a symbolic link -> {self.snap.targets.get(norm, '?')} "
                                             "(not followed)", ok=False)
        if kind == "submodule":
            return self._result("view_file", f"{norm} is a git submodule (opaque)", ok=False)
        if kind in ("binary", "large"):
            return self._result("view_file", f"{norm} is a {kind} file ({self.snap.sizes.get(norm, 0)} bytes); "
                                             "not shown", ok=False)
        lines = self.snap.lines(norm)
        n = len(lines)
        note = ""
        s, e = 1, n
        if view_range is not None:
            try:
                s, e = int(view_range[0]), int(view_range[1])
                if len(view_range) != 2:
                    raise ValueError
            except (TypeError, ValueError, IndexError):
                return self._result("view_file", f"Error: view_range must be [start, end], got {view_range!r}",
                                    ok=False)
            if e == -1:
                e = n
            s, e = max(1, s), min(e, n)
            if s > e:
                note = f"Error: invalid range [{view_range[0]}, {view_range[1]}] (start > end); showing the whole file\n"
                s, e = 1, n
        if e - s + 1 > self.cfg.max_view_lines:
            e = s + self.cfg.max_view_lines - 1
            note += (f"[truncated: showing {self.cfg.max_view_lines} lines from line {s}; "
                     f"request a view_range to see more]\n")
        head = f"File: {norm} (lines {s}-{e})"
        imps = self.imports_of(norm)
        if imps:
            head += "\nImports: " + ", ".join(imps[:10])
        if norm in self.snap.non_utf8:
            head += "\n[note: not valid UTF-8; undecodable bytes replaced]"
        body = "\n".join("%4d: %s" % (i, lines[i - 1]) for i in range(s, e + 1))
        self.viewed.add(norm, s, e)
        return self._result("view_file", note + head + "\n" + body)

    def codebase_search(self, query: Any) -> ToolResult:
        if not isinstance(query, str) or not 1 <= len(query) <= MAX_QUERY:
            return self._result("codebase_search", f"Error: query must be a string of 1-{MAX_QUERY} characters",
                                ok=False)
        q = query.lower()
        hits = []
        if "\n" not in q:
            for p in self.view:
                if self.snap.is_text(p):
                    hits += [(p, ln) for ln in self.snap.find_lines(p, q)]
        if not hits:
            return self._result("codebase_search", f"No matches for {query!r}.")
        w = self.cfg.search_window
        shown = hits[: self.cfg.search_max_hits]
        out = [f"{len(hits)} match(es) for {query!r}:"]
        for p, ln in shown:
            lines = self.snap.lines(p)
            s, e = max(1, ln - w), min(len(lines), ln + w)
            self.viewed.add(p, s, e)
            out.append(f"\n{p}:{ln}")
            out += ["%4d: %s" % (i, lines[i - 1]) for i in range(s, e + 1)]
        if len(hits) > len(shown):
            out.append(f"\n[{len(hits) - len(shown)} more matches not shown; refine the query]")
        return self._result("codebase_search", "\n".join(out))

    def _import_graph(self) -> dict[str, list[str]]:
        if self._imports is not None:
            return self._imports
        py = [p for p in self.view if p.endswith(".py") and self.snap.is_text(p)]
        by_module: dict[str, str] = {}
        for p in py:
            mod = p[:-3].replace("/", ".")
            if mod.endswith(".__init__"):
                mod = mod[: -len(".__init__")]
            by_module[mod] = p
            # src layout: also index without a leading "src."
            if mod.startswith("src."):
                by_module[mod[4:]] = p
        graph: dict[str, list[str]] = {}
        for p in py:
            pkg = posixpath.dirname(p).replace("/", ".")
            found: list[str] = []
            for ln in self.snap.lines(p):
                m = IMPORT_RE.match(ln)
                if not m:
                    continue
                dots, mod, names, plain = m.groups()
                cands: list[str] = []
                if plain:
                    cands = [x.strip() for x in plain.split(",")]
                else:
                    if dots:
                        base = pkg.split(".") if pkg else []
                        base = base[: len(base) - (len(dots) - 1)] if len(dots) > 1 else base
                        root = ".".join([b for b in base if b] + ([mod] if mod else []))
                    else:
                        root = mod
                    # ``from X import a``: the module X.a when it exists, else X itself
                    subs = [f"{root}.{n.strip(' ()').split(' as ')[0].strip()}" for n in names.split(",")
                            if n.strip(" ()")]
                    cands = [c for c in subs if c in by_module or c[4:] in by_module] or [root]
                for c in cands:
                    for key in (c, c[4:] if c.startswith("src.") else None):
                        if key and key in by_module and by_module[key] != p and by_module[key] not in found:
                            found.append(by_module[key])
            graph[p] = found
        self._imports = graph
        return graph

    def imports_of(self, path: str) -> list[str]:
        return self._import_graph().get(path, []) if path.endswith(".py") else []

    def connected_tree(self, file: Any = None) -> ToolResult:
        g = self._import_graph()
        if file is None:
            deg: dict[str, int] = defaultdict(int)
            for p, imps in g.items():
                deg[p] += len(imps)
                for q in imps:
                    deg[q] += 1
            top = sorted(deg.items(), key=lambda kv: (-kv[1], kv[0]))[:10]
            out = ["Most connected files (imports + importers):"] + [f"  {p} ({d})" for p, d in top]
            return self._result("connected_tree", "\n".join(out))
        norm, why = check_path(file)
        if why:
            return self._result("connected_tree", f"Error: {why}: {str(file)[:200]!r}", ok=False)
        if norm not in g:
            sug = self._suggest(norm or "")
            tail = ("\nDid you mean: " + ", ".join(sug)) if sug else ""
            return self._result("connected_tree", f"Error: not a Python file in the view: {norm}{tail}", ok=False)
        importers = sorted(p for p, imps in g.items() if norm in imps)
        out = [f"{norm}", "  imports:"] + [f"    {p}" for p in g[norm][:10]] + ["  imported by:"]
        out += [f"    {p}" for p in importers[:10]]
        return self._result("connected_tree", "\n".join(out))

    # -- dispatch -------------------------------------------------------------------------------------------------
    def call(self, payload: Mapping[str, Any]) -> ToolResult:
        """Run a parsed call (either JSON shape, or inferred from its arguments)."""
        name, args = normalise_call(payload)
        if name is None:
            return self._result("unknown", f"Error: {args.get('error', 'unknown tool')}; tools: "
                                           f"{', '.join(TOOL_NAMES)}", ok=False)
        try:
            if name == "repo_tree":
                return self.repo_tree()
            if name == "view_file":
                return self.view_file(args.get("path"), args.get("view_range"))
            if name == "codebase_search":
                return self.codebase_search(args.get("query"))
            return self.connected_tree(args.get("file"))
        except Exception as e:  # noqa: BLE001 - a tool bug becomes text for the model, never a crash
            return self._result(name, f"Error: {type(e).__name__}: {str(e)[:200]}", ok=False)


def normalise_call(payload: Any) -> tuple[str | None, dict[str, Any]]:
    """``{"tool": name, **args}``, ``{name: {args}}``, ``{"name": n, "arguments": {…}}`` or bare arguments
    (``path`` -> view_file, ``query`` -> codebase_search, ``file`` -> connected_tree) -> (name, args)."""
    if not isinstance(payload, Mapping):
        return None, {"error": "a tool call must be a JSON object"}
    if "tool" in payload:
        name = payload["tool"]
        args = {k: v for k, v in payload.items() if k != "tool"}
        if isinstance(payload.get("arguments"), Mapping):
            args = dict(payload["arguments"])
    elif "name" in payload and isinstance(payload.get("arguments"), (Mapping, str)):
        name, args = payload["name"], payload["arguments"]
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError:
                return None, {"error": "arguments are not a JSON object"}
    elif len(payload) == 1 and next(iter(payload)) in TOOL_NAMES:
        name = next(iter(payload))
        args = payload[name] if isinstance(payload[name], Mapping) else {}
    elif "path" in payload:
        name, args = "view_file", dict(payload)
    elif "query" in payload:
        name, args = "codebase_search", dict(payload)
    elif "file" in payload:
        name, args = "connected_tree", dict(payload)
    else:
        return None, {"error": "cannot tell which tool this call is for"}
    if name not in TOOL_NAMES:
        return None, {"error": f"unknown tool {str(name)[:60]!r}"}
    return name, dict(args) if isinstance(args, Mapping) else {}
