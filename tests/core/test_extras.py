"""The extras table (core/extras.py) against pyproject.toml, and the messages a missing extra gives."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from agentmill.core import extras
from agentmill.core.extras import EXTRA_IMPORTS, MissingExtraError, extra_for_module, missing_extras, require

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def test_table_names_every_extra_of_pyproject() -> None:
    declared = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]
    assert set(EXTRA_IMPORTS) == set(declared) - {"all", "dev"} - set(extras.OUTSIDE_ALL)
    everything = declared["all"][0]
    assert not set(extras.OUTSIDE_ALL) & set(everything.split("[", 1)[1].rstrip("]").split(","))
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
