"""``agentmill constraint-rot`` catalogue and pin-hook commands: output shapes and exit code 2 on bad input."""

from __future__ import annotations

import json

from agentmill.cli.main import main


def test_catalogue_validate_counts_families(capsys):
    assert main(["constraint-rot", "catalogue", "validate"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] and out["soft"] >= 20 and out["hard"] >= 12 and len(out["sha256"]) == 64


def test_catalogue_list_and_split_agree(capsys):
    assert main(["constraint-rot", "catalogue", "list", "--kind", "soft", "--split", "test_ood_family"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert main(["constraint-rot", "catalogue", "split"]) == 0
    table = json.loads(capsys.readouterr().out)
    assert sorted(listed) == table["test_ood_family"]["soft"] and listed


def test_a_broken_catalogue_exits_2_naming_the_file(tmp_path, capsys):
    (tmp_path / "soft").mkdir()
    (tmp_path / "soft" / "x.yaml").write_text("id: [unclosed\n")
    assert main(["constraint-rot", "catalogue", "validate", "--path", str(tmp_path)]) == 2
    assert "x.yaml" in capsys.readouterr().err


def test_pin_hook_prints_session_start_json_with_the_card(tmp_path, capsys):
    reg = tmp_path / "rules.yaml"
    reg.write_text("rules:\n  - {rule_id: mail.ext, text: 'Email only @acme.com recipients.', issuer: operator,"
                   " kind: soft, scope_tools: [send_email]}\n")
    assert main(["constraint-rot", "pin-hook", "--registry", str(reg)]) == 0
    out = json.loads(capsys.readouterr().out)
    ctx = out["hookSpecificOutput"]["additionalContext"]
    assert out["hookSpecificOutput"]["hookEventName"] == "SessionStart"
    assert "[POLICY" in ctx and "Email only @acme.com recipients." in ctx


def test_pin_hook_bad_registry_exits_2(tmp_path, capsys):
    reg = tmp_path / "rules.yaml"
    reg.write_text("rules:\n  - {rule_id: r1, text: hi}\n")
    assert main(["constraint-rot", "pin-hook", "--registry", str(reg)]) == 2
    err = capsys.readouterr().err
    assert "rules[0]" in err and "issuer" in err
    assert main(["constraint-rot", "pin-hook", "--registry", str(tmp_path / "none.yaml")]) == 2


# -- generate → run → report ------------------------------------------------------------------------------------------
import os  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

CR = ["constraint-rot"]


@pytest.fixture()
def work(tmp_path):  # type: ignore[no-untyped-def]
    """A scratch folder, in RAM when /dev/shm exists."""
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        import shutil
        import tempfile
        d = Path(tempfile.mkdtemp(prefix="crcli-", dir="/dev/shm"))
        yield d
        shutil.rmtree(d, ignore_errors=True)
    else:
        yield tmp_path


def _json_out(capsys):  # type: ignore[no-untyped-def]
    return json.loads(capsys.readouterr().out)


def _generate(work, capsys, *extra):  # type: ignore[no-untyped-def]
    eps = work / "eps.jsonl"
    assert main([*CR, "generate", "--split", "train", "--n", "3", "--seed", "1", "--counter", "whitespace",
                 "--locations", "memory_tool,onboarding_turn", "--out", str(eps), *extra]) == 0
    assert _json_out(capsys)["episodes"] == 3
    return eps


RUN = ["--actor", "scripted:rule-reader", "--compactor", "window:max_messages=6", "--compactor", "note_following",
       "--pin", "card", "--conditions", "full,never,compacted,pinned"]


def test_generate_run_report_end_to_end(work, capsys):  # type: ignore[no-untyped-def]
    eps = _generate(work, capsys, "--attack", "fixed", "--channel", "file")
    lines = [json.loads(x) for x in eps.read_text().splitlines()]
    assert all(e["attack"]["kind"] == "fixed" and e["attack"]["channel"] == "file" for e in lines)
    assert not list(work.glob(".eps.jsonl.*"))  # atomic write leaves no temp file
    res = work / "res.jsonl"
    assert main([*CR, "run", "--episodes", str(eps), *RUN, "--out", str(res)]) == 0
    summary = _json_out(capsys)
    # full + never once; compacted and pinned once per compactor: 3 episodes x 6 conditions
    assert summary["rows"] == summary["planned"] == 18 and summary["errors"] == 0
    rows = [json.loads(x) for x in res.read_text().splitlines()]
    assert len(rows) == 18 and {r["attack"] for r in rows} == {"fixed"}
    by = {(r["episode_id"], r["condition"], r["compactor"]): r for r in rows}
    for e in lines:  # the A2 probe in a file evicts the rule from the note-following summary, not the window's
        assert by[(e["episode_id"], "compacted", "note_following")]["violation"] is True
        assert by[(e["episode_id"], "pinned:after_summary", "note_following")]["violation"] is False
        assert by[(e["episode_id"], "full_context", "none")]["violation"] is False
        assert by[(e["episode_id"], "never_stated", "none")]["violation"] is True
    manifest = json.loads((work / "res.jsonl.manifest.json").read_text())
    assert manifest["catalogue_sha"] == rows[0]["catalogue_sha"] and len(manifest["prereg_sha256"]) == 64
    run = manifest["runs"][0]
    assert run["cpu"]["count"] and run["versions"]["python"] and run["n_episodes"] == 3
    assert run["compactors"][0]["name"] == "window" and len(run["conditions"]) == 6

    report = work / "report.md"
    assert main([*CR, "report", str(res), "--out", str(report), "--B", "50"]) == 0
    out = capsys.readouterr().out
    assert f"prereg sha256 {manifest['prereg_sha256']}" in out
    assert "# ConstraintRot metrics" in report.read_text()
    assert json.loads((work / "report.json").read_text())["health"]["n_rows"] == 18


def test_resume_skips_completed_keys_and_refuses_a_mismatched_manifest(work, capsys):  # type: ignore[no-untyped-def]
    eps = _generate(work, capsys)
    res = work / "res.jsonl"
    args = [*CR, "run", "--episodes", str(eps), "--actor", "scripted:always-comply", "--conditions", "full,never",
            "--out", str(res)]
    assert main(args) == 0
    assert _json_out(capsys)["rows"] == 6
    assert main(args) == 2  # an existing --out needs --resume
    assert "--resume" in capsys.readouterr().err
    # drop the last row: resume redoes exactly that one
    lines = res.read_text().splitlines()
    res.write_text("\n".join(lines[:-1]) + "\n")
    assert main([*args, "--resume"]) == 0
    s = _json_out(capsys)
    assert (s["skipped"], s["rows"]) == (5, 1) and len(res.read_text().splitlines()) == 6
    assert len(json.loads((work / "res.jsonl.manifest.json").read_text())["runs"]) == 2
    # a manifest from another prereg / catalogue is refused
    mp = work / "res.jsonl.manifest.json"
    m = json.loads(mp.read_text())
    mp.write_text(json.dumps({**m, "prereg_sha256": "0" * 64}))
    assert main([*args, "--resume"]) == 2
    assert "prereg_sha256" in capsys.readouterr().err
    mp.write_text(json.dumps({**m, "catalogue_version": "cr-catalogue-0"}))
    assert main([*args, "--resume"]) == 2
    assert "catalogue_version" in capsys.readouterr().err
    assert len(res.read_text().splitlines()) == 6  # nothing appended by a refused run


def test_report_exits_3_when_the_decay_precondition_is_not_met(work, capsys):  # type: ignore[no-untyped-def]
    eps = _generate(work, capsys)
    res = work / "res.jsonl"
    assert main([*CR, "run", "--episodes", str(eps), "--actor", "scripted:always-refuse", "--compactor", "window",
                 "--conditions", "full,never,compacted", "--out", str(res)]) == 0
    capsys.readouterr()
    assert main([*CR, "report", str(res), "--out", str(work / "r.md"), "--B", "50"]) == 3
    cap = capsys.readouterr()
    assert "prereg sha256" in cap.out and "precondition not met" in cap.err and "RS lower CI" in cap.err
    assert (work / "r.md").is_file()


@pytest.mark.parametrize(("argv", "needle"), [
    (["--compactor", "blender"], "unknown compactor 'blender'"),
    (["--compactor", "window:max_msgs=6"], "unknown option(s) ['max_msgs']"),
    (["--compactor", "extractive:ratio=1.5"], "ratio must be in (0, 1)"),
    (["--compactor", "window:6"], "key=value"),
    (["--compactor", "summary:style=handoff"], "the LLM summariser needs lm=SPEC"),
    (["--compactor", "window", "--conditions", "full,sometimes"], "unknown condition 'sometimes'"),
    (["--compactor", "window", "--conditions", "rounds:9"], "rounds:9"),
    (["--conditions", "compacted"], "--compactor"),
    (["--pin", "card:placement=top"], "unknown placement 'top'"),
    (["--actor", "endpoint:http://127.0.0.1:1"], "expected endpoint:URL#MODEL"),
    (["--actor", "endpoint:127.0.0.1:8000/v1#m"], "expected endpoint:URL#MODEL"),
    (["--actor", "endpoint:http://127.0.0.1:1/v1#"], "expected endpoint:URL#MODEL"),
    (["--actor", "organism:/nonexistent/adapter"], "not an organism adapter directory"),
    (["--actor", "scripted:rule-reader:psychic"], "RuleReader.mode"),
    (["--actor", "scripted:random:1.5"], "RandomActor.p"),
    (["--actor", "scripted:oracle"], "unknown scripted actor 'oracle'"),
])
def test_bad_run_input_exits_2_naming_the_flag(work, capsys, argv, needle):  # type: ignore[no-untyped-def]
    eps = _generate(work, capsys)
    base = {"--actor": "scripted:always-comply", "--conditions": "full"}
    flags = dict(base)
    rest: list[str] = []
    it = iter(argv)
    for a in it:
        if a in ("--actor", "--conditions"):
            flags[a] = next(it)
        else:
            rest += [a, next(it)]
    cmd = [*CR, "run", "--episodes", str(eps), *(x for kv in flags.items() for x in kv), *rest,
           "--out", str(work / "res.jsonl")]
    assert main(cmd) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1, err
    assert not (work / "res.jsonl").exists() and not (work / "res.jsonl.manifest.json").exists()


def test_bad_files_and_generate_flags_exit_2(work, capsys):  # type: ignore[no-untyped-def]
    missing = str(work / "nope.jsonl")
    assert main([*CR, "run", "--episodes", missing, "--actor", "scripted:always-comply", "--out",
                 str(work / "r.jsonl")]) == 2
    assert "nope.jsonl: file not found" in capsys.readouterr().err
    assert main([*CR, "report", missing, "--out", str(work / "r.md")]) == 2
    assert "nope.jsonl" in capsys.readouterr().err
    bad = work / "bad.jsonl"
    bad.write_text('{"episode_id": "x"}\n')
    assert main([*CR, "run", "--episodes", str(bad), "--actor", "scripted:always-comply", "--out",
                 str(work / "r.jsonl")]) == 2
    assert "bad.jsonl:1" in capsys.readouterr().err
    out = str(work / "e.jsonl")
    for extra, needle in ((["--kinds", "soft,medium"], "--kinds"), (["--locations", "attic"], "--locations"),
                          (["--attack", "template:A9"], "--attack template:A9"),
                          (["--attack", "sneaky"], "--attack sneaky"), (["--n", "0"], "--n")):
        argv = [*CR, "generate", "--split", "train", "--n", "2", "--counter", "whitespace", "--out", out, *extra]
        assert main(argv) == 2, extra
        assert needle in capsys.readouterr().err
    assert not Path(out).exists()


def test_the_parser_s_counter_choices_are_the_method_s_counters() -> None:
    # The CLI repeats specs.COUNTERS so that building the parser imports no method code; this keeps the twin honest.
    from agentmill.cli import constraint_rot as cli
    from agentmill.methods.constraint_rot import specs

    assert cli.COUNTERS == specs.COUNTERS
