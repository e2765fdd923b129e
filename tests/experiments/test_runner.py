from __future__ import annotations

import dataclasses
import json

import pytest

from agentmill.core.records import RunRecord
from agentmill.experiments.runner import load_record, record_path, run_experiment, run_suite
from tests.helpers.fake_experiments import COIN, CRASH, ECHO


def test_run_writes_a_complete_record(tmp_path) -> None:
    rec = run_experiment(COIN, profile="quick", runs_dir=tmp_path)
    assert rec.status == "ok" and rec.verdicts == {"F-1": "supported", "F-2": "supported"}
    stored = json.loads(record_path(tmp_path, "quick", "fake.coin").read_text())
    assert stored["metrics"]["mean"]["method"] == "bootstrap" and stored["setup"] == {"n": 200, "p": 0.5, "seed": 0}
    assert stored["packages"]["numpy"] and stored["wall_seconds"] >= 0 and stored["setup_hash"]


def test_resume_reuses_matching_record_and_reruns_on_change(tmp_path) -> None:
    first = run_experiment(COIN, profile="quick", runs_dir=tmp_path)
    again = run_experiment(COIN, profile="quick", runs_dir=tmp_path)
    assert again.started_at == first.started_at  # reused, not rerun
    changed = run_experiment(COIN, profile="quick", runs_dir=tmp_path, overrides={"n": "50"})
    assert changed.setup["n"] == 50 and changed.setup_hash != first.setup_hash
    # the replaced ok record is kept in history, never lost
    assert len(list((tmp_path / "quick" / "history").glob("fake.coin-*.json"))) == 1


def test_crash_becomes_error_record_and_suite_goes_on(tmp_path) -> None:
    recs = run_suite([CRASH, COIN], profile="smoke", runs_dir=tmp_path)
    assert [r.status for r in recs] == ["error", "ok"]
    assert "deliberate failure" in recs[0].error and not recs[0].metrics
    assert load_record(tmp_path, "smoke", "fake.crash").status == "error"


def test_error_never_replaces_a_good_record_without_keeping_it(tmp_path) -> None:
    good = run_experiment(COIN, profile="smoke", runs_dir=tmp_path)
    broken = dataclasses.replace(COIN, measure=CRASH.measure)
    run_experiment(broken, profile="smoke", runs_dir=tmp_path, resume=False)
    hist = list((tmp_path / "smoke" / "history").glob("*.json"))
    assert len(hist) == 1 and json.loads(hist[0].read_text())["started_at"] == good.started_at


def test_interrupted_suite_resumes_without_losing_finished_records(tmp_path) -> None:
    calls = []

    def interrupting(setup, ctx):
        calls.append(1)
        raise KeyboardInterrupt

    killer = dataclasses.replace(CRASH, id="fake.killer", measure=interrupting)
    with pytest.raises(KeyboardInterrupt):
        run_suite([COIN, killer], profile="smoke", runs_dir=tmp_path)
    coin_rec = load_record(tmp_path, "smoke", "fake.coin")
    assert coin_rec is not None and coin_rec.status == "ok"
    assert load_record(tmp_path, "smoke", "fake.killer") is None  # nothing partial written
    recs = run_suite([COIN], profile="smoke", runs_dir=tmp_path)
    assert recs[0].started_at == coin_rec.started_at


def test_model_experiment_records_model_and_bad_spec_fails_before_writing(tmp_path) -> None:
    rec = run_experiment(ECHO, profile="smoke", model="scripted:echo", runs_dir=tmp_path)
    assert rec.status == "ok" and rec.model == "scripted:echo"
    with pytest.raises(ValueError, match="unknown model backend 'hff'.*Did you mean 'hf:smollm2'"):
        run_experiment(ECHO, profile="quick", model="hff:smollm2", runs_dir=tmp_path)
    assert load_record(tmp_path, "quick", "fake.echo") is None


def test_bad_override_fails_before_writing(tmp_path) -> None:
    with pytest.raises(KeyError, match="Did you mean 'seed'"):
        run_experiment(COIN, profile="smoke", overrides={"sede": "1"}, runs_dir=tmp_path)
    assert not (tmp_path / "smoke").exists()


def test_missing_extra_fails_before_writing_and_is_a_record_in_a_suite(tmp_path, monkeypatch) -> None:
    from agentmill.core import extras
    from agentmill.core.extras import MissingExtraError

    monkeypatch.setitem(extras.EXTRA_IMPORTS, "planted", ("agentmill_no_such_module",))
    needy = dataclasses.replace(COIN, id="fake.needy", requires=frozenset({"planted"}))
    with pytest.raises(MissingExtraError, match=r"experiment fake.needy needs the 'planted' extra: "
                                                r"pip install 'agentmill\[planted\]'"):
        run_experiment(needy, profile="smoke", runs_dir=tmp_path)
    assert not (tmp_path / "smoke").exists()
    recs = run_suite([needy, COIN], profile="smoke", runs_dir=tmp_path)
    assert [r.status for r in recs] == ["error", "ok"]
    assert "pip install 'agentmill[planted]'" in recs[0].error


def test_an_undeclared_extra_reached_in_measure_names_its_install(tmp_path) -> None:
    def measure(setup, ctx):
        raise ModuleNotFoundError("No module named 'textworld'", name="textworld")

    exp = dataclasses.replace(COIN, id="fake.reaches_textworld", measure=measure)
    rec = run_experiment(exp, profile="smoke", runs_dir=tmp_path)
    assert rec.status == "error"
    assert rec.error == "ModuleNotFoundError: No module named 'textworld' (pip install 'agentmill[textworld]')"


def test_fresh_run_moves_old_checkpoints_aside_and_resume_keeps_them(tmp_path) -> None:
    seen = []

    def measuring(setup, ctx):
        ck = ctx.work_dir / "ck.json"
        seen.append(ck.exists())
        ck.write_text("{}")
        return COIN.measure(setup, ctx)

    exp = dataclasses.replace(COIN, id="fake.ckpt", measure=measuring)
    run_experiment(exp, profile="smoke", runs_dir=tmp_path)
    run_experiment(exp, profile="smoke", runs_dir=tmp_path, resume=False)     # fresh: starts without checkpoints
    assert seen == [False, False]
    moved = list((tmp_path / "smoke" / "history").glob("fake.ckpt.work-*"))
    assert len(moved) == 1 and (moved[0] / "ck.json").exists()                 # nothing deleted


@pytest.mark.slow
def test_parallel_suite_matches_serial_and_keeps_order(tmp_path) -> None:
    """``jobs=2`` runs the registered parallel-safe experiments in worker processes: same metrics as a serial run,
    records in input order, progress relayed from the workers; an unregistered experiment still runs here."""
    from agentmill.experiments import get

    pooled = [get("e165.g2po_value_variance"), get("e173.progress_reward_vs_advantage"),
              get("e179.counterexample")]
    assert all(e.parallel_safe for e in pooled)
    timing = get("e165.g2po_overhead")  # not parallel-safe: it runs in the timing lane, beside the pool
    assert not timing.parallel_safe
    exps = [pooled[0], COIN, timing, *pooled[1:]]
    seen: list[str] = []

    def factory(exp):
        return lambda desc, done, total: seen.append(exp.id)

    serial = run_suite(exps, profile="smoke", runs_dir=tmp_path / "serial", progress_factory=factory)
    seen_serial, seen[:] = set(seen), []
    assert seen_serial & {e.id for e in pooled}  # the check below is not vacuous

    order: list[str] = []
    par = run_suite(exps, profile="smoke", runs_dir=tmp_path / "par", jobs=2, progress_factory=factory,
                    on_done=lambda e, r: order.append(e.id))
    assert [r.experiment_id for r in par] == [e.id for e in exps]
    assert all(r.status == "ok" for r in par)
    for a, b in zip(serial, par):
        if a.experiment_id != timing.id:  # its values are timings
            assert {k: v.value for k, v in a.metrics.items()} == {k: v.value for k, v in b.metrics.items()}
    assert order[-1] == "fake.coin"  # the registered experiments finish first, the unregistered run after them
    assert set(seen) == seen_serial  # every progress message of the workers reached this process
    assert load_record(tmp_path / "par", "smoke", "e179.counterexample").status == "ok"


def test_beside_the_timing_lane_the_pool_keeps_a_core_free_and_starts_model_free_experiments_only() -> None:
    from agentmill.experiments import get
    from agentmill.experiments.runner import _admit, model_free

    assert model_free(get("e176.recovery")) and model_free(get("e179.lossless_mc"))
    assert not model_free(get("e162.collapse_llm"))     # declares a model
    assert not model_free(get("e179.sampling_equality"))  # needs the hf extra (SmolLM2 through the engine)
    assert not model_free(get("e173.progress_lm_pair_rl"))  # a tiny torch model with a LoRA (peft)
    free = {1, 3}.__contains__
    waiting = [0, 1, 2, 3]                                  # longest first; 0 and 2 load a model
    assert _admit(waiting, 0, 2, True, free) == 1           # the timing lane runs: a model-free one, on one core
    assert _admit(waiting, 1, 2, True, free) is None        # the other core is the timing lane's
    assert _admit([0, 2], 0, 2, True, free) is None         # model experiments wait for the timing lane
    assert _admit(waiting, 1, 2, False, free) == 0          # lane done: the longest first, on every core
    assert _admit(waiting, 2, 2, False, free) is None
    assert _admit(waiting, 1, 3, True, free) == 1           # more cores: all but one beside the lane


def test_parallel_suite_rejects_bad_jobs(tmp_path) -> None:
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="jobs"):
            run_suite([COIN], profile="smoke", runs_dir=tmp_path, jobs=bad)


# -- malformed records, disk errors, bad flags (issue 20) ------------------------------------------------------------

def _break(path, how: str) -> bytes | None:
    """Put a malformed record at ``path``: a field of the wrong type, or a directory. Returns the bytes written."""
    if how == "directory":
        path.unlink()
        path.mkdir()
        (path / "inside").write_text("kept")
        return None
    field, value = how.split("=", 1)
    d = json.loads(path.read_text())
    d[field] = json.loads(value)
    path.write_text(json.dumps(d))
    return path.read_bytes()


@pytest.mark.parametrize("how,field", [("metrics=null", "field metrics"), ("verdicts=[]", "field verdicts"),
                                       ('wall_seconds="fast"', "field wall_seconds"),
                                       ("directory", "(whole file)")])
@pytest.mark.parametrize("resume", [True, False])
def test_a_malformed_record_is_moved_aside_and_the_experiment_runs_again(tmp_path, capsys, how, field,
                                                                         resume) -> None:
    """``run`` and ``run --fresh`` over a wrong-typed record (or a directory) both crashed before; ``--fresh``
    measured and then lost the result. Now: one line naming the file and the field, the bad file kept in history
    byte for byte, and the new result stored."""
    run_experiment(COIN, profile="smoke", runs_dir=tmp_path)
    path = record_path(tmp_path, "smoke", "fake.coin")
    content = _break(path, how)
    capsys.readouterr()
    rec = run_experiment(COIN, profile="smoke", runs_dir=tmp_path, resume=resume)
    assert rec.status == "ok" and rec.metrics["n"].value == 20
    assert load_record(tmp_path, "smoke", "fake.coin").to_bytes() == rec.to_bytes()  # stored
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(path) in err and field in err and "counts as not run" in err
    moved = list((tmp_path / "smoke" / "history").glob("fake.coin.malformed-*.json"))
    assert len(moved) == 1 and str(moved[0]) in err
    if content is None:
        assert (moved[0] / "inside").read_text() == "kept"
    else:
        assert moved[0].read_bytes() == content


def test_a_record_naming_another_experiment_is_malformed(tmp_path, capsys) -> None:
    run_experiment(COIN, profile="smoke", runs_dir=tmp_path)
    path = record_path(tmp_path, "smoke", "fake.coin")
    path.rename(record_path(tmp_path, "smoke", "fake.crash"))
    assert load_record(tmp_path, "smoke", "fake.crash") is None
    assert "field experiment_id: is 'fake.coin', not this file's 'fake.crash'" in capsys.readouterr().err


def test_a_run_that_cannot_set_the_old_record_aside_keeps_its_new_record(tmp_path) -> None:
    """A failure after measuring (here history/ cannot be made, so the old ok record cannot be kept) must not
    lose the new result: it is already on disk, and the error names where."""
    old = run_experiment(COIN, profile="smoke", runs_dir=tmp_path)
    (tmp_path / "smoke" / "history").write_text("a file where history/ should be")
    with pytest.raises(OSError, match="the new record of fake.coin is kept at") as info:
        run_experiment(COIN, profile="smoke", runs_dir=tmp_path, resume=False, overrides={"n": "30"})
    assert info.value.filename == str(tmp_path / "smoke" / "history")
    kept = info.value.strerror.rsplit("kept at ", 1)[1]
    new = RunRecord.read(kept)
    assert new.setup["n"] == 30 and new.metrics["n"].value == 30
    assert load_record(tmp_path, "smoke", "fake.coin").started_at == old.started_at  # the old one is untouched


def test_history_copies_of_records_started_in_the_same_second_do_not_overwrite_each_other(tmp_path) -> None:
    run_experiment(COIN, profile="smoke", runs_dir=tmp_path)
    path = record_path(tmp_path, "smoke", "fake.coin")
    hist = tmp_path / "smoke" / "history"
    hist.mkdir()
    taken = hist / "fake.coin-20260622T100000+0000.json"
    taken.write_text("an older copy")
    for started_at in ("2026-06-22T10:00:00+00:00", "../../../escape"):  # started_at is only checked to be a string
        d = json.loads(path.read_text())
        d["started_at"] = started_at
        path.write_text(json.dumps(d))
        run_experiment(COIN, profile="smoke", runs_dir=tmp_path, resume=False)
    assert taken.read_text() == "an older copy"
    assert json.loads((hist / "fake.coin-20260622T100000+0000.2.json").read_text())["started_at"] == \
        "2026-06-22T10:00:00+00:00"
    assert json.loads((hist / "fake.coin-......escape.json").read_text())["started_at"] == "../../../escape"
    assert sorted(p.name for p in tmp_path.rglob("*escape*")) == ["fake.coin-......escape.json"]


def test_data_a_record_cannot_hold_is_the_runs_error_record(tmp_path) -> None:
    def measure(setup, ctx):
        ctx.data["handle"] = object()
        return COIN.measure(setup, ctx)

    rec = run_experiment(dataclasses.replace(COIN, measure=measure), profile="smoke", runs_dir=tmp_path)
    assert rec.status == "error" and "not JSON serialisable: object" in rec.error
    assert load_record(tmp_path, "smoke", "fake.coin").status == "error"


@pytest.mark.parametrize("model", ["", "   ", "\t"])
def test_an_empty_model_spec_is_bad_input_not_the_default(tmp_path, model) -> None:
    with pytest.raises(ValueError, match="is empty; name a model spec"):
        run_experiment(ECHO, profile="smoke", model=model, runs_dir=tmp_path)
    with pytest.raises(ValueError, match="is empty"):
        run_suite([ECHO, COIN], profile="smoke", model=model, runs_dir=tmp_path)
    assert not tmp_path.joinpath("smoke").exists()


def test_ray_address_needs_the_ray_executor(tmp_path) -> None:
    with pytest.raises(ValueError, match="--ray-address needs --executor ray"):
        run_experiment(COIN, profile="smoke", runs_dir=tmp_path, ray_address="127.0.0.1:6379")
    assert not tmp_path.joinpath("smoke").exists()
