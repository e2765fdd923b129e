"""``agentmill collapse`` and ``agentmill tree`` commands."""

import json

from agentmill.cli.main import main


def test_collapse_table_prints_the_spec_values(capsys):
    assert main(["collapse", "table", "--G", "4,8", "--p", "0.05,0.3"]) == 0
    out = capsys.readouterr().out
    assert "0.815" in out and "0.663" in out and "0.248" in out and "0.058" in out   # C(G, p) reference values [D]


def test_tree_sample_writes_a_rollout_log_and_report_reads_it(tmp_path, capsys):
    log = tmp_path / "trees.jsonl"
    assert main(["tree", "sample", "--n-prompts", "2", "--budget", "300", "--out", str(log)]) == 0
    rows = [json.loads(x) for x in log.read_text().splitlines()]
    assert {r["prompt_id"] for r in rows} == {"synth-0", "synth-1"}
    assert "counters:" in capsys.readouterr().out
    assert main(["collapse", "report", str(log)]) == 0
    assert "2 groups" in capsys.readouterr().out


def test_bad_input_exits_2_with_one_line(tmp_path, capsys):
    assert main(["collapse", "table", "--G", "0,4"]) == 2
    assert main(["collapse", "report", str(tmp_path / "missing.jsonl")]) == 2
    (tmp_path / "x.jsonl").write_text(json.dumps({"foo": 1}) + "\n")
    assert main(["collapse", "report", str(tmp_path / "x.jsonl")]) == 2
    assert main(["tree", "sample", "--selector", "best"]) == 2
    err = capsys.readouterr().err
    assert err.count("agentmill: error:") == 4
