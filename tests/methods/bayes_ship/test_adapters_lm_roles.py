"""The loop adapter with fake critics and verifier; the LM reviewer, log-probability scorer and patch generator with
scripted fakes."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from agentmill.methods.bayes_ship import Calibration, CostModel, CriticModel, GreedyController, Kernel
from agentmill.methods.bayes_ship.adapters import control_candidates
from agentmill.methods.bayes_ship.critics import diff_logprob_scorer, review_scorer, yes_probability
from agentmill.methods.bayes_ship.generators import LMPatchGenerator


class _Critic:
    def __init__(self, table):
        self.table = table

    def check(self, task, cand):
        return SimpleNamespace(passed=self.table[cand], wall_s=0.5)


def test_control_candidates_generates_after_a_fail_and_verifies_after_a_pass() -> None:
    cal = Calibration(0.3, 0, {"T": CriticModel("T", 0.95, 0.05)}, Kernel.iid(0.3))
    cost = CostModel(R=100, c_gen=5, c_ver=20, critic_costs={"T": 2.0})  # generating pays: −5 + 30 − 20 > 0
    pool = iter(["bad", "good"])
    verified = []
    res, last = control_candidates(GreedyController(cal, cost), cal, cost, task=None,
                                   next_candidate=lambda: next(pool, None),
                                   critics={"T": _Critic({"bad": False, "good": True})},
                                   verify=lambda c: verified.append(c) or c == "good", charge_measured=True)
    assert res.actions == ["generate", "critic:T", "generate", "critic:T", "verify"]
    assert last == "good" and verified == ["good"] and res.outcome == "verified_correct"
    assert res.costs["T"] == pytest.approx(1.0)  # two measured calls of 0.5 s
    res, last = control_candidates(GreedyController(cal, cost), cal, cost, task=None, next_candidate=lambda: None,
                                   critics={}, verify=lambda c: True)
    assert res.outcome == "gave_up" and last is None


class _LP:
    """logprobs: ' yes' → log 0.6, ' no' → log 0.2, anything else one token at log 0.5 per character."""

    spec = "fake"

    def logprobs(self, prompt, continuation):
        if continuation == " yes":
            return np.array([math.log(0.6)])
        if continuation == " no":
            return np.array([math.log(0.2)])
        return np.full(len(continuation), math.log(0.5))


def test_reviewer_and_logprob_scorers() -> None:
    assert yes_probability(_LP(), "x") == pytest.approx(0.75)
    task = SimpleNamespace(issue="boom")
    assert review_scorer(_LP())(task, SimpleNamespace(diff="-a\n+b\n")) == pytest.approx(0.75)
    assert diff_logprob_scorer(_LP())(task, SimpleNamespace(diff="ab")) == pytest.approx(math.log(0.5))


def test_patch_generator_parses_a_code_block_and_flags_a_reply_without_one() -> None:
    from agentmill.lm.scripted import ScriptedLM

    task = SimpleNamespace(instance_id="t", issue="x is wrong", bug_files={"m.py": "x = 1\n"})
    gen = LMPatchGenerator(ScriptedLM(["```python\nx = 2\n```", "I cannot help"]))
    a = gen.next(task)
    assert a["ok"] and a["files"] == {"m.py": "x = 2\n"}
    b = gen.next(task, feedback="tests failed")
    assert not b["ok"] and b["files"] == {"m.py": "x = 1\n"} and gen.calls == 2
