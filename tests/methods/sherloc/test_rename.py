"""The renamed-repository control (S-7): names, paths, issue text and gold locations move together; lines do not."""

import ast

from agentmill.methods.sherloc import Location, RepoSnapshot, SherlocConfig
from agentmill.methods.sherloc.rename import apply, plan, renamed

FILES = {
    "src/cachelib/__init__.py": "from .core import LRUCache, cached\nfrom cachelib import func\n",
    "src/cachelib/core.py": ("import cachelib.func\n\n\nclass LRUCache:\n    def get(self, key):\n"
                             "        return cached(key)  # cachelib.core\n\n\n"
                             "def cached(func):\n    s = 'LRUCache in a string'\n    return func\n"),
    "src/cachelib/func.py": "from cachelib.core import cached as _c\n\n\ndef wrap(func):\n    return _c(func)\n",
    "src/cachelib/func.pyi": "def wrap(func: object) -> object: ...\n",
    "tests/__init__.py": "",
    "tests/test_core.py": "from cachelib import LRUCache\n\n\nclass CoreTest:\n    pass\n",
    "setup.cfg": "[metadata]\nname = cachelib\n",
}
SNAP = RepoSnapshot.from_mapping(FILES)
EX = SherlocConfig().excluded


def test_plan_renames_packages_modules_and_top_level_names_only():
    r = plan(SNAP, EX)
    assert set(r.names) == {"cachelib", "LRUCache", "cached", "wrap"}  # not the test class, not methods
    assert set(r.modules) == {"core", "func"}
    assert r.names["cachelib"].startswith("pkg_") and r.names["LRUCache"].startswith("cls_")
    assert r.names["cached"].startswith("fn_") and r.modules["core"].startswith("mod_")
    assert plan(SNAP, EX) == r  # deterministic
    pkg, core, func = r.names["cachelib"], r.modules["core"], r.modules["func"]
    assert r.path("src/cachelib/core.py") == f"src/{pkg}/{core}.py"
    assert r.path("src/cachelib/func.pyi") == f"src/{pkg}/{func}.pyi"
    assert r.path("tests/test_core.py") == "tests/test_core.py"  # tests stay out of view, under their name


def test_apply_keeps_lines_strings_and_local_names():
    r = plan(SNAP, EX)
    s2 = apply(SNAP, r)
    pkg, core, func = r.names["cachelib"], r.modules["core"], r.modules["func"]
    src = s2.text(f"src/{pkg}/{core}.py")
    ast.parse(src)
    assert src.count("\n") == FILES["src/cachelib/core.py"].count("\n")
    assert f"import {pkg}.{func}" in src
    assert "'LRUCache in a string'" in src and "# cachelib.core" in src  # strings and comments untouched
    assert "return func" in src and f"def {r.names['cached']}(func):" in src  # a local named like a module stays
    assert f"from {pkg}.{core} import {r.names['cached']} as _c" in s2.text(f"src/{pkg}/{func}.py")
    assert f"from {pkg} import {r.names['LRUCache']}" in s2.text("tests/test_core.py")
    assert s2.text("setup.cfg") == f"[metadata]\nname = {pkg}\n"
    assert "tests/test_core.py" not in s2.files(SherlocConfig())


def test_renamed_instance_maps_issue_and_gold():
    issue = ("LRUCache.get fails in cachelib 1.0:\n  File \"src/cachelib/core.py\", line 6, in get\n"
             "the func argument is wrong")
    s2, issue2, gold2 = renamed(SNAP, issue, [Location("src/cachelib/core.py", 5, 6)], EX)
    r = plan(SNAP, EX)
    pkg, core = r.names["cachelib"], r.modules["core"]
    assert "cachelib" not in issue2 and "LRUCache" not in issue2
    assert f"src/{pkg}/{core}.py" in issue2
    assert "the func argument" in issue2  # a module's name in prose is left alone
    assert gold2 == [Location(f"src/{pkg}/{core}.py", 5, 6)]
    assert s2.lines(gold2[0].file)[4].strip() == "def get(self, key):"


def test_untokenizable_python_falls_back_to_words():
    snap = RepoSnapshot.from_mapping({"pkg/__init__.py": "", "pkg/a.py": "def helper():\n    pass\n",
                                      "pkg/m.py": "x = helper(\n"})
    r = plan(snap)
    s2 = apply(snap, r)
    assert s2.text(r.path("pkg/m.py")) == f"x = {r.names['helper']}(\n"
