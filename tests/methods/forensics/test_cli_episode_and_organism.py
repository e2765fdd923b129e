"""The CLI's episode-mode replay and organism agent through ``main([...])`` (the flags added for episode mode and
FO-8; the rest of ``agentmill forensics`` is tested in tests/cli/test_forensics.py)."""

from __future__ import annotations

import json

from agentmill.cli.main import main


def test_episode_mode_replay_verify_and_refusals(tmp_path, capsys) -> None:
    out = tmp_path / "rt"
    assert main(["forensics", "replay", "env:loyalty", "--mode", "episode", "--set", "actor=developer",
                 "--out", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out.split("\n", 1)[1])
    assert printed["mode"] == "episode" and printed["rewind_step"] == 2
    assert main(["forensics", "verify", str(out / "original.jsonl"), "--replayed", str(out / "replayed.jsonl")]) == 0
    assert main(["forensics", "replay", str(out / "original.jsonl"), "--set", "actor=developer", "--rewind", "3"]) == 2
    text = (out / "replayed.jsonl").read_text().replace("a developer on the team", "a developer on the tem")
    (out / "replayed.jsonl").write_text(text)
    assert main(["forensics", "verify", str(out / "original.jsonl"), "--replayed", str(out / "replayed.jsonl")]) == 2
    assert "edited log" in capsys.readouterr().err


def test_organism_agent_is_gated(capsys) -> None:
    from agentmill.methods.forensics.organism import AgentOrganismCard, shipped_dir

    validated = AgentOrganismCard.load(shipped_dir()).validated
    rc = main(["forensics", "sweep", "loyalty", "--variable", "actor", "--agent", "organism"])
    assert rc == 2  # actor is categorical: refused before any model runs
    rc = main(["forensics", "replay", "env:sandbag", "--agent", "organism"])
    assert rc == 2 and "tedium, loyalty" in capsys.readouterr().err
    rc = main(["forensics", "replay", "env:tedium", "--agent", "organism", "--set", "n_errors=5"])
    assert rc == (0 if validated else 3)
