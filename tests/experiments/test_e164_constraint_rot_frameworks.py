"""E164 CR-12 (model-free) at the smoke profile: real AutoGen and LangChain agents with RuleReader as the model; the
exact numbers come out as the mechanism says (checked on the numbers, since smoke is never judged)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("autogen_agentchat")
pytest.importorskip("langchain.agents")

from agentmill.experiments import get  # noqa: E402
from agentmill.experiments.protocol import RunContext  # noqa: E402

EXP_ID = "e164.constraint_rot_frameworks"


@pytest.mark.slow
def test_frameworks_smoke(tmp_path: Path) -> None:
    exp = get(EXP_ID)
    ctx = RunContext("smoke", "none", None, tmp_path)
    m = exp.measure(exp.setup_for("smoke"), ctx)
    assert set(exp.judge("smoke", m).values()) == {"not_judged"}
    assert all(c.metric in m for c in exp.claims)
    assert set(exp.judge("quick", m).values()) == {"supported"}  # exact claims are judgeable on smoke numbers
    t = ctx.data["arm_table"]
    # the buffer and the summariser really evicted the rule, and the reader then violated
    for arm in ("autogen/buffered", "langchain/summarised"):
        assert t[arm]["violation"] == 1.0 and t[arm]["survival"] == 0.0 and t[arm]["model_calls"] >= 2
    # pinning: the rule text is still gone, the card carries it into every model input, the reader obeys
    for arm in ("autogen/pinned", "langchain/pinned"):
        assert t[arm]["survival"] == 0.0 and t[arm]["card_presence"] == 1.0 and t[arm]["violation"] == 0.0
    # controls: full context and the head+tail with the policy turn in the head keep and obey the rule
    for arm in ("autogen/full", "autogen/head_tail", "langchain/full"):
        assert t[arm]["survival"] == 1.0 and t[arm]["violation"] == 0.0
    assert m["lc_pinned_card_share"].n >= 2  # model inputs after summarisation were actually counted
    assert ctx.data["rule_distance"]["min"] > exp.setup_for("smoke").buffer_size
    assert len(exp.plots(ctx.data, tmp_path)) == 1


def test_claims_come_from_prereg() -> None:
    from agentmill.methods.constraint_rot.prereg import load_prereg

    pr = load_prereg()
    for c in get(EXP_ID).claims:
        base = c.id.split("/")[0]
        if base.startswith("H-"):
            continue  # health (spec §2.3)
        k = pr.criterion(base)
        assert k.threshold is not None and c.threshold == k.threshold, (c.id, c.threshold, k.threshold)


def test_bad_sizes_are_rejected(tmp_path: Path) -> None:
    from dataclasses import replace

    exp = get(EXP_ID)
    bad = replace(exp.setup_for("smoke"), lc_trigger=2, lc_keep=2)
    with pytest.raises(ValueError, match="lc_trigger=2"):
        exp.measure(bad, RunContext("smoke", "none", None, tmp_path))
