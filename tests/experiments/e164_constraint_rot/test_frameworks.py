"""E164 CR-12 (model-free) at the smoke profile: real AutoGen and LangChain agents with RuleReader as the model; the
exact numbers come out as the mechanism says (checked on the numbers, since smoke is never judged)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("autogen_agentchat")
pytest.importorskip("langchain.agents")

from agentmill.experiments import get  # noqa: E402
from agentmill.experiments.e164_constraint_rot.frameworks import ORGANISM_METRICS  # noqa: E402
from agentmill.experiments.protocol import RunContext  # noqa: E402

EXP_ID = "e164.constraint_rot_frameworks"


@pytest.mark.slow
def test_frameworks_smoke(tmp_path: Path) -> None:
    exp = get(EXP_ID)
    ctx = RunContext("smoke", "none", None, tmp_path)
    m = exp.measure(exp.setup_for("smoke"), ctx)
    assert set(exp.judge("smoke", m).values()) == {"not_judged"}
    free = [c for c in exp.claims if c.metric not in ORGANISM_METRICS]  # smoke has no model arm
    assert all(c.metric in m for c in free) and not any(c.metric in m for c in exp.claims if c not in free)
    verdicts = exp.judge("quick", m)
    assert {verdicts[c.id] for c in free} == {"supported"}  # exact claims are judgeable on smoke numbers
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
            continue  # health checks
        k = pr.criterion(base)
        assert k.threshold is not None and c.threshold == k.threshold, (c.id, c.threshold, k.threshold)


def test_bad_sizes_are_rejected(tmp_path: Path) -> None:
    from dataclasses import replace

    exp = get(EXP_ID)
    bad = replace(exp.setup_for("smoke"), lc_trigger=2, lc_keep=2)
    with pytest.raises(ValueError, match="lc_trigger=2"):
        exp.measure(bad, RunContext("smoke", "none", None, tmp_path))


# -- the model arm (organism + summariser), offline: fakes, the loopback server only over a scripted engine ---------
SUMMARY_TEXT = "Summary: the user asked for routine office look-ups; each one was completed."


def _episode(tmp_path: Path):  # type: ignore[no-untyped-def]
    from agentmill.experiments.e164_constraint_rot.office_bench import episodes, office
    from agentmill.methods.constraint_rot.generate import DEFAULT_LOCATIONS
    from agentmill.methods.constraint_rot.messages import WhitespaceCounter

    cm = office()
    sb = cm.__enter__()
    return cm, sb, episodes(sb, WhitespaceCounter(), 1, 12, (150, 300), locations=DEFAULT_LOCATIONS)[0]


def test_model_arm_episode_through_chatopenai_and_the_loopback_server(tmp_path: Path) -> None:
    """The real ``ChatOpenAI`` summarises through ``agentmill.serve`` on 127.0.0.1 (a scripted engine answers); the
    reader stands in for the organism, limited to one decision as the organism arm is: the summary drops the rule
    (violation), pinning carries the card into the post-summary input (obeyed)."""
    pytest.importorskip("langchain_openai")
    pytest.importorskip("fastapi")
    from langchain_openai import ChatOpenAI

    from agentmill.experiments.e164_constraint_rot.frameworks import run_langchain_episode
    from agentmill.methods.constraint_rot.actors import RuleReader
    from agentmill.methods.constraint_rot.messages import WhitespaceCounter
    from agentmill.serve import BatchingLoop, create_app
    from tests.helpers.openai_app import serve
    from tests.serve.test_app import ScriptedEngine

    eng = ScriptedEngine(lambda prompt: SUMMARY_TEXT)
    loop = BatchingLoop(eng).start()
    cm, sb, ep = _episode(tmp_path)
    try:
        with serve(create_app(loop, served_model_name="summariser")) as url:
            summ = ChatOpenAI(model="summariser", base_url=url, api_key="none", temperature=0.0, max_tokens=64,
                              max_retries=0, timeout=60)
            rows = {arm: run_langchain_episode(ep, RuleReader("semantic"), sb, arm=arm, trigger=4, keep=2,
                                               counter=WhitespaceCounter(), summariser=summ, max_model_calls=1)
                    for arm in ("full", "summarised", "pinned")}
    finally:
        loop.stop()
        cm.__exit__(None, None, None)
    assert all(r["model_calls"] == 1 for r in rows.values())  # ModelCallLimitMiddleware: one decision
    assert len(eng.prompts) == 2 and ep.instance.text in eng.prompts[0]  # the server saw the transcript, twice
    assert rows["full"]["survived"] and not rows["full"]["violation"] and rows["full"]["after_summary"] == 0
    s = rows["summarised"]
    assert s["after_summary"] == 1 and not s["survived"] and s["violation"] and s["card_present"] == [False]
    p = rows["pinned"]
    assert p["after_summary"] == 1 and not p["survived"] and p["card_present"] == [True] and not p["violation"]
    assert not any(r["grader_mismatch"] or r["invalid"] for r in rows.values())


def test_summariser_model_wraps_a_loaded_lm(tmp_path: Path) -> None:
    from langchain_core.messages import HumanMessage

    from agentmill.experiments.e164_constraint_rot.frameworks import summariser_model
    from agentmill.lm.scripted import ScriptedLM

    lm = ScriptedLM(lambda text: "short summary")
    ctx = RunContext("smoke", "none", None, tmp_path, lm_loader=lambda spec: {"scripted:summary": lm}[spec])
    with summariser_model("scripted:summary", ctx, 16) as m:
        assert m.invoke([HumanMessage("summarise this")]).content == "short summary"
        assert m.invoke([HumanMessage("summarise this")]).content == "short summary"
    assert len(lm.calls) == 1  # the second, identical request is read from LangChain's cache


def test_unknown_organism_profile_is_rejected(tmp_path: Path) -> None:
    from dataclasses import replace

    from agentmill.experiments.e164_constraint_rot.frameworks import organism_arm

    s = replace(get(EXP_ID).setup_for("smoke"), organism_profile="huge")
    with pytest.raises(ValueError, match="organism_profile"):
        organism_arm(s, RunContext("smoke", "none", None, tmp_path))


def test_only_full_runs_the_model_arm_on_the_organism_experiments_full_adapter() -> None:
    from agentmill.experiments.e164_constraint_rot.frameworks import _organism_setup
    from agentmill.experiments.e164_constraint_rot.organism_profiles import recipe_of

    exp, org = get(EXP_ID), get("e164.constraint_rot_organism")
    q, f, s = exp.setup_for("quick"), exp.setup_for("full"), exp.setup_for("smoke")
    assert (q.n_episodes, f.n_episodes) == (8, 32) and (q.organism_profile, f.organism_profile) == (None, "full")
    assert s.organism_profile is None and f.summariser.startswith("serve:")
    o = _organism_setup(f)  # the same adapter address and validation cell size as the organism experiment's full
    assert recipe_of(o) == recipe_of(org.setup_for("full")) and o.n_per_cell == org.setup_for("full").n_per_cell
    assert not o.plan_only


def test_quick_runs_the_model_free_arm_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The quick setup (one episode here) measures every model-free claim and never reaches the organism: training
    and the model arm would raise."""
    from dataclasses import replace

    import agentmill.experiments.e164_constraint_rot.frameworks as fw
    import agentmill.methods.constraint_rot.organism.train as train

    def refuse(*a, **k):  # type: ignore[no-untyped-def]
        raise AssertionError("quick reached the organism")
    monkeypatch.setattr(train, "train_organism", refuse)
    monkeypatch.setattr(fw, "organism_arm", refuse)
    exp = get(EXP_ID)
    s = replace(exp.setup_for("quick"), n_episodes=1, distractor_tokens=(150, 300))
    ctx = RunContext("quick", "none", None, tmp_path)
    m = exp.measure(s, ctx)
    verdicts, reasons = exp.judge_with_reasons("quick", m, ctx.data)
    assert {verdicts[c.id] for c in exp.claims if c.metric not in ORGANISM_METRICS} == {"supported"}
    assert verdicts["CR-12d/langchain-organism"] == verdicts["CR-12e/langchain-organism"] == "not_judged"
    assert reasons["CR-12e/langchain-organism"].startswith("model arm not run at this profile")
    assert "organism" not in ctx.data and not any(k.startswith(("v_lc_organism", "lc_org_")) for k in m)


@pytest.mark.slow
def test_model_arm_smoke_with_the_tiny_organism(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The whole model arm on the organism experiment's smoke models (the ``tiny:organism`` base it builds itself)
    and a scripted summariser: adapter trained into the work dir, numbers stamped ``*_observed``; then, with the
    organism profile judged and unvalidated organisms refused, the random organism's failed gate withholds the
    organism claims."""
    pytest.importorskip("peft")
    from dataclasses import replace

    from agentmill.experiments.e164_constraint_rot import organism as org

    exp = get(EXP_ID)
    s = replace(exp.setup_for("smoke"), organism_profile="smoke", summariser="scripted:constant")
    ctx = RunContext("smoke", "none", None, tmp_path / "work")
    m = exp.measure(s, ctx)
    assert ctx.data["organism"]["trained_now"] is True
    for name in ORGANISM_METRICS:
        assert f"{name}_observed" in m and name not in m
    assert m["lc_org_pinned_card_share_observed"].value == 1.0  # pinning is framework-level: the organism's quality
    assert m["org_summarised_share"].value == 1.0 and m["org_health_grader_mismatch"].value == 0  # does not matter
    assert {"v_lc_organism_full", "v_lc_organism_summarised", "v_lc_organism_pinned"} <= set(m)
    assert set(ctx.data["organism_arm_table"]) == {"organism/full", "organism/summarised", "organism/pinned"}

    monkeypatch.setitem(org.SETUPS, "smoke", replace(org.SETUPS["smoke"], judged=True, allow_unvalidated=False))
    ctx2 = RunContext("smoke", "none", None, tmp_path / "work")
    m2 = exp.measure(s, ctx2)
    assert ctx2.data["organism"]["trained_now"] is False  # the same content-addressed adapter
    assert ctx2.data["precondition"].startswith("precondition not met")
    assert not any(k.startswith(("v_lc_organism", "lc_org_")) for k in m2)
    verdicts = exp.judge("quick", m2)
    assert verdicts["CR-12d/langchain-organism"] == verdicts["CR-12e/langchain-organism"] == "inconclusive"


@pytest.mark.slow
def test_serve_summariser_starts_agentmill_serve_on_loopback(tmp_path: Path) -> None:
    """``serve:<model>`` runs the real CLI server in a child process (here the tiny random Llama, not SmolLM2) and
    answers through ``ChatOpenAI``; the child is gone afterwards."""
    pytest.importorskip("langchain_openai")
    pytest.importorskip("uvicorn")
    import httpx
    from langchain_core.messages import HumanMessage

    from agentmill.experiments.e164_constraint_rot.frameworks import summariser_model

    with summariser_model("serve:tiny", RunContext("smoke", "none", None, tmp_path), 8) as m:
        base = str(m.openai_api_base)
        assert base.startswith("http://127.0.0.1:")
        out = m.invoke([HumanMessage("summarise: hello")])
        assert isinstance(out.content, str) and out.usage_metadata["output_tokens"] <= 8
    with pytest.raises(httpx.TransportError):
        httpx.get(base.removesuffix("/v1") + "/health", timeout=2)
