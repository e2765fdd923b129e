"""AC-12 (offline part): LLM roles through agentmill.lm with a scripted fake — a full 2-round run with one malformed
JSON reply and one theory that does not compile; retries/fallbacks recorded; a replay from the recorded calls gives
a byte-identical ledger head without calling the model; no prompt contains the ground truth's name or prose."""

from __future__ import annotations

import json
import shutil

from agentmill.lm.scripted import ScriptedLM
from agentmill.methods.autocog import library as L
from agentmill.methods.autocog.agents.llm import LLMAdvocate, LLMArbiter, LLMReviser
from agentmill.methods.autocog.agents.search import ProgramSpaceReviser, RuleArbiter, SearchAdvocate
from agentmill.methods.autocog.cohorts import SimulatedCohort
from agentmill.core.ledger import Ledger
from agentmill.methods.autocog.loop import AutoCogLoop, LoopConfig

DESIGN = {"validities": [0.9, 0.8, 0.7, 0.6], "rating_max": 1,
          "pairs_a": [[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [0, 1, 1, 1]],
          "pairs_b": [[0, 1, 1, 1], [0, 0, 1, 1], [0, 1, 0, 1], [1, 0, 0, 0]], "rationale": "top cue vs majority"}
GOOD_CODE = ("import numpy as np\nimport math\n"
             "def predict(params, stimulus, history):\n"
             "    v = np.array([0.9, 0.8, 0.7, 0.6])\n"
             "    w = v ** params['gamma']\n"
             "    d = float(np.dot(w / w.max(), stimulus[0] - stimulus[1]))\n"
             "    pa = (1 - params['eps']) / (1 + math.exp(-params['beta'] * d)) + params['eps'] / 2\n"
             "    return np.array([pa, 1 - pa])\n")


class Script:
    def __init__(self) -> None:
        self.n = {"advocate": 0, "arbiter": 0, "reviser": 0, "critic": 0}

    def __call__(self, text: str) -> str:
        role = text.split("ROLE: ", 1)[1].split("\n", 1)[0]
        self.n[role] += 1
        if role == "advocate":
            if self.n[role] == 1:
                return '{"design": {"validities": [0.9, 0.8'  # malformed JSON
            return "Here you go:\n```json\n" + json.dumps({"design": DESIGN, "metric": {"name": "top_cue_vs_majority"}}) + "\n```"
        if role == "critic":
            return json.dumps({"verdict": "continue", "critique": "good enough"})
        if role == "arbiter":
            return json.dumps({"interpretation": "slot 2 fits worse", "verdict": "new_theory", "target_theory_idx": 2,
                               "recommendation": "try graded weights"})
        if self.n[role] == 1:
            return json.dumps({"name": "broken", "prose": "x", "predict_source": "def predict(:", "policy": "sample",
                               "parameters": {}})
        return json.dumps({"name": "graded weights", "prose": "validity weights raised to a power",
                           "predict_source": GOOD_CODE, "policy": "sample",
                           "parameters": {"gamma": "[0, 10]", "beta": "[0.1, 20]", "eps": "[0, 0.5]"}})


class NoCalls:
    spec = "scripted:none"

    def generate(self, prompts, config):
        raise AssertionError("replay must not call the model")


def _loop(lm, run_dir):
    adv = tuple(LLMAdvocate(lm, fallback=SearchAdvocate(n_designs=4), run_dir=run_dir, name=f"a{k}") for k in (1, 2))
    rev = LLMReviser(lm, fallback=ProgramSpaceReviser(max_candidates=12, rescore_n=50), run_dir=run_dir, max_iters=2)
    arb = LLMArbiter(lm, fallback=RuleArbiter(), run_dir=run_dir)
    gt = L.wadd()
    loop = AutoCogLoop(LoopConfig(n_rounds=2, validation_round=True), seeds=(L.ttb(), L.tallying()), advocates=adv,
                       arbiter=arb, reviser=rev, cohort=SimulatedCohort(gt, action_noise=0.1, seed=0), run_dir=run_dir)
    return loop, adv, rev, arb


def test_llm_roles_full_run_and_replay(tmp_path) -> None:
    script = Script()
    lm = ScriptedLM(script, spec="scripted:autocog")
    loop, adv, rev, arb = _loop(lm, tmp_path / "a")
    res = loop.run()
    assert res.status == "done" and res.n_obs == 6
    led = Ledger(tmp_path / "a")
    props = [led.payload(e) for e in led.events if e["kind"] == "proposal"]
    assert props[0]["extra"]["llm_errors"] and "JSON" in props[0]["extra"]["llm_errors"][0]  # retried
    assert not props[0]["extra"].get("fallback")
    cands = [led.payload(e) for e in led.events if e["kind"] == "candidate"]
    assert any("errors" in c and c["errors"] for c in cands[0]["candidates"])  # the non-compiling theory
    assert any(t.spec["factory"] == "code" for t in loop.theories.values())  # the LLM theory was admitted
    prompts = lm.calls
    gt = L.wadd()
    assert prompts and not any(gt.prose in p or "wadd" in p.lower() for p in prompts)  # no GT leakage
    # replay: same recorded calls, a model that must not be called, byte-identical ledger head
    shutil.copytree(tmp_path / "a", tmp_path / "b", ignore=shutil.ignore_patterns("ledger.jsonl", "state.json",
                                                                                  "blobs"))
    loop2, *_ = _loop(NoCalls(), tmp_path / "b")
    assert loop2.run().ledger_head == res.ledger_head


def test_fallback_after_persistent_garbage(tmp_path) -> None:
    lm = ScriptedLM(lambda text: "I cannot answer in JSON, sorry.", spec="scripted:garbage")
    loop, *_ = _loop(lm, tmp_path)
    res = loop.run()
    assert res.status == "done"
    led = Ledger(tmp_path)
    props = [led.payload(e) for e in led.events if e["kind"] == "proposal"]
    assert all(p["extra"].get("fallback") for p in props)
    cands = [led.payload(e) for e in led.events if e["kind"] == "candidate"]
    assert all(any(c.get("fallback") for c in x["candidates"] if isinstance(c, dict)) for x in cands)


def test_lm_calls_jsonl_keeps_its_format_and_survives_a_torn_append(tmp_path) -> None:
    """``lm_calls.jsonl`` lines written by hand in the historical format (key = sha256 of
    ``json.dumps([prompt, temperature, max_new_tokens, seed])``) are replayed; a torn last line is asked again and
    the new record lands on a line of its own."""
    import hashlib

    from agentmill.methods.autocog.agents.llm import LMCaller

    def key(prompt: str) -> str:
        return hashlib.sha256(json.dumps([prompt, 0.7, 1024, 5]).encode()).hexdigest()

    old = {"request_sha256": key("ROLE: advocate\nold"), "response": "from the file", "model": "scripted:x",
           "latency_s": 0.1}
    (tmp_path / "lm_calls.jsonl").write_text(json.dumps(old, sort_keys=True) + "\n" + '{"request_sha256": "ab')
    lm = ScriptedLM(lambda text: "from the model", spec="scripted:x")
    caller = LMCaller(lm, tmp_path, role="advocate", temperature=0.7)
    assert caller("ROLE: advocate\nold", seed=5) == "from the file" and lm.calls == []
    assert caller("ROLE: advocate\nnew", seed=5) == "from the model" and caller.model_calls == 1
    lines = [json.loads(x) for x in (tmp_path / "lm_calls.jsonl").read_text().splitlines()]
    assert [r["request_sha256"] for r in lines] == [key("ROLE: advocate\nold"), key("ROLE: advocate\nnew")]
    assert lines[1]["response"] == "from the model" and lines[1]["model"] == "scripted:x"
    again = LMCaller(NoCalls(), tmp_path, role="advocate", temperature=0.7)
    assert again("ROLE: advocate\nnew", seed=5) == "from the model"
