"""``agentmill forensics``: real commands through ``main``; bad input exits 2 naming the line."""

from __future__ import annotations

import json

from agentmill.cli.main import main


def test_register_verify_and_tamper(tmp_path, capsys) -> None:
    reg = tmp_path / "reg"
    assert main(["forensics", "register", "--registry", str(reg), "--id", "H_self", "--motive", "self_consistency",
                 "--category", "malign", "--predict", "actor=developer:-1", "--positive-control",
                 "appeal=asks_to_report", "--env", "loyalty", "--freeze"]) == 0
    assert main(["forensics", "verify", str(reg)]) == 0
    assert "1 frozen" in capsys.readouterr().out
    path = reg / "ledger.jsonl"
    path.write_text(path.read_text().replace("self_consistency", "tedium", 1))
    assert main(["forensics", "verify", str(reg)]) == 2
    assert "line 1 does not verify" in capsys.readouterr().err


def test_replay_and_its_refusals(tmp_path, capsys) -> None:
    out = tmp_path / "rp"
    assert main(["forensics", "replay", "env:loyalty", "--set", "actor=developer", "--out", str(out)]) == 0
    shown = json.loads(capsys.readouterr().out.split("\n", 1)[1])
    assert shown["documents_changed"] == ["notes"] and shown["rewind_step"] == 2
    assert main(["forensics", "verify", str(out / "original.jsonl"), "--replayed", str(out / "replayed.jsonl")]) == 0
    assert main(["forensics", "replay", "env:loyalty", "--set", "actor=developer", "--rewind", "3"]) == 2
    assert "first exposed at step 2" in capsys.readouterr().err
    assert main(["forensics", "replay", "env:loyalty", "--set", "actor=developer", "--set", "motive=save_time"]) == 2
    assert main(["forensics", "replay", "env:loyalty", "--set", "actor=nobody"]) == 2


def test_sweep_prints_the_threshold(tmp_path, capsys) -> None:
    assert main(["forensics", "sweep", "tedium", "--variable", "n_errors", "--n", "40", "--bootstrap", "200",
                 "--plot", str(tmp_path / "d.png")]) == 0
    out = capsys.readouterr().out
    assert "d50 =" in out and (tmp_path / "d.png").exists()
    assert main(["forensics", "sweep", "tedium", "--variable", "deadline"]) == 2


def test_sweep_writes_episodes_then_mine_and_replay(tmp_path, capsys) -> None:
    from agentmill.lm.replay import RecordReplayLM
    from agentmill.lm.scripted import ScriptedLM
    from agentmill.methods.forensics.miner import load_episode_dir, mine_with_lm

    sw = tmp_path / "sw"
    assert main(["forensics", "sweep", "tedium", "--variable", "n_errors", "--n", "6", "--bootstrap", "50",
                 "--episodes-out", str(sw)]) == 0
    assert "wrote 48 episodes" in capsys.readouterr().out
    assert main(["forensics", "sweep", "tedium", "--variable", "n_errors", "--n", "1", "--episodes-out",
                 str(sw)]) == 2  # never into a used directory
    one = sorted((sw / "n_errors=200").glob("*.jsonl"))[0]
    assert main(["forensics", "replay", str(one), "--set", "n_errors=5"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["documents_changed"] == ["validate"] and shown["change"] == {"variable": "n_errors", "value": 5}
    assert main(["forensics", "mine", str(sw)]) == 0
    assert "rule miner: tedium" in capsys.readouterr().out
    # the LM miner replayed from a recording made on a scripted LM: no model is loaded
    rec = tmp_path / "miner.jsonl"
    reply = json.dumps({"candidates": [{"motive": "tedium", "variable": "n_errors", "quote": "Okay"},
                                       {"motive": "boredom", "variable": "row_colour", "quote": "Okay"}]})
    eps = load_episode_dir(sw)
    mine_with_lm(eps, eps[0].env, RecordReplayLM(ScriptedLM(lambda t: reply if "Okay" in t else "no idea",
                                                            spec="scripted:miner"), rec, "record"))
    assert main(["forensics", "mine", str(sw), "--miner", "lm", "--lm", "scripted:miner", "--recording",
                 str(rec), "--min-votes", "1"]) == 0
    out = capsys.readouterr().out
    assert "untestable_here boredom" in out and "'row_colour'" in out and "recorded" in out
    assert main(["forensics", "mine", str(sw), "--miner", "lm"]) == 2
    assert main(["forensics", "mine", str(tmp_path / "none")]) == 2
