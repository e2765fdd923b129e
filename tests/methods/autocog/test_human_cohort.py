"""The loop with real (here: scripted) participants through the web store: it pauses with 'awaiting_data', the
participants complete their sessions, and the resumed loop collects only valid completions and continues."""

from __future__ import annotations

import json

import numpy as np

from agentmill.methods.autocog import library as L
from agentmill.methods.autocog.agents.search import ProgramSpaceReviser, RuleArbiter, SearchAdvocate
from agentmill.methods.autocog.cohorts import HumanCohort
from agentmill.methods.autocog.loop import AutoCogLoop, LoopConfig
from agentmill.methods.autocog.web.store import Store


def _loop(store, run_dir):
    return AutoCogLoop(LoopConfig(n_rounds=1, n_real=3, validation_round=False),
                       seeds=(L.tallying(), L.wadd()), advocates=(SearchAdvocate(n_designs=4, n_real=3),
                                                                  SearchAdvocate(n_designs=4, n_real=3)),
                       arbiter=RuleArbiter(), reviser=ProgramSpaceReviser(max_candidates=12, rescore_n=50),
                       cohort=HumanCohort(store, target_valid_n=3), run_dir=run_dir)


def _participate(store, obs_id, n, *, bot=False):
    ttb = L.ttb()
    for tok in store.create_sessions(obs_id, n):
        s = store.session(tok)
        store.consent(s["session_id"], True, "v1", "", None)
        store.quiz(s["session_id"], True)
        s = store.session(tok)
        v = np.asarray(store.design(obs_id)["validities"])
        for t in json.loads(s["schedule_json"]):
            ctx = {"validities": v, "n_features": len(v), "rating_max": 1}
            sign = ttb.core_sign(np.array([[t["a"]]], float), np.array([[t["b"]]], float), ctx)[0, 0]
            opt = 1 if sign < 0 else 0
            side = "L" if bot else (t["side_a"] if opt == 0 else ("R" if t["side_a"] == "L" else "L"))
            store.put_trial(s, t["trial_idx"], side, 100.0 if bot else 1500.0, None)
        assert store.complete(store.session(tok))


def test_human_cohort_pause_and_resume(tmp_path) -> None:
    store = Store(tmp_path / "study.sqlite")
    res = _loop(store, tmp_path / "run").run()
    assert res.status == "awaiting_data"
    obs = [r["obs_id"] for r in store._conn().execute("SELECT obs_id FROM observations")]
    assert len(obs) == 2
    for o in obs:
        _participate(store, o, 1, bot=True)  # excluded: single side + fast
        _participate(store, o, 2)
    assert _loop(store, tmp_path / "run").run().status == "awaiting_data"  # only 2 of 3 valid so far
    for o in obs:
        _participate(store, o, 1)
    res = _loop(store, tmp_path / "run").run()
    assert res.status == "done" and res.n_obs == 2
    st = json.loads((tmp_path / "run" / "state.json").read_text())
    assert all(o["real"] is not None for o in st["observations"])
