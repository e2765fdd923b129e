"""``agentmill autocog`` features: ``run --cohort human --db --config``, ``export --include-raw-pids``,
``fixture verify|replay`` (on a tiny synthetic fixture: the real one is not vendored) and ``recover`` (smoke grid).
Bad input exits 2 with one stderr line and writes nothing."""

from __future__ import annotations

import gzip
import hashlib
import json

import numpy as np
import pytest

from agentmill.cli.main import main
from agentmill.methods.autocog import library as L
from agentmill.methods.autocog.web.store import Store

STUDY = "study_id: cli-test\ntarget_valid_n: 2\nmax_recruit: 3\nstore_raw_pid: true\n"
RUN = ["--rounds", "1", "--n-designs", "4", "--max-candidates", "12"]


def _participate(store: Store, obs_id: str, n: int) -> None:
    """n TTB-following participants (1.5 s RTs, dominant option on catch trials) complete their sessions."""
    ttb = L.ttb()
    v = np.asarray(store.design(obs_id)["validities"])
    for k, tok in enumerate(store.create_sessions(obs_id, n)):
        s = store.session(tok)
        store.consent(s["session_id"], True, "v1", "", f"PID-{obs_id}-{k}")
        store.quiz(s["session_id"], True)
        s = store.session(tok)
        for t in json.loads(s["schedule_json"]):
            ctx = {"validities": v, "n_features": len(v), "rating_max": 1}
            sign = ttb.core_sign(np.array([[t["a"]]], float), np.array([[t["b"]]], float), ctx)[0, 0]
            opt = 1 if sign < 0 else 0
            store.put_trial(s, t["trial_idx"], t["side_a"] if opt == 0 else ("R" if t["side_a"] == "L" else "L"),
                            1500.0, None)
        assert store.complete(store.session(tok))


def _one_line_err(capsys, needle: str) -> None:
    err = capsys.readouterr().err.strip()
    assert needle in err and "\n" not in err, err


@pytest.mark.slow
def test_run_human_cohort_pause_resume_and_study_hash_in_ledger(tmp_path, capsys) -> None:
    cfg, db, d = tmp_path / "study.yaml", tmp_path / "study.sqlite", tmp_path / "run"
    cfg.write_text(STUDY)
    args = ["autocog", "run", "--run-dir", str(d), "--cohort", "human", "--db", str(db), "--config", str(cfg), *RUN]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "status awaiting_data" in out and "sessions create" in out
    first = json.loads((d / "ledger.jsonl").read_text().splitlines()[0])
    assert first["kind"] == "config"
    from agentmill.core.ledger import Ledger
    from agentmill.methods.autocog.web.study import load_study, study_sha256

    conf = Ledger(d).get("config")
    assert conf["cohort"]["study_sha256"] == study_sha256(load_study(cfg)) == study_sha256(Store(db).pinned_study())
    assert conf["config"]["n_real"] == 2 and conf["cohort"]["max_recruit"] == 3
    store = Store(db)
    for _ in range(3):  # round 1, then the validation round
        obs = [r[0] for r in store._conn().execute("SELECT obs_id FROM observations")]
        for o in obs:
            if not store.sessions(o):
                _participate(store, o, 2)
        assert main(["autocog", "resume", str(d)]) == 0
        if "status done" in capsys.readouterr().out:
            break
    else:
        pytest.fail("human run did not finish")
    assert main(["autocog", "audit", str(d)]) == 0
    # the database is pinned to this study: another config is refused, and nothing is written
    other = tmp_path / "other.yaml"
    other.write_text("study_id: another\n")
    before = db.stat().st_mtime_ns
    assert main(["autocog", "run", "--run-dir", str(tmp_path / "run2"), "--cohort", "human", "--db", str(db),
                 "--config", str(other), *RUN]) == 2
    _one_line_err(capsys, "pinned to another study")
    assert not (tmp_path / "run2").exists() and db.stat().st_mtime_ns == before
    # export: raw PIDs only with --include-raw-pids
    capsys.readouterr()
    assert main(["autocog", "export", "--db", str(db), "--out", str(tmp_path / "e1")]) == 0
    assert not (tmp_path / "e1" / "raw_pids.csv").exists()
    assert "PID-" not in "".join(p.read_text() for p in (tmp_path / "e1").iterdir())
    assert main(["autocog", "export", "--db", str(db), "--out", str(tmp_path / "e2"), "--include-raw-pids"]) == 0
    raw = (tmp_path / "e2" / "raw_pids.csv").read_text().splitlines()
    assert raw[0] == "participant,pid" and len(raw) - 1 == len(store.sessions()) and raw[1].startswith("p001,PID-")
    # sessions beyond max_recruit: exit 2, one line
    o = store.sessions()[0]["obs_id"]
    assert main(["autocog", "sessions", "create", "--db", str(db), "--obs", o, "--n", "2"]) == 2
    _one_line_err(capsys, "max_recruit")


@pytest.mark.parametrize("argv, needle", [
    (["run", "--run-dir", "{t}/r", "--cohort", "human"], "needs --db"),
    (["run", "--run-dir", "{t}/r", "--cohort", "human", "--db", "{t}/s.sqlite", "--config", "{t}/nope.yaml"],
     "no such file"),
    (["run", "--run-dir", "{t}/r", "--cohort", "human", "--db", "{t}/s.sqlite", "--config", "{t}/bad.yaml"],
     "max_recruit"),
    (["run", "--run-dir", "{t}/r", "--cohort", "human", "--db", "{t}/no/dir/s.sqlite"], "does not exist"),
    (["run", "--run-dir", "{t}/r", "--config", "{t}/bad.yaml"], "apply to --cohort human"),
    (["run", "--run-dir", "{t}/r", "--eps", "1.5"], "--eps"),
    (["run", "--run-dir", "{t}/r", "--rounds", "0"], "--rounds"),
    (["export", "--db", "{t}/s.sqlite", "--out", "{t}/r"], "no such study database"),
    (["sessions", "create", "--db", "{t}/s.sqlite", "--obs", "o1"], "no such study database"),
    (["fixture", "verify", "{t}/r"], "no such directory"),
    (["fixture", "replay", "{t}/fx"], "--run"),
    (["recover", "--grid", "smoke", "--out", "{t}/r", "--workers", "0"], "--workers"),
])
def test_bad_input_exits_2_one_line_writes_nothing(tmp_path, capsys, argv, needle) -> None:
    (tmp_path / "bad.yaml").write_text("target_valid_n: 30\nmax_recruit: 20\n")
    (tmp_path / "fx").mkdir()
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["autocog", *[a.format(t=tmp_path) for a in argv]]) == 2
    _one_line_err(capsys, needle)
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def _sha(p) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _fixture(root):
    """A synthetic fixture in the vendored fixture's layout: 2 observations, 3 theories, hand-checkable scores.
    obs 1 (r .5): d = 0, .2, .4 -> n = 0, .5, 1;  obs 2 (r .2): d = .4, 0, .2 -> n = 1, 0, .5;
    norms 1, .5, √1.25 -> scores 1 - 1/√1.25 = .106, 1 - .5/√1.25 = .553, 0."""
    run = root / "binary"
    (run / "data").mkdir(parents=True)
    (root / "LICENSE").write_text("MIT License (synthetic test fixture)\n")
    (root / "NOTICE.md").write_text("synthetic: not the authors' data\n")
    (run / "observations.json").write_text(json.dumps({"observations": [
        {"obs_id": "o1", "real_value": 0.5, "real_variance": 0.01, "predicted_values": {"pi_1": 0.5, "pi_2": 0.7, "pi_3": 0.9}},
        {"obs_id": "o2", "real_value": 0.2, "real_variance": 0.01, "predicted_values": {"pi_1": 0.6, "pi_2": 0.2, "pi_3": 0.4}},
    ], "theories": {}}))
    (run / "leaderboard_final.json").write_text(json.dumps({"pi_1": 0.106, "pi_2": 0.553, "pi_3": 0.0}))
    with gzip.open(run / "data" / "round_000_obs_00.jsonl.gz", "wt") as f:
        for s in range(3):
            for _ in range(2):
                f.write(json.dumps({"subject_id": s, "option_a_ratings": [1, 0], "option_b_ratings": [0, 1],
                                    "response": 0, "online_experiment_idx": 0, "online_subject_slot": s}) + "\n")
    files = {str(p.relative_to(root)): _sha(p) for p in sorted(root.rglob("*")) if p.is_file()}
    (root / "manifest.json").write_text(json.dumps({"source": "synthetic", "files": files}))


def test_fixture_verify_and_replay(tmp_path, capsys) -> None:
    fx = tmp_path / "fx"
    _fixture(fx)
    assert main(["autocog", "fixture", "verify", str(fx)]) == 0
    assert main(["autocog", "fixture", "replay", str(fx), "--run", "binary"]) == 0
    out = capsys.readouterr().out
    assert "2 observations, 6 rows, 3 participants" in out and "pi_2     ours 0.553  authors 0.553" in out
    # a wrong authors' number fails the regression (exit 1), a changed byte fails the integrity check
    (fx / "binary" / "leaderboard_final.json").write_text(json.dumps({"pi_1": 0.106, "pi_2": 0.560, "pi_3": 0.0}))
    assert main(["autocog", "fixture", "replay", str(fx), "--run", "binary"]) == 1
    assert main(["autocog", "fixture", "verify", str(fx)]) == 1
    assert "binary/leaderboard_final.json: sha256 differs" in capsys.readouterr().out
    (fx / "p_participants.csv").write_text("PROLIFIC_PID\n")
    assert main(["autocog", "fixture", "verify", str(fx)]) == 1
    out = capsys.readouterr().out
    assert "never be vendored" in out and "not in the manifest" in out
    assert main(["autocog", "fixture", "replay", str(fx), "--run", "cardinal"]) == 2


@pytest.mark.slow
def test_recover_smoke_grid_resumes_per_run(tmp_path, capsys) -> None:
    out = tmp_path / "rec"
    assert main(["autocog", "recover", "--grid", "smoke", "--out", str(out), "--workers", "1"]) == 0
    text = capsys.readouterr().out
    assert "cells passing:" in text and "ttb" in text
    (res,) = (out / "smoke").glob("ttb_eps0.25_s0_*/result.json")
    assert res.is_file() and json.loads(res.read_text())["gt"] == "ttb"
    mtime = res.stat().st_mtime_ns
    assert main(["autocog", "recover", "--grid", "smoke", "--out", str(out), "--workers", "1"]) == 0
    assert res.stat().st_mtime_ns == mtime  # done runs are not recomputed
    assert json.loads((out / "smoke" / "summary.json").read_text())["grid"] == "smoke"
