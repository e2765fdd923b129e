"""``agentmill autocog`` wiring of three library features : ``run --gate``, ``leaderboard --prospective``
and ``theory check``. Bad input exits 2 with one stderr line and writes nothing."""

from __future__ import annotations

import json

import pytest

from agentmill.cli.main import main
from agentmill.core.ledger import Ledger
from agentmill.methods.autocog.scoring import prospective_scores

RUN = ["--n-designs", "4", "--max-candidates", "12", "--gt", "tallying", "--eps", "0.0"]


def _run(d, *extra: str) -> int:
    return main(["autocog", "run", "--run-dir", str(d), "--rounds", "1", *RUN, *extra])


def _one_line_err(capsys, needle: str) -> None:
    err = capsys.readouterr().err.strip()
    assert needle in err and "\n" not in err, err


@pytest.fixture(scope="module")
def two_round_run(tmp_path_factory):
    """A default (Welch) 2-round run: round-1 and round-2 revisions make post-admit and prospective scores differ."""
    d = tmp_path_factory.mktemp("lb") / "run"
    assert main(["autocog", "run", "--run-dir", str(d), "--rounds", "2", *RUN]) == 0
    return d


# -- run --gate ---------------------------------------------------------------------------------------------------

def test_default_gate_leaves_arguments_and_ledger_unchanged(tmp_path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    assert _run(a) == 0 and _run(b, "--gate", "welch") == 0
    assert (a / "cli_args.json").read_bytes() == (b / "cli_args.json").read_bytes()
    assert "gate" not in json.loads((a / "cli_args.json").read_text())
    la, lb = Ledger(a), Ledger(b)
    assert la.head == lb.head  # the hash chain covers every payload: same ledger up to timestamps
    assert "gate" not in la.get("config")["config"]
    assert la.get("r1/s1/gate")["kind"] == "welch"


@pytest.mark.parametrize("gate", ["power", "jsd_static", "jsd_sequence"])
def test_chosen_gate_is_ledgered_and_used(tmp_path, capsys, gate) -> None:
    d = tmp_path / gate
    assert _run(d, "--gate", gate) == 0
    assert "status done" in capsys.readouterr().out
    led = Ledger(d)
    assert led.get("config")["config"]["gate"] == gate
    assert json.loads((d / "cli_args.json").read_text())["gate"] == gate
    kinds = {led.get(f"r{r}/s{k}/gate")["kind"] for r in (1, 2) for k in (1, 2)}  # round 2 = validation round
    assert kinds == {gate}
    assert main(["autocog", "audit", str(d)]) == 0


def test_bad_gate_exits_2_and_writes_nothing(tmp_path, capsys) -> None:
    d = tmp_path / "x"
    assert _run(d, "--gate", "bayes") == 2
    _one_line_err(capsys, "--gate must be one of welch, power, jsd_static, jsd_sequence")
    assert not d.exists()


def test_resume_with_another_gate_is_refused(tmp_path, capsys) -> None:
    d = tmp_path / "run"
    assert _run(d) == 0
    before = (d / "ledger.jsonl").read_bytes(), (d / "state.json").read_bytes()
    capsys.readouterr()
    # the CLI layer: the run directory's recorded arguments name the gate
    assert _run(d, "--gate", "power") == 2
    _one_line_err(capsys, "different arguments (gate)")
    # the ledger layer: even with the recorded arguments rewritten, the ledgered config refuses the other gate
    args = json.loads((d / "cli_args.json").read_text())
    (d / "cli_args.json").write_text(json.dumps({**args, "gate": "power"}, sort_keys=True))
    assert main(["autocog", "resume", str(d)]) == 2
    _one_line_err(capsys, "config different from the ledgered one")
    assert ((d / "ledger.jsonl").read_bytes(), (d / "state.json").read_bytes()) == before


# -- leaderboard --prospective ------------------------------------------------------------------------------------

STATE = {
    "theories": {"t1": {"name": "ttb", "admitted_round": 0}, "t2": {"name": "wadd", "admitted_round": 0},
                 "t3": {"name": "late", "admitted_round": 2}},
    "leaderboard": [["t3", 1.0], ["t2", 0.25], ["t1", 0.0]],
    "raw_errors": {"t1": 0.4, "t2": 0.1, "t3": 0.05},
    "prospective": {"ttb": 0.0, "wadd": 0.5, "late": None},
}


def test_leaderboard_prospective_by_hand(tmp_path, capsys) -> None:
    (tmp_path / "state.json").write_text(json.dumps(STATE))
    assert main(["autocog", "leaderboard", str(tmp_path)]) == 0
    plain = capsys.readouterr().out.splitlines()
    assert plain == [" 1.000  late  (raw mean |p-r| 0.050)", " 0.250  wadd  (raw mean |p-r| 0.100)",
                     " 0.000  ttb  (raw mean |p-r| 0.400)"]  # unchanged without the flag
    assert main(["autocog", "leaderboard", str(tmp_path), "--prospective"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["score", "prospective", "theory"]
    rows = [line.split()[:3] for line in out[1:4]]
    assert rows == [["1.000", "—", "late"], ["0.250", "0.500", "wadd"], ["0.000", "0.000", "ttb"]]
    assert "admitted round 2" in out[1] and out[4].startswith("prospective:")


def test_leaderboard_prospective_missing_or_no_state(tmp_path, capsys) -> None:
    (tmp_path / "state.json").write_text(json.dumps({k: v for k, v in STATE.items() if k != "prospective"}))
    assert main(["autocog", "leaderboard", str(tmp_path), "--prospective"]) == 2
    _one_line_err(capsys, "no prospective scores")
    assert main(["autocog", "leaderboard", str(tmp_path / "none"), "--prospective"]) == 2


def test_leaderboard_prospective_matches_scoring_on_a_run(two_round_run, capsys) -> None:
    st = json.loads((two_round_run / "state.json").read_text())
    capsys.readouterr()
    assert main(["autocog", "leaderboard", str(two_round_run), "--prospective"]) == 0
    lines = capsys.readouterr().out.splitlines()[1:-1]
    assert len(lines) == len(st["leaderboard"]) >= 3
    rows = [(o["round"], o["real"], o["preds"]) for o in st["observations"]]
    expected = prospective_scores(rows, {t: v["admitted_round"] for t, v in st["theories"].items()})
    for line, (tid, score) in zip(lines, st["leaderboard"]):
        got = line.split()
        assert got[0] == f"{score:.3f}" and got[2] == st["theories"][tid]["name"]
        assert got[1] == ("—" if expected[tid] is None else f"{expected[tid]:.3f}")
    # a theory admitted in a revision round is scored in-sample post-admit, prospectively on later data only
    late = [t for t, v in st["theories"].items() if v["admitted_round"] > 0]
    assert late and any(expected[t] != dict(st["leaderboard"])[t] for t in late)


# -- theory check -------------------------------------------------------------------------------------------------

def _props(out: str) -> dict[str, str]:
    return {line.split()[0]: line.split()[1] for line in out.splitlines() if line.startswith("  ")}


def test_theory_check_library_rules(capsys) -> None:
    assert main(["autocog", "theory", "check", "--library", "ttb"]) == 0
    out = capsys.readouterr().out
    assert _props(out) == dict.fromkeys(("symmetric", "monotone", "lexicographic", "scale_invariant"), "holds")
    assert "declared properties: all hold" in out
    # WADD is not lexicographic: A = 0000 vs B = 1000 differ on the top cue first; raising A's cue 1 moves P(A)
    assert main(["autocog", "theory", "check", "--library", "wadd", "--rating-max", "1"]) == 0
    out = capsys.readouterr().out
    assert _props(out)["lexicographic"] == "FAILS"
    assert "counterexample A=[0, 0, 0, 0] B=[1, 0, 0, 0]" in out
    assert "holds (vacuously)" in out  # scale_invariant: no binary pair fits the doubled scale
    assert "declared properties: all hold" in out  # WADD does not declare lexicographic


def test_theory_check_files(tmp_path, capsys) -> None:
    y = tmp_path / "tally.yaml"
    y.write_text("factory: tallying\nproperties: [symmetric, lexicographic]\n")
    assert main(["autocog", "theory", "check", str(y), "--rating-max", "1"]) == 0
    out = capsys.readouterr().out
    assert _props(out)["symmetric"] == "holds" and _props(out)["lexicographic"] == "FAILS"
    assert "declared properties: FAIL lexicographic" in out
    j = tmp_path / "prog.json"  # a program theory as state.json records it
    j.write_text(json.dumps({"factory": "program", "transform": "identity", "weighting": "validity",
                             "comparison": "lexicographic", "ranges": {}, "policy": "sample"}))
    assert main(["autocog", "theory", "check", str(j), "--rating-max", "1"]) == 0
    assert _props(capsys.readouterr().out)["lexicographic"] == "holds"


def test_theory_check_code_theory_runs_in_the_sandbox(tmp_path, capsys) -> None:
    src = ("import numpy as np\ndef predict(params, stimulus, history):\n"
           "    p = 1.0 / (1.0 + np.exp(-float(np.sign(stimulus[0] - stimulus[1]).sum())))\n"
           "    return np.array([p, 1.0 - p])\n")
    f = tmp_path / "code.json"
    f.write_text(json.dumps({"factory": "code", "name": "tally-code", "prose": "count cues", "source": src,
                             "params": {}, "policy": "sample", "properties": ["monotone"]}))
    assert main(["autocog", "theory", "check", str(f), "--rating-max", "1"]) == 0
    out = capsys.readouterr().out
    assert _props(out) == {"symmetric": "holds", "monotone": "holds", "lexicographic": "FAILS",
                           "scale_invariant": "holds"}
    f.write_text(json.dumps({"factory": "code", "name": "bad", "prose": "", "params": {}, "policy": "sample",
                             "source": "import os\ndef predict(p, s, h):\n    return [0.5, 0.5]\n"}))
    assert main(["autocog", "theory", "check", str(f)]) == 2
    _one_line_err(capsys, "TheoryRejected")


@pytest.mark.parametrize("content,needle", [
    (None, "no such file"),
    ("factory: [", "not valid YAML"),
    ("- ttb\n", "needs a mapping with 'factory'"),
    ("factory: bogus\n", "unknown factory or missing field 'bogus'"),
    ("factory: ttb\nproperties: [convex]\n", "'properties' must be a list"),
    ("factory: ttb\noverrides: {gamma: 1.0}\n", "has no parameter 'gamma'"),
])
def test_theory_check_bad_file_exits_2(tmp_path, capsys, content, needle) -> None:
    f = tmp_path / "t.yaml"
    if content is not None:
        f.write_text(content)
    assert main(["autocog", "theory", "check", str(f)]) == 2
    _one_line_err(capsys, needle)
    assert not capsys.readouterr().out


def test_theory_check_bad_arguments_exit_2(tmp_path, capsys) -> None:
    assert main(["autocog", "theory", "check"]) == 2
    _one_line_err(capsys, "exactly one of FILE or --library")
    assert main(["autocog", "theory", "check", str(tmp_path / "t.yaml"), "--library", "ttb"]) == 2
    _one_line_err(capsys, "exactly one of FILE or --library")
    assert main(["autocog", "theory", "check", "--library", "nope"]) == 2
    _one_line_err(capsys, "not a built-in rule")
    assert main(["autocog", "theory", "check", "--library", "ttb", "--rating-max", "0"]) == 2
    _one_line_err(capsys, "--rating-max must be >= 1")
