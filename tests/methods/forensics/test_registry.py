"""The hypothesis registry: hash chain, freezing, post-hoc flags; tampering and post-data edits are refused."""

from __future__ import annotations

import json

import pytest

from agentmill.methods.forensics import Hypothesis, HypothesisRegistry, RegistryError
from agentmill.methods.forensics.hypotheses import PostDataEditError, Prediction, UnfrozenHypothesisError
from agentmill.methods.forensics.variables import Intervention


def _h(hid: str = "H1", var: str = "actor") -> Hypothesis:
    return Hypothesis(hid, "s", "malign", "self_consistency", (var,), (Prediction(var, "developer", -1),),
                      Intervention("appeal", "asks_to_report"))


def test_add_freeze_reopen(tmp_path) -> None:
    reg = HypothesisRegistry(tmp_path)
    sha = reg.add(_h())
    assert not reg.is_frozen("H1")
    reg.freeze("H1")
    assert reg.is_frozen("H1") and reg.get("H1").sha256 == sha
    again = HypothesisRegistry(tmp_path)
    assert again.is_frozen("H1") and again.ledger.head == reg.ledger.head
    with pytest.raises(RegistryError, match="already registered"):
        reg.add(_h())


def test_arms_need_a_frozen_latest_version(tmp_path) -> None:
    reg = HypothesisRegistry(tmp_path)
    reg.add(_h())
    with pytest.raises(UnfrozenHypothesisError):
        reg.record_rollouts("arm", ["actor"], ["H1"])
    reg.freeze("H1")
    reg.revise("H1", statement="sharper")  # a revision before data un-freezes
    assert not reg.is_frozen("H1")
    with pytest.raises(UnfrozenHypothesisError):
        reg.record_rollouts("arm", ["actor"], ["H1"])


def test_a_revision_after_data_is_refused_and_a_forged_one_fails_verify(tmp_path) -> None:
    reg = HypothesisRegistry(tmp_path)
    reg.add(_h())
    reg.freeze("H1")
    reg.record_rollouts("control", [], ["H1"])
    with pytest.raises(PostDataEditError, match="registry line 3"):
        reg.revise("H1", statement="fitted to the results")
    # bypass the API: append a validly chained revision after the data event
    body = {"hypothesis": {**_h().to_dict(), "statement": "forged"}, "version": 2, "parent": None,
            "registered_at": "x"}
    body["sha256"] = Hypothesis.from_dict(body["hypothesis"]).sha256
    reg.ledger.append("register", "register:H1:v2", body)
    with pytest.raises(PostDataEditError, match="line 4: hypothesis H1 revised after its data were seen"):
        HypothesisRegistry(tmp_path)


def test_a_tampered_line_is_refused_naming_it(tmp_path) -> None:
    reg = HypothesisRegistry(tmp_path)
    reg.add(_h("H1"))
    reg.add(_h("H2"))
    path = tmp_path / "ledger.jsonl"
    lines = path.read_text().splitlines()
    ev = json.loads(lines[1])
    ev["payload"]["hypothesis"]["predictions"][0]["direction"] = 1
    lines[1] = json.dumps(ev, sort_keys=True)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(RegistryError, match="line 2 does not verify"):
        HypothesisRegistry(tmp_path)


def test_post_hoc_flag(tmp_path) -> None:
    reg = HypothesisRegistry(tmp_path)
    reg.add(_h("H1"))
    reg.freeze("H1")
    reg.record_rollouts("arm", ["actor"], ["H1"])
    reg.add(_h("H2", "actor"))  # registered after data on its variable
    reg.add(_h("H3", "motive"))
    assert not reg.post_hoc("H1") and reg.post_hoc("H2") and not reg.post_hoc("H3")


def test_a_hypothesis_needs_a_variable() -> None:
    with pytest.raises(ValueError, match="names no declared variable"):
        Hypothesis("H", "s", "benign", "m", (), (Prediction("x", 1, 1),), None)
