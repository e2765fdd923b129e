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
