"""The S-1 conformance battery: the tools', metrics', case-file and loop rules as named pass/fail checks on a
hand-made fixture repository (every expected value below is written out by hand from the rules in
docs/methods/sherloc.md). Shared by ``e169.sherloc_tools`` and the unit tests."""

from __future__ import annotations

from collections.abc import Callable

BIG = "\n".join(f"x{i} = {i}" for i in range(1, 1201))
FILES = {
    "pkg/__init__.py": "from .core import run\n",
    "pkg/core.py": "from . import util\nfrom pkg.util import helper\n\n\ndef run(x):\n    return helper(x) + 1\n",
    "pkg/util.py": "def helper(x):\n    return x * 2\n\n\ndef Helper_Two():\n    return 'HELPER'\n",
    "pkg/big.py": BIG + "\n",
    "pkg/sub/__init__.py": "",
    "pkg/sub/deep.py": "from ..core import run\n\n\ndef deep():\n    return run(3)\n",
    "pkg/latin.py": "s = 'caf\ufffd'\n",
    "tests/test_core.py": "from pkg.core import run\n\n\ndef test_run():\n    assert run(1) == 3\n",
    "docs/conf.py": "project = 'x'\n",
    "setup.cfg": "[metadata]\nname = pkg\n",
    "README.md": "# pkg\n",
    "core.py": "# a top-level file with the same basename\n",
}


def snapshot():
    from agentmill.methods.sherloc import RepoSnapshot

    kinds = {"pkg/link.py": "symlink", "pkg/blob.bin": "binary"}
    return RepoSnapshot(FILES, kinds=kinds, targets={"pkg/link.py": "../../etc/passwd"},
                        non_utf8=frozenset({"pkg/latin.py"}), sizes={"pkg/blob.bin": 4096})


def tools(**cfg):
    from agentmill.methods.sherloc import SherlocConfig, Tools

    return Tools(snapshot(), SherlocConfig(**cfg))


def _err(r) -> str:
    return r.error or ""


def check_tree() -> bool:
    t = tools().repo_tree().output
    return ("pkg/" in t and "  core.py" in t and "tests" not in t and "docs" not in t and "setup.cfg" in t
            and "README.md" not in t and "link.py -> ../../etc/passwd" in t and "blob.bin" not in t)


def check_view_header() -> bool:
    out = tools().view_file("pkg/util.py", [2, 3]).output
    return out.startswith("File: pkg/util.py (lines 2-3)\n") and "\n   2:     return x * 2\n   3: " in out


def check_view_clamp() -> bool:
    t = tools()
    a = t.view_file("pkg/util.py", [0, 99]).output
    b = t.view_file("pkg/util.py", [5, -1]).output
    return a.startswith("File: pkg/util.py (lines 1-6)") and b.startswith("File: pkg/util.py (lines 5-6)")


def check_view_bad_range() -> bool:
    out = tools().view_file("pkg/util.py", [5, 2]).output
    return out.startswith("Error: invalid range [5, 2]") and "File: pkg/util.py (lines 1-6)" in out


def check_view_truncation() -> bool:
    out = tools().view_file("pkg/big.py").output
    return ("[truncated: showing 1000 lines from line 1" in out and "File: pkg/big.py (lines 1-1000)" in out
            and "1000: x1000 = 1000" in out and "1001:" not in out)


def check_not_found_suggestions() -> bool:
    r = tools().view_file("lib/core.py")
    return (not r.ok and "file not found: lib/core.py" in _err(r)
            and _err(r).endswith("Did you mean: core.py, pkg/core.py, tests/test_core.py"))


def check_search_window_edges() -> bool:
    out = tools(search_window=2).codebase_search("FROM . IMPORT").output
    return out.endswith("pkg/core.py:1\n   1: from . import util\n   2: from pkg.util import helper\n   3: ")


def check_search_cap() -> bool:
    out = tools(search_max_hits=2).codebase_search("x1").output
    return out.startswith("312 match(es)") and "[310 more matches not shown; refine the query]" in out


def check_search_query_limits() -> bool:
    t = tools()
    return not t.codebase_search("").ok and not t.codebase_search("q" * 201).ok and t.codebase_search("q" * 200).ok


def check_connected_tree() -> bool:
    t = tools()
    out = t.connected_tree("pkg/core.py").output
    deep = t.connected_tree("pkg/sub/deep.py").output
    return ("imports:\n    pkg/util.py" in out and "imported by:\n    pkg/__init__.py\n    pkg/sub/deep.py" in out
            and "imports:\n    pkg/core.py" in deep)


def check_json_shapes() -> bool:
    t = tools()
    a = t.call({"tool": "view_file", "path": "pkg/util.py"}).output
    b = t.call({"view_file": {"path": "pkg/util.py"}}).output
    c = t.call({"path": "pkg/util.py"}).output
    d = t.call({"query": "helper"}).name
    e = t.call({"file": "pkg/core.py"}).name
    f = t.call({"name": "codebase_search", "arguments": "{\"query\": \"helper\"}"}).name
    return a == b == c and d == "codebase_search" and e == "connected_tree" and f == "codebase_search"


def check_path_refusals() -> bool:
    t = tools()
    bad = ["../etc/passwd", "/etc/passwd", "pkg/../../x", "pkg\\core.py", "pkg/\x00core.py", "a/" * 2100]
    rs = [t.view_file(p) for p in bad] + [t.connected_tree("../x")]
    link = t.view_file("pkg/link.py")
    return (all(not r.ok and "refused" in _err(r) or "longer than" in _err(r) or "NUL" in _err(r)
                or "backslash" in _err(r) for r in rs)
            and not link.ok and "-> ../../etc/passwd (not followed)" in _err(link))


def check_binary_and_encoding() -> bool:
    t = tools()
    b = t.view_file("pkg/blob.bin")
    u = t.view_file("pkg/latin.py").output
    return not b.ok and "binary file (4096 bytes); not shown" in _err(b) and "not valid UTF-8" in u


def check_metrics_golden() -> bool:
    from agentmill.methods.sherloc import Location, score

    s = score([Location("a.py", 10, 12), Location("a.py", 40, 40), Location("b.py", 5, 5)],
              [Location("a.py", 8, 15), Location("c.py", 1, 3)])
    return (s.file_recall, s.file_precision, s.file_f1, s.file_exact) == (0.5, 0.5, 0.5, 0.0) and \
        abs(s.file_jaccard - 1 / 3) < 1e-12 and abs(s.coverage_recall - 1 / 3) < 1e-12 and \
        s.avg_prediction_tightness == 0.375 and s.chunk_precision == 0.5


def check_metrics_edges() -> bool:
    from agentmill.methods.sherloc import Location, score

    both = score([], [])
    gold_empty = score([], [Location("a.py", 1, 1)])
    pred_empty = score([Location("a.py", 1, 1)], [])
    failed = score([Location("a.py", 1, 1)], [Location("a.py", 1, 1)], status="failed")
    return both.file_recall == 1 and gold_empty.file_recall == 0 and pred_empty.file_precision == 0 and \
        failed.file_recall == 0


def check_gold_locations() -> bool:
    from agentmill.methods.sherloc import Location, gold_locations

    diff = ("diff --git a/a.py b/a.py\n--- a/a.py\n+++ b/a.py\n@@ -10,4 +10,4 @@\n ctx\n-old1\n-old2\n+new\n ctx\n"
            "@@ -20,2 +20,3 @@\n ctx\n+inserted\n ctx\n"
            "diff --git a/n.py b/n.py\nnew file mode 100644\n--- /dev/null\n+++ b/n.py\n@@ -0,0 +1 @@\n+x\n")
    return gold_locations(diff) == [Location("a.py", 11, 12), Location("a.py", 21, 21)]


def check_casefile_errors() -> bool:
    from agentmill.methods.sherloc import CaseFileError, new_case_file, validate

    cf = new_case_file("i1")
    cf["locations"] = [{"id": "L1", "file": "pkg/util.py", "start": 0, "end": 1}]
    try:
        validate(cf)
        return False
    except CaseFileError as e:
        a = "/locations/0/start" in str(e)
    cf["locations"] = [{"id": "L1", "file": "pkg/nope.py", "start": 1, "end": 1}]
    try:
        validate(cf, snapshot())
        return False
    except CaseFileError as e:
        b = "/locations/0/file" in str(e)
    cf["locations"] = [{"id": "L1", "file": "pkg/util.py", "start": 1, "end": 99}]
    fixed, flags = validate(cf, snapshot())
    return a and b and fixed["locations"][0]["end"] == 6 and any("clamped from 99 to 6" in f for f in flags)


def _run(replies, **cfg):
    from agentmill.lm.scripted import ScriptedLM
    from agentmill.methods.sherloc import SherlocConfig, localize

    return localize("run(1) returns 4, expected 3", snapshot(), ScriptedLM(list(replies)), SherlocConfig(**cfg))


VIEW = '<tool_call>{"tool": "view_file", "path": "pkg/core.py"}</tool_call>'
FINAL_ANSWER = "<findings>\n- Root cause: adds 1\n</findings>\n<locations>\npkg/core.py:L5-L6\n</locations>"


def check_loop_success() -> bool:
    r = _run([VIEW, FINAL_ANSWER])
    return r.status == "success" and r.case_file["locations"][0]["file"] == "pkg/core.py" and r.clean_exit


def check_loop_detection() -> bool:
    r = _run([VIEW, VIEW, VIEW, FINAL_ANSWER])
    return r.status == "success" and r.interventions["loop_warnings"] == 1 and not r.clean_exit


def check_loop_final_forcing() -> bool:
    r = _run([VIEW, VIEW, FINAL_ANSWER], total_steps=3, loop_threshold=5)
    return r.status == "success" and r.interventions["forced_final"] == 1


def check_loop_max_steps() -> bool:
    r = _run([VIEW] * 3, total_steps=3, loop_threshold=5)
    return r.status == "failed" and r.reason == "max_steps_exceeded"


def check_loop_length_retry() -> bool:
    long = "word " * 50
    ok = _run([VIEW, long, FINAL_ANSWER], max_new_tokens=20)
    bad = _run([VIEW, long, long, long], max_new_tokens=20)
    return ok.status == "success" and ok.interventions["length_retries"] == 1 and \
        bad.status == "failed" and bad.reason == "response_truncated"


def check_loop_no_parse() -> bool:
    r = _run(["I think it is in core.", "hmm", "still prose"])
    return r.status == "failed" and r.reason == "no_parsable_action"


def check_loop_first_turn_and_context() -> bool:
    early = _run([FINAL_ANSWER, VIEW, FINAL_ANSWER])
    big = _run(['<tool_call>{"tool": "view_file", "path": "pkg/big.py"}</tool_call>', FINAL_ANSWER],
               max_seq_length=2000, max_new_tokens=20)
    return early.status == "success" and early.interventions["rejected_final"] == 1 and \
        big.status == "failed" and big.reason == "context_length_exceeded"


CHECKS: dict[str, Callable[[], bool]] = {k[len("check_"):]: v for k, v in sorted(globals().items())
                                         if k.startswith("check_") and callable(v)}
"""Every conformance check by name."""
