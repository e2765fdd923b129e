"""The extras table (core/extras.py) against pyproject.toml, and the messages a missing extra gives."""

from __future__ import annotations

import ast
import re
import tomllib
from collections import defaultdict
from pathlib import Path

import pytest

from agentmill.core import extras
from agentmill.core.extras import EXTRA_IMPORTS, MissingExtraError, extra_for_module, missing_extras, require

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"
SRC = PYPROJECT.parent / "src" / "agentmill"
NAMED = re.compile(r"agentmill\[([A-Za-z0-9_, -]+)\]")
"""``agentmill[hf,peft]`` in any string: what a user copies into ``pip install``."""


def test_table_names_every_extra_of_pyproject() -> None:
    declared = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]
    assert set(EXTRA_IMPORTS) == set(declared) - {"all", "dev"}
    everything = declared["all"][0]
    for name in EXTRA_IMPORTS:  # ``all`` installs every extra the table knows
        assert name in everything.split("[", 1)[1].rstrip("]").split(","), name


def test_each_extra_is_installed_in_the_test_environment() -> None:
    """The test command installs ``.[all]``, so nothing is missing here (a skip would hide a missing install)."""
    assert missing_extras(EXTRA_IMPORTS) == []


def test_missing_extras_and_require_on_a_planted_extra(monkeypatch) -> None:
    monkeypatch.setitem(extras.EXTRA_IMPORTS, "planted", ("numpy", "agentmill_no_such_module"))
    assert missing_extras(["hf", "planted"]) == ["planted"]
    with pytest.raises(MissingExtraError, match=r"pip install 'agentmill\[planted\]'"):
        require("planted", "the planted feature")
    require("hf", "torch things")  # installed: no error
    with pytest.raises(KeyError, match="unknown extra 'nope'"):
        missing_extras(["nope"])


def test_extra_for_module_maps_top_level_names() -> None:
    assert extra_for_module("torch.nn.functional") == "hf"
    assert extra_for_module("yaml") == "constraint-rot"  # the first extra listing a shared module wins
    assert extra_for_module("pandas") == "autocog"
    assert extra_for_module("numpy") is None and extra_for_module(None) is None


def test_messages_name_one_or_several_extras() -> None:
    one = MissingExtraError("hf", "loading hf:smollm2")
    assert str(one) == "loading hf:smollm2 needs the 'hf' extra: pip install 'agentmill[hf]'"
    assert isinstance(one, ImportError) and one.extra == "hf" and one.extras == ("hf",)
    two = MissingExtraError(["hf", "peft", "constraint-rot"], "experiment e164.x")
    assert str(two) == ("experiment e164.x needs the 'hf', 'peft' and 'constraint-rot' extras: "
                        "pip install 'agentmill[hf,peft,constraint-rot]'")


def test_the_lm_layer_error_is_the_same_error() -> None:
    from agentmill.lm.base import LMError
    from agentmill.lm.base import MissingExtraError as LMMissing

    e = LMMissing("openai", "openai:gpt@http://x")
    assert isinstance(e, MissingExtraError) and isinstance(e, LMError) and e.extra == "openai"
    assert "pip install 'agentmill[openai]'" in str(e)



def extras_named_in_src(root: Path = SRC) -> dict[str, list[str]]:
    """Every extra the source under ``root`` names, with where: ``agentmill[...]`` in any string (error messages,
    hints, docstrings), the first argument of ``MissingExtraError(...)`` / ``require(...)``, and an experiment's
    ``requires=`` / a paper package's ``REQUIRES`` (both end up in a ``pip install`` line)."""
    found: dict[str, list[str]] = defaultdict(list)

    def strings(node: ast.AST, where: str) -> None:
        for c in ast.walk(node):
            if isinstance(c, ast.Constant) and isinstance(c.value, str):
                found[c.value].append(where)

    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            where = f"{path.relative_to(root.parent)}:{getattr(node, 'lineno', '?')}"
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                for m in NAMED.finditer(node.value):
                    for name in m.group(1).split(","):
                        found[name.strip()].append(where)
            elif isinstance(node, ast.Call):
                fn = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                if fn in ("MissingExtraError", "require") and node.args:
                    strings(node.args[0], where)
                for kw in node.keywords:
                    if kw.arg == "requires":
                        strings(kw.value, where)
            elif isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "REQUIRES" for t in node.targets):
                strings(node.value, where)
    return found


def test_every_extra_a_message_names_exists_in_pyproject() -> None:
    """A message telling the user to ``pip install 'agentmill[x]'`` must name a real extra (``autocog-e2e`` was once
    named before it existed: pip only warns and installs nothing)."""
    declared = set(tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"])
    named = extras_named_in_src()
    assert {"hf", "peft", "autocog-e2e", "constraint-rot", "serve"} <= set(named)  # the scan sees every form
    unknown = {name: where for name, where in named.items() if name not in declared}
    assert not unknown, f"extras named in src/ but not in pyproject.toml: {unknown}"


def test_the_scan_finds_a_misspelt_extra_in_each_form(tmp_path) -> None:
    root = tmp_path / "agentmill"
    root.mkdir()
    (root / "m.py").write_text(
        'REQUIRES = frozenset({"constraint_rot"})\n'
        'def f(missing):\n'
        '    require("autocog_e2e", "the browser")\n'
        '    MissingExtraError(missing, "dynamic names are checked where they are made")\n'
        '    raise MissingExtraError(("hf", "pef"), "LoRA")\n'
        'E = Experiment(requires=frozenset({"hf", "openai_agents"}))\n'
        'MSG = "install agentmill[torch] or agentmill[hf, gymnasum]"\n')
    assert set(extras_named_in_src(root)) == {"constraint_rot", "autocog_e2e", "hf", "pef", "openai_agents", "torch",
                                              "gymnasum"}
