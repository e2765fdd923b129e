"""``agentmill probe organism`` on a SmolLM2 organism's adapter directory (no SmolLM2 load)."""

from __future__ import annotations

import json

from agentmill.cli.main import main


def test_show_reads_a_smollm2_card_and_train_needs_out_for_tiny(tmp_path, capsys) -> None:
    from agentmill.methods.first_token_probe.organism_smollm2 import CARD_FILE

    (tmp_path / CARD_FILE).write_text(json.dumps({"name": "smollm2-refusal-locked", "validated": False,
                                                  "gates": {"R2": 0.5}, "losses": [1.0, 0.5]}))
    assert main(["probe", "organism", "show", "--organism", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert '"R2": 0.5' in out and "losses" not in out
    assert main(["probe", "organism", "train", "--variant", "locked"]) == 2  # tiny base without --out
