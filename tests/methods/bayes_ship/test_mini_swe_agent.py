"""The mini-swe-agent adapter: the contract with the installed mini-swe-agent, and the real ``DefaultAgent`` loop
driven by mini-swe-agent's own ``DeterministicModel`` in a ``LocalEnvironment`` over a temp repository, with
critics and the verifier run as shell commands in the sandbox. Without the ``agents`` extra these tests fail with
the install line (they are not skipped: the contract must be checked wherever the tests run).

The worked decisions (greedy controller; R = 100, c_gen = 5, c_ver = 30 so θ = 0.3; prior b0 = 0.5, IID kernel so a
refined candidate starts again at 0.5; critic ``tests`` p1 = 0.9, p0 = 0.1, cost 2; critic ``syntax`` p1 = 0.99,
p0 = 0.9, cost 1), by hand:

- b = 0.5: Q_verify = 100·0.5 − 30 = 20; Q_generate = −5 + 100·0.5 − 30 = 15; Q_give_up = 0;
  Q_tests = −2 + P(pass)·max(100·b⁺ − 30, 0) + P(fail)·max(100·b⁻ − 30, 0) with P(pass) = 0.9·0.5 + 0.1·0.5 = 0.5,
  b⁺ = 0.45/0.5 = 0.9, b⁻ = 0.05/0.5 = 0.1: −2 + 0.5·60 + 0 = 28;
  Q_syntax: P(pass) = 0.99·0.5 + 0.9·0.5 = 0.945, b⁺ = 0.495/0.945 = 0.5238, b⁻ = 0.005/0.055 = 0.0909:
  −1 + 0.945·22.38 + 0 = 20.15. Best: the ``tests`` critic (28).
- tests FAIL → b = 0.1: Q_verify = −20, Q_generate = 15, Q_give_up = 0, Q_syntax = −1 + 0.909·max(100·0.1089 − 30,
  0) + … = −1. Best: generate — the submission is held back and a refine message goes into the loop.
- tests PASS → b = 0.9: Q_verify = 60, Q_generate = 15, Q_syntax: P(pass) = 0.981, b⁺ = 0.891/0.981 = 0.9083,
  b⁻ = 0.009/0.019 = 0.4737: −1 + 0.981·60.83 + 0.019·17.37 = 59.0 < 60. Best: verify.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentmill.methods.bayes_ship import Calibration, CostModel, CriticModel, Kernel

SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && cat calc.py"
BUGGY = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"
OVERFIT = "def add(a, b):\n    return 5\n"  # passes the visible test, fails the verifier's hidden check


@pytest.fixture(scope="module")
def msa(tmp_path_factory):
    """mini-swe-agent imported with its global config dir in a temp dir (its import creates that dir)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MSWEA_GLOBAL_CONFIG_DIR", str(tmp_path_factory.mktemp("mswea_config")))
        mp.setenv("MSWEA_SILENT_STARTUP", "1")
        from agentmill.methods.bayes_ship import mini_swe_agent

        mini_swe_agent.agent_class()
        yield mini_swe_agent


def _control(m, **kw):
    calib = Calibration(0.5, 0, {"tests": CriticModel("tests", 0.9, 0.1), "syntax": CriticModel("syntax", 0.99, 0.9)},
                        Kernel.iid(0.5))
    critics = (m.ShellCheck("syntax", "python -m py_compile calc.py", cost=1.0, wall_s=30),
               m.ShellCheck("tests", "python -m pytest -q -p no:cacheprovider test_calc.py", cost=2.0, wall_s=60))
    # the verifier: the visible test's check plus a hidden one (plain python: a second pytest start would cost ~1 s)
    verifier = m.ShellCheck("verify", "python -c 'from calc import add; assert add(2, 3) == 5 and add(-2, 2) == 0'",
                            cost=30.0, wall_s=60)
    return m.ShipControl(critics, verifier, calib, CostModel(R=100, c_gen=5, c_ver=30), **kw)


def _repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    root.mkdir()
    (root / "calc.py").write_text("def add(a, b):\n    raise NotImplementedError\n")
    (root / "test_calc.py").write_text("from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n")
    return root


def _write(text: str) -> str:
    return f"cat > calc.py <<'EOF'\n{text}EOF"


def _agent(m, root: Path, commands: list[str], **control_kw):
    from minisweagent.environments.local import LocalEnvironment
    from minisweagent.models.test_models import DeterministicModel, make_output

    outputs = [make_output(f"step {i}\n```mswea_bash_command\n{c}\n```", [{"command": c}], cost=0.0)
               for i, c in enumerate(commands)]
    model = DeterministicModel(outputs=outputs)
    env = LocalEnvironment(cwd=str(root), timeout=30)
    agent = m.agent_class()(model, env, control=_control(m, **control_kw), system_template="You fix bugs.",
                            instance_template="{{task}}", step_limit=10, cost_limit=0)
    return agent, model


# -- the contract -----------------------------------------------------------------------------------------------------
def test_every_hooked_name_exists_in_the_installed_mini_swe_agent(msa) -> None:
    import minisweagent

    missing = msa.check_contract()
    assert missing == [], f"mini-swe-agent internals changed: {missing[0]}"
    assert minisweagent.__version__.startswith(msa.TESTED_VERSIONS + "."), minisweagent.__version__


def test_a_missing_hooked_name_fails_with_its_name(msa, monkeypatch) -> None:
    from minisweagent.agents.default import DefaultAgent

    monkeypatch.delattr(DefaultAgent, "execute_actions")
    assert msa.check_contract() == ["minisweagent.agents.default.DefaultAgent.execute_actions"]
    with pytest.raises(RuntimeError, match="mini-swe-agent internals changed: "
                                           "minisweagent.agents.default.DefaultAgent.execute_actions"):
        msa.require_contract()


def test_a_changed_signature_is_a_contract_break(msa, monkeypatch) -> None:
    from minisweagent.agents.default import DefaultAgent

    monkeypatch.setattr(DefaultAgent, "execute_actions", lambda self, msg, extra: [])
    assert msa.check_contract() == ["minisweagent.agents.default.DefaultAgent.execute_actions(self, message)"]


def test_the_submission_hook_is_where_the_adapter_expects_it(msa, tmp_path) -> None:
    """LocalEnvironment raises Submitted with the text after the sentinel line as ``extra["submission"]``."""
    from minisweagent.environments.local import LocalEnvironment
    from minisweagent.exceptions import Submitted

    with pytest.raises(Submitted) as ei:
        LocalEnvironment(cwd=str(tmp_path)).execute({"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT; echo hi"})
    (msg,) = ei.value.messages
    assert msg["role"] == "exit" and msg["extra"] == {"exit_status": "Submitted", "submission": "hi\n"}


# -- checks in the sandbox ---------------------------------------------------------------------------------------------
def test_a_check_runs_on_a_copy_and_cannot_change_the_workdir(msa, tmp_path) -> None:
    root = _repo(tmp_path)
    out = msa.run_check(msa.ShellCheck("t", "echo changed > calc.py && cat calc.py && exit 3", 0.0, 30), root)
    assert not out.passed and out.returncode == 3 and "changed" in out.output_tail
    assert (root / "calc.py").read_text().startswith("def add")  # the agent's tree is untouched
    ok = msa.run_check(msa.ShellCheck("t", "test -f test_calc.py && test ! -e .git", 0.0, 30), root)
    assert ok.passed and ok.isolation in ("bwrap", "none")


def test_a_check_that_runs_forever_is_killed_and_fails(msa, tmp_path) -> None:
    out = msa.run_check(msa.ShellCheck("slow", "sleep 30", 0.0, wall_s=1.0), _repo(tmp_path))
    assert not out.passed and out.timed_out and out.wall_s < 10


def test_control_must_match_the_calibration(msa) -> None:
    c = _control(msa)
    with pytest.raises(ValueError, match="differ from the calibration"):
        msa.ShipControl(c.critics[:1], c.verifier, c.calib)
    assert dict(c.cost_model.critic_costs) == {"syntax": 1.0, "tests": 2.0} and c.cost_model.c_ver == 30.0


# -- the real loop, end to end -----------------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_failing_patch_gets_a_refine_message_then_the_fixed_patch_ships(msa, tmp_path) -> None:
    root = _repo(tmp_path)
    agent, model = _agent(msa, root, [_write(BUGGY), SUBMIT, _write(FIXED), SUBMIT])
    info = agent.run("Make add() add.")
    assert model.current_index == 3  # all four scripted steps were used, none more
    assert info["exit_status"] == "Submitted" and info["submission"] == FIXED
    s = info["bayes_ship"]
    assert msa.decision_sequence(s) == ["1:critic:tests", "1:generate", "2:critic:tests", "2:verify"]
    assert s["outcome"] == "verified_correct" and s["candidates"] == 2
    assert s["actions"] == ["generate", "critic:tests", "generate", "critic:tests", "verify"]
    # beliefs by hand: 0.5 → fail → 0.1 → refine (IID kernel) → 0.5 → pass → 0.9
    assert s["beliefs"] == pytest.approx([0.5, 0.1, 0.5, 0.9], abs=1e-9)
    assert s["utility"] == pytest.approx(100 - 5 - 2 - 5 - 2 - 30)
    q = [e["q"] for e in s["log"] if e["event"] == "decision"]
    assert q[0]["critic:tests"] == pytest.approx(28.0) and q[0]["verify"] == pytest.approx(20.0)
    assert q[0]["critic:syntax"] == pytest.approx(-1 + 0.945 * (100 * 0.495 / 0.945 - 30))
    assert q[1]["generate"] == pytest.approx(15.0) and q[1]["verify"] == pytest.approx(-20.0)
    assert q[3]["verify"] == pytest.approx(60.0) and q[3]["critic:syntax"] < 60.0
    # the refine message is the observation of the submitting command, and names the failed critic
    refine = [m for m in agent.messages if m.get("extra", {}).get("bayes_ship", {}).get("decision") == "refine"]
    assert len(refine) == 1 and refine[0]["role"] == "user"
    assert msa.REFINE_HEADER in refine[0]["content"] and "tests: FAILED (exit 1)" in refine[0]["content"]
    assert "assert -1 == 5" in refine[0]["content"]  # pytest's own failure output reaches the agent
    assert agent.messages[-1]["role"] == "exit"
    json.dumps(agent.serialize())  # the trajectory (with the episode) stays JSON


def test_a_passing_patch_ships_after_one_critic_and_the_verifier(msa, tmp_path) -> None:
    root = _repo(tmp_path)
    agent, model = _agent(msa, root, [_write(FIXED), SUBMIT])
    info = agent.run("Make add() add.")
    assert info["exit_status"] == "Submitted" and info["submission"] == FIXED
    assert msa.decision_sequence(info["bayes_ship"]) == ["1:critic:tests", "1:verify"]
    assert info["bayes_ship"]["utility"] == pytest.approx(100 - 5 - 2 - 30)
    assert not any("bayes_ship" in m.get("extra", {}) and m["role"] == "user" for m in agent.messages)


def test_a_patch_that_fools_the_critic_is_stopped_by_the_verifier(msa, tmp_path) -> None:
    root = _repo(tmp_path)
    agent, _ = _agent(msa, root, [_write(OVERFIT), SUBMIT])
    info = agent.run("Make add() add.")
    assert info["exit_status"] == msa.EXIT_VERIFIED_WRONG and info["submission"] == ""
    assert info["held_submission"] == OVERFIT
    assert msa.decision_sequence(info["bayes_ship"]) == ["1:critic:tests", "1:verify"]
    assert info["bayes_ship"]["outcome"] == "verified_wrong"


def test_with_one_candidate_left_a_failing_patch_is_abandoned_not_shipped(msa, tmp_path) -> None:
    """J = 1: no refine is possible; after the failed critic (b = 0.1 < θ) giving up (0) beats verifying (−20)."""
    from agentmill.methods.bayes_ship import BayesShipConfig

    root = _repo(tmp_path)
    agent, _ = _agent(msa, root, [_write(BUGGY), SUBMIT], cfg=BayesShipConfig(max_candidates=1))
    info = agent.run("Make add() add.")
    assert info["exit_status"] == msa.EXIT_GAVE_UP and info["submission"] == ""
    assert msa.decision_sequence(info["bayes_ship"]) == ["1:critic:tests", "1:give_up"]


def test_without_the_extra_the_error_names_the_install_line(monkeypatch) -> None:
    import builtins

    from agentmill.core.extras import MissingExtraError
    from agentmill.methods.bayes_ship import mini_swe_agent

    real = builtins.__import__

    def no_msa(name, *a, **kw):
        if name.startswith("minisweagent"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return real(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", no_msa)
    with pytest.raises(MissingExtraError, match=r"pip install 'agentmill\[agents\]'"):
        mini_swe_agent.check_contract()



def test_with_a_tool_calling_model_the_refine_answers_the_submit_tool_call(msa, tmp_path) -> None:
    """mini-swe-agent 2's default models call a ``bash`` tool: the refine must be the ``tool`` message answering the
    submitting call (an unanswered call would be rejected by the next API request)."""
    from minisweagent.environments.local import LocalEnvironment
    from minisweagent.models.test_models import DeterministicToolcallModel, make_toolcall_output

    def call(i: int, command: str) -> dict:
        tc = {"id": f"call_{i}", "type": "function",
              "function": {"name": "bash", "arguments": json.dumps({"command": command})}}
        return make_toolcall_output(None, [tc], [{"command": command, "tool_call_id": f"call_{i}"}])

    root = _repo(tmp_path)
    model = DeterministicToolcallModel(outputs=[call(0, _write(BUGGY)), call(1, SUBMIT)])
    agent = msa.agent_class()(model, LocalEnvironment(cwd=str(root)), control=_control(msa),
                              system_template="s", instance_template="{{task}}", step_limit=2, cost_limit=0)
    info = agent.run("Make add() add.")
    assert info["exit_status"] == "LimitsExceeded"  # the agent's own step limit ends the run after the refine
    tool = [m for m in agent.messages if m.get("role") == "tool"]
    assert [m["tool_call_id"] for m in tool] == ["call_0", "call_1"]
    assert msa.REFINE_HEADER in tool[1]["content"] and tool[1]["extra"]["bayes_ship"]["decision"] == "refine"
    assert msa.decision_sequence(agent.bayes_ship) == ["1:critic:tests", "1:generate"]
