"""``agentmill probe`` through main([...]): the twin, an organism card, exit 3 for an unvalidated organism."""

from __future__ import annotations

import json

from agentmill.cli.main import main


def test_twin_and_show(capsys) -> None:
    assert main(["probe", "twin", "--profile", "flat", "--prompts", "60"]) == 0
    assert "valley depth" in capsys.readouterr().out
    assert main(["probe", "organism", "show", "--variant", "locked"]) == 0
    card = json.loads(capsys.readouterr().out)
    assert card["name"] == "tiny-refusal-locked" and "R1" in card["gates"]


def test_bad_and_unvalidated_organism(tmp_path, capsys) -> None:
    assert main(["probe", "organism", "show", "--organism", str(tmp_path)]) == 2
    from agentmill.methods.first_token_probe.organism import OrganismCard

    OrganismCard("x", "locked", {}, "0", 1.0, 0.0).save(tmp_path)
    (tmp_path / "config.json").write_text("{}")
    assert main(["probe", "fit", "--organism", str(tmp_path)]) == 3
    assert "precondition not met" in capsys.readouterr().out
