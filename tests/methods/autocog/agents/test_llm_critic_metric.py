"""The LLM critic, the reviser's inner critique loop ([C] ``src/improver.py``) and LLM-written metric code run in the
sandbox, with scripted models and hand-set losses."""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest

from agentmill.lm.scripted import ScriptedLM
from agentmill.methods.autocog import library as L
from agentmill.methods.autocog.agents.base import Critique, PoolView, Revision, Verdict
from agentmill.methods.autocog.agents.llm import (MAX_CRITIQUE_ITERS, LLMAdvocate, LLMArbiter, LLMCritic,
                                                  LLMReviser)
from agentmill.methods.autocog.agents.loopback import BAD_METRIC, DESIGN, TOP_CUE_METRIC, scripted_reply
from agentmill.methods.autocog.agents.search import LossCritic, ProgramSpaceReviser, RuleArbiter, SearchAdvocate
from agentmill.methods.autocog.audit import audit
from agentmill.methods.autocog.cohorts import SimulatedCohort
from agentmill.methods.autocog.design import Design
from agentmill.core.ledger import Ledger
from agentmill.methods.autocog.loop import AutoCogLoop, LoopConfig
from agentmill.methods.autocog.metrics import CodeMetric, TemplateMetric, metric_from_json
from agentmill.methods.autocog.sandbox import TheoryCompileError, TheoryRejected, run_batch, run_metric
from agentmill.methods.autocog.simulate import Data

D = Design.make(DESIGN["validities"], DESIGN["pairs_a"], DESIGN["pairs_b"])
VERDICT = Verdict("new_theory", 2, "slot 2 fits worse", "graded weights")
CODE = ("import numpy as np\nimport math\ndef predict(params, stimulus, history):\n"
        "    d = float(stimulus[0].sum() - stimulus[1].sum())\n"
        "    pa = 1 / (1 + math.exp(-params['beta'] * d))\n    return np.array([pa, 1 - pa])\n")


def _pool() -> PoolView:
    obs = [{"obs_id": f"o01{k}", "round": 1, "slot": k, "design": D, "metric": TemplateMetric("p_choose_a"),
            "real": real, "preds": {}, "gate_passed": True, "seed": k} for k, real in ((1, 0.6), (2, 0.3))]
    return PoolView({}, [], obs)


class FakeSearch:
    """Stands in for ProgramSpaceReviser: hand-set losses by candidate name, and a marked fallback revision."""

    n_sim = 5

    def __init__(self, losses: dict[str, float], target_loss: float = 0.5) -> None:
        self.losses, self.target_loss, self.revised = losses, target_loss, 0

    def _loss(self, theory, pool, n, key):
        loss = self.losses.get(theory.name, self.target_loss)
        return loss, [0.5] * len(pool.observations)

    def revise(self, verdict, target, other, pool, rng) -> Revision:
        self.revised += 1
        return Revision(L.wadd(), 0.9, False, candidates=[{"name": "programmatic"}])


def _iteration(prompt: str, pattern: str) -> int:
    return int(re.search(pattern, prompt).group(1))


def _script(critic_verdicts: list[str], *, broken_iters: frozenset = frozenset()):
    """Reviser: candidate ``c<k>`` in iteration k (non-compiling code in ``broken_iters``); critic: the k-th verdict."""
    def reply(prompt: str) -> str:
        if prompt.startswith("ROLE: reviser"):
            k = _iteration(prompt, r"Iteration (\d+) of")
            src = "def predict(:" if k in broken_iters else CODE
            return json.dumps({"name": f"c{k}", "prose": "sum of ratings", "predict_source": src,
                               "policy": "sample", "parameters": {"beta": "[0.1, 20]"}})
        k = _iteration(prompt, r"CANDIDATE \(iteration (\d+)\)")
        return json.dumps({"verdict": critic_verdicts[k - 1], "critique": f"advice {k}"})
    return reply


def _revise(tmp_path, losses, verdicts, *, max_iters=10, broken=frozenset(), retries=10):
    lm = ScriptedLM(_script(verdicts, broken_iters=broken), spec="scripted:critic")
    fake = FakeSearch(losses)
    rev = LLMReviser(lm, fallback=fake, run_dir=tmp_path, max_iters=max_iters, max_compile_retries=retries)
    r = rev.revise(VERDICT, L.tallying(), L.ttb(), _pool(), np.random.default_rng(0))
    return r, lm, fake


def test_defaults_follow_the_spec(tmp_path) -> None:
    rev = LLMReviser(ScriptedLM(lambda t: "", spec="scripted:x"), fallback=FakeSearch({}), run_dir=tmp_path)
    assert MAX_CRITIQUE_ITERS == 10 and rev.max_iters == 10 and rev.max_compile_retries == 10
    assert isinstance(rev.critic, LLMCritic) and rev.critic.caller.temperature == 0.0
    assert rev.caller.temperature == 0.7
    with pytest.raises(ValueError, match="max_iters"):
        LLMReviser(ScriptedLM(lambda t: "", spec="scripted:x"), fallback=FakeSearch({}), run_dir=tmp_path, max_iters=0)


def test_continue_stops_only_on_an_accepted_candidate(tmp_path) -> None:
    # losses .5, .6 (rejected: not below .5), .4 (accepted); the critic says continue on c2 (downgraded) and c3
    r, lm, fake = _revise(tmp_path, {"c1": 0.5, "c2": 0.6, "c3": 0.4, "c4": 0.1},
                          ["regenerate", "continue", "continue", "continue"])
    cands = [c for c in r.candidates if "iteration" in c]
    assert [c["accepted"] for c in cands] == [True, False, True]  # c4 never asked: the loop stopped at c3
    assert [c["critic"]["verdict"] for c in cands] == ["regenerate", "continue", "continue"]
    assert r.theory.name == "c3" and r.loss == 0.4 and r.improved_over_target  # target loss .5
    assert r.candidates[-1] == {"chosen_iteration": 2, "ended": "critic_continue", "target_loss": 0.5}
    assert len(lm.calls) == 6 and fake.revised == 0
    assert cands[1]["theory"]["source"] == CODE and cands[0]["obs_errors"] == pytest.approx([0.1, 0.2])
    # the next proposal builds on the running best and sees the critic's advice and the accept/reject marks
    third = [p for p in lm.calls if p.startswith("ROLE: reviser")][2]
    assert "REJECTED; critic: continue — advice 2" in third and "best candidate so far (c1, loss 0.500)" in third


def test_no_continue_uses_the_best_loss_and_equal_loss_is_not_accepted(tmp_path) -> None:
    r, lm, _ = _revise(tmp_path, {"c1": 0.7, "c2": 0.3, "c3": 0.3, "c4": 0.8}, ["regenerate"] * 4, max_iters=4)
    cands = [c for c in r.candidates if "iteration" in c]
    assert [c["accepted"] for c in cands] == [True, True, False, False]  # .3 is not strictly below .3
    assert r.theory.name == "c2" and r.loss == 0.3
    assert r.candidates[-1]["ended"] == "iterations_exhausted" and r.candidates[-1]["chosen_iteration"] == 1
    assert len(lm.calls) == 8


def test_non_compiling_code_is_re_asked_then_the_loop_ends(tmp_path) -> None:
    # iteration 2 never compiles (3 asks): the loop ends with the running best
    r, lm, _ = _revise(tmp_path, {"c1": 0.4}, ["regenerate"] * 3, broken=frozenset({2}), retries=3)
    assert r.theory.name == "c1"
    failed = r.candidates[1]
    assert failed["compiled"] is False and len(failed["errors"]) == 3 and "syntax error" in failed["errors"][0]
    assert r.candidates[-1]["ended"] == "no_compiling_candidate"
    reviser_prompts = [p for p in lm.calls if p.startswith("ROLE: reviser")]
    assert len(reviser_prompts) == 4 and "previous reply was invalid: syntax error" in reviser_prompts[-1]


def test_first_iteration_without_compiling_code_falls_back(tmp_path) -> None:
    r, lm, fake = _revise(tmp_path, {}, ["continue"], broken=frozenset({1}), retries=2)
    assert fake.revised == 1 and r.theory.name == L.wadd().name
    assert r.candidates[-1]["fallback"] is True and r.candidates[-1]["llm_candidates"][0]["compiled"] is False
    assert len(lm.calls) == 2  # no critic call without a candidate


def test_sandbox_check_re_asks_code_that_fails_at_run_time(tmp_path) -> None:
    bad = CODE.replace("params['beta']", "params['gamma']")  # compiles, but gamma is not a parameter

    def reply(prompt: str) -> str:
        if prompt.startswith("ROLE: critic"):
            return json.dumps({"verdict": "continue", "critique": "ok"})
        src = CODE if "previous reply was invalid" in prompt else bad
        return json.dumps({"name": "c", "prose": "p", "predict_source": src, "parameters": {"beta": "[0.1, 20]"}})

    rev = LLMReviser(ScriptedLM(reply, spec="scripted:x"), fallback=FakeSearch({"c": 0.2}), run_dir=tmp_path)
    r = rev.revise(VERDICT, L.tallying(), L.ttb(), _pool(), np.random.default_rng(0))
    assert r.theory.source == CODE and "gamma" in r.candidates[0]["errors"][0]


def test_loss_critic_by_hand() -> None:
    c = LossCritic()
    pool = _pool()
    base = {"iteration": 0, "loss": 0.3, "obs_errors": [0.05, 0.4], "accepted": True, "best_loss": 0.3,
            "target_loss": 0.5}
    assert c.critique(VERDICT, None, None, pool, base, []).verdict == "continue"
    worse = c.critique(VERDICT, None, None, pool, {**base, "target_loss": 0.2}, [])
    assert worse.verdict == "regenerate" and "o012 (|error| 0.400), o011 (|error| 0.050)" in worse.critique
    assert c.critique(VERDICT, None, None, pool, {**base, "accepted": False}, []).verdict == "regenerate"
    with pytest.raises(ValueError, match="Critique.verdict"):
        Critique("stop")


def test_llm_critic_validates_retries_with_the_error_and_falls_back(tmp_path) -> None:
    replies = iter(['{"verdict": "stop", "critique": "x"}', '{"verdict": "continue", "critique": "x", "extra": 1}',
                    '{"verdict": "continue", "critique": "fine"}'])
    lm = ScriptedLM(lambda t: next(replies), spec="scripted:critic")
    critic = LLMCritic(lm, fallback=LossCritic(), run_dir=tmp_path)
    att = {"iteration": 0, "name": "c1", "loss": 0.4, "obs_preds": [0.5, 0.5], "obs_errors": [0.1, 0.2],
           "accepted": True, "best_loss": 0.4, "target_loss": 0.3}
    got = critic.critique(VERDICT, L.tallying(), L.ttb(), _pool(), att, [])
    assert (got.verdict, got.critique, got.fallback) == ("continue", "fine", False)
    assert "verdict: Input should be 'continue' or 'regenerate'" in lm.calls[1]
    assert "extra: Extra inputs are not permitted" in lm.calls[2] and "errors.pydantic.dev" not in lm.calls[2]
    assert "ROLE: critic" in lm.calls[0] and "|error|=0.2" in lm.calls[0] and "ACCEPTED (best so far)" in lm.calls[0]
    garbage = LLMCritic(ScriptedLM(lambda t: "no JSON here", spec="scripted:g"), fallback=LossCritic(),
                        run_dir=tmp_path / "g")
    fb = garbage.critique(VERDICT, L.tallying(), L.ttb(), _pool(), att, [])
    assert fb.fallback and len(fb.errors) == 3 and fb.verdict == "regenerate"  # .4 is not below the target's .3
    assert fb.to_json()["fallback"] is True


# -- metric code ------------------------------------------------------------------------------------------------

def _data() -> Data:
    # 2 subjects x 3 trials on pairs 0 (A has the top cue) and 2 (B has it)
    return Data(D, np.array([[0, 2, 0], [2, 2, 0]]), np.array([[0, 1, 1], [1, 0, 0]]))


def test_code_metric_pooled_value_and_per_subject_variance() -> None:
    # follows the top cue: subject 0 -> yes, yes, no (2/3); subject 1 -> yes, no, yes (2/3); pooled 4/6
    m = CodeMetric(TOP_CUE_METRIC)
    est = m(_data())
    assert est.value == pytest.approx(4 / 6) and est.variance == pytest.approx(0.0)
    assert est.per_subject.tolist() == pytest.approx([2 / 3, 2 / 3])
    assert metric_from_json(m.to_json()) == m
    assert metric_from_json({"name": "p_choose_a"}) == TemplateMetric("p_choose_a")
    share_a = CodeMetric("import numpy as np\ndef metric(data):\n    return float(np.mean(data['response'] == 0))\n")
    e2 = share_a(_data())
    assert e2.value == pytest.approx(0.5) and e2.variance == pytest.approx(np.var([1 / 3, 2 / 3]))


def test_code_metric_failures_give_missing_estimates() -> None:
    needs_two = CodeMetric("import numpy as np\ndef metric(data):\n"
                           "    return float(len(np.unique(data['subject_id'])) - 1) / 1.0 if "
                           "len(np.unique(data['subject_id'])) > 1 else 1 / 0\n")
    est, errors = needs_two.evaluate(_data())
    assert est.value == 1.0 and est.variance is None and "ZeroDivisionError" in errors[0]
    assert CodeMetric(BAD_METRIC)(_data()) == (None, None, None)
    assert CodeMetric("def metric(data):\n    return float('nan')\n")(_data()).value is None


def test_run_metric_copies_data_and_checks_its_input() -> None:
    src = "def metric(data):\n    data['response'][:] = 7\n    return float(data['response'].sum())\n"
    res = run_metric(src, {"subject_id": [0, 0, 1], "response": [0, 1, 1]})
    assert res["values"] == [21.0, 14.0, 7.0]  # each call mutates its own copy only
    with pytest.raises(TheoryRejected, match="'os'"):
        run_metric(BAD_METRIC, {"subject_id": [0]})
    with pytest.raises(TheoryCompileError, match=r"metric\(data\) -> float"):
        run_metric("def predict(a, b, c):\n    return 1\n", {"subject_id": [0]})
    with pytest.raises(ValueError, match="subject_id"):
        run_metric(TOP_CUE_METRIC, {"response": [0]})
    # numpy functions that import numpy.ma lazily work in both children (pre-loaded before the import ban)
    assert run_metric("import numpy as np\ndef metric(data):\n    return float(np.unique(data['response']).size)\n",
                      {"subject_id": [0, 1], "response": [0, 1]})["values"] == [2.0, 1.0, 1.0]
    uniq = "import numpy as np\ndef predict(params, stimulus, history):\n    return np.unique([0.5, 0.5]).repeat(2)\n"
    assert run_batch(uniq, [[[1, 0]]], [[[0, 1]]], {})["probs"] == [[0.5]]


def _advocate(tmp_path, reply):
    return LLMAdvocate(ScriptedLM(reply, spec="scripted:adv"), fallback=SearchAdvocate(n_designs=2, n_sim=10),
                       run_dir=tmp_path)


def test_advocate_metric_code_is_sandbox_checked_with_template_fallback(tmp_path) -> None:
    pool = _pool()
    fenced = "```json\n" + json.dumps({"design": DESIGN}) + "\n```\n```metric\n" + TOP_CUE_METRIC + "```"
    p = _advocate(tmp_path / "a", lambda t: fenced).propose(L.ttb(), L.tallying(), pool, np.random.default_rng(0))
    assert isinstance(p.metric, CodeMetric) and p.metric.source == TOP_CUE_METRIC
    assert p.extra["metric_code"]["fallback"] is False and "metric_source" not in p.extra
    named = json.dumps({"design": DESIGN, "metric": {"source": BAD_METRIC, "name": "lag1_repeat"}})
    p = _advocate(tmp_path / "b", lambda t: named).propose(L.ttb(), L.tallying(), pool, np.random.default_rng(0))
    assert p.metric == TemplateMetric("lag1_repeat")
    assert p.extra["metric_code"]["fallback"] is True and "'os'" in p.extra["metric_code"]["error"]
    crash = TOP_CUE_METRIC.replace("data['validities']", "data['no_such_column']")
    unnamed = json.dumps({"design": DESIGN, "metric": {"source": crash}})
    p = _advocate(tmp_path / "c", lambda t: unnamed).propose(L.ttb(), L.tallying(), pool, np.random.default_rng(0))
    # no template named: the smallest gate p on this top-cue-vs-majority design, which TTB and Tallying split on
    assert p.extra["metric_code"]["fallback"] is True and "KeyError" in p.extra["metric_code"]["error"]
    assert p.metric.name in ("conflict", "top_cue_vs_majority", "agree")


def test_loop_with_critic_and_metric_code_replays_byte_identical(tmp_path) -> None:
    def loop(lm, run_dir):
        adv = tuple(LLMAdvocate(lm, fallback=SearchAdvocate(n_designs=2), run_dir=run_dir, name=f"advocate{k}")
                    for k in (1, 2))
        rev = LLMReviser(lm, fallback=ProgramSpaceReviser(max_candidates=6, rescore_n=20), run_dir=run_dir)
        return AutoCogLoop(LoopConfig(n_rounds=1, n_sim=20, validation_round=True), seeds=(L.ttb(), L.tallying()),
                           advocates=adv, arbiter=LLMArbiter(lm, fallback=RuleArbiter(), run_dir=run_dir),
                           reviser=rev, cohort=SimulatedCohort(L.wadd(), action_noise=0.1, seed=0), run_dir=run_dir)

    lm = ScriptedLM(scripted_reply, spec="scripted:stub")
    res = loop(lm, tmp_path / "a").run()
    assert res.status == "done" and audit(tmp_path / "a") == []
    led = Ledger(tmp_path / "a")
    props = {e["step"]: led.payload(e) for e in led.events if e["kind"] == "proposal"}
    assert props["r2/s1/proposal"]["metric"]["source"] == TOP_CUE_METRIC  # validation round, 2 past observations
    assert props["r2/s2/proposal"]["extra"]["metric_code"]["fallback"] is True
    assert props["r2/s2/proposal"]["metric"] == {"name": "top_cue_vs_majority", "args": {}}
    assert "metric(data) -> float" in lm.calls[0]
    (cand,) = [led.payload(e) for e in led.events if e["kind"] == "candidate"]
    done = [c for c in cand["candidates"] if "critic" in c]
    assert done[-1]["critic"] == {"verdict": "continue", "critique": "fits the observed top-cue choices"}
    roles = [led.payload(e)["role"] for e in led.events if e["kind"] == "lm_call"]
    assert roles.count("critic") == 1
    shutil.copytree(tmp_path / "a", tmp_path / "b", ignore=shutil.ignore_patterns("ledger.jsonl", "state.json",
                                                                                  "blobs"))
    replay = ScriptedLM(lambda t: pytest.fail("replay must not call the model"), spec="scripted:stub")
    assert loop(replay, tmp_path / "b").run().ledger_head == res.ledger_head
