"""Human-data fixture, human replay and committed theory code: ``ReplayCohort`` serves the committed observations, and
``load_theory_yaml`` turns the repository's theory files (the 4 seed YAMLs, pi_1…pi_7) into sandboxed CodeTheories."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from agentmill.methods.autocog import library as L
from agentmill.methods.autocog.cohorts import ReplayCohort, _on_design_data
from agentmill.methods.autocog.design import Design
from agentmill.methods.autocog.metrics import TemplateMetric
from agentmill.methods.autocog.theory import (Bind, Interval, VectorInterval, load_theory_yaml,
                                              theory_from_repo_record)

FIX = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "autocog_human"

GOOD = """\
name: "tiny"
theory: "prefer A"
predict: |
  def predict(parameters, stimulus, history):
      p = 0.5 + 0.5 * float(parameters["k"])
      return np.array([p, 1.0 - p])
policy: |
  def policy(probabilities):
      return int(np.argmax(probabilities))
parameters:
  k: "[0.0, 1.0]"
  v: "validities"
"""


@pytest.fixture(scope="module")
def cohort() -> ReplayCohort:
    return ReplayCohort(FIX)


# --- load_theory_yaml -------------------------------------------------------------------------------------------


def test_seed_yamls_load_with_their_priors_and_policy() -> None:
    ttb = load_theory_yaml(FIX / "theories" / "ttb.yaml")
    assert ttb.policy == "argmax" and not ttb.history_dependent and ttb.name.startswith("Take The Best")
    assert ttb.params.specs == {"beta": Interval(0.1, 20.0), "epsilon": Interval(0.0, 0.5),
                                "validities": Bind("validities")}
    wadd = load_theory_yaml(str(FIX / "theories" / "wadd.yaml"))  # a string path works too
    assert wadd.params.specs["weights"] == VectorInterval(0.0, 1.0) and wadd.params.n_free() == 3
    for n in ("tallying", "ew"):
        assert load_theory_yaml(FIX / "theories" / f"{n}.yaml").params.n_free() == 2


def test_yaml_text_runs_in_the_sandbox_and_matches_the_library() -> None:
    t = load_theory_yaml(GOOD)
    assert t.name == "tiny" and t.policy == "argmax"
    p = t.prob_batch({"k": np.array([0.2]), "v": np.array([[0.9, 0.8]])}, np.zeros((1, 2, 2)), np.ones((1, 2, 2)),
                     {})
    assert np.allclose(p, 0.6)
    # the vendored TTB through the sandbox = the library TTB (same beta/eps; parameter names are the YAML's)
    ttb = load_theory_yaml(FIX / "theories" / "ttb.yaml")
    A = np.array([[[1, 0, 0], [0, 1, 1], [1, 1, 0]]], float)
    B = np.array([[[0, 1, 1], [1, 0, 0], [1, 0, 1]]], float)
    v = np.array([[0.9, 0.8, 0.7]])
    ours = L.ttb().prob_batch({"beta": np.array([2.0]), "eps": np.array([0.2]), "validities": v}, A, B,
                              {"validities": v[0]})
    theirs = ttb.prob_batch({"beta": np.array([2.0]), "epsilon": np.array([0.2]), "validities": v}, A, B, {})
    assert np.abs(ours - theirs).max() < 1e-12 and ours[0, 0] > 0.5 > ours[0, 1]


def test_sampling_policy_and_history_use_are_read_from_the_source() -> None:
    src = GOOD.replace("return int(np.argmax(probabilities))",
                       "return int(np.random.choice(len(probabilities), p=probabilities))")
    assert load_theory_yaml(src).policy == "sample"
    hist = GOOD.replace('p = 0.5', 'p = 0.4 if len(history["response"]) else 0.5')
    assert load_theory_yaml(hist).history_dependent and not load_theory_yaml(GOOD).history_dependent


@pytest.mark.parametrize("edit, field", [
    (lambda s: s.replace('name: "tiny"\n', ""), "'name'"),
    (lambda s: s.replace('theory: "prefer A"\n', 'theory: ""\n'), "'theory'"),
    (lambda s: s.replace('"[0.0, 1.0]"', '"[0.0, oops]"'), "'parameters'"),
    (lambda s: s.replace('"[0.0, 1.0]"', '"[1.0, 0.0]"'), "'parameters'"),
    (lambda s: s.replace("def predict(", "def forecast("), "'predict'"),
    (lambda s: s.replace("      p = 0.5", "      import os\n      p = 0.5"), "'predict'"),
    (lambda s: s.replace("np.argmax(probabilities)", "probabilities[0] > 0.5"), "'policy'"),
    (lambda s: s.replace("def policy(probabilities):", "def policy(probabilities:"), "'policy'"),
    (lambda s: s.split("parameters:")[0], "'parameters'"),
    (lambda s: "name: [unclosed", "not parseable"),
    (lambda s: "- just\n- a list\n", "mapping"),
])
def test_bad_yaml_names_the_field(edit, field) -> None:
    with pytest.raises(ValueError, match=field):
        load_theory_yaml(edit(GOOD))


def test_missing_file_is_a_value_error(tmp_path) -> None:
    with pytest.raises(ValueError, match="no such file"):
        load_theory_yaml(tmp_path / "nope.yaml")


def test_committed_pi_sources_load_except_the_scipy_one() -> None:
    """Committed theory code [C]: 13 of the 14 committed theories load; binary pi_5 imports scipy.stats.rankdata, which
    the sandbox refuses (numpy/math only), so it is refused at load time with the field named."""
    loaded, refused = {}, {}
    for run in ("binary", "cardinal"):
        theories = json.loads((FIX / run / "observations.json").read_text())["theories"]
        for label, rec in theories.items():
            try:
                loaded[f"{run}/{label}"] = theory_from_repo_record(rec, name=f"{run}/{label}")
            except ValueError as e:
                refused[f"{run}/{label}"] = str(e)
    assert list(refused) == ["binary/pi_5"] and "'predict'" in refused["binary/pi_5"]
    assert "from … import" in refused["binary/pi_5"]
    assert len(loaded) == 13
    assert {k for k, t in loaded.items() if t.policy == "argmax"} == {
        "binary/pi_1", "binary/pi_2", "cardinal/pi_1", "cardinal/pi_2"}  # the seeds; all admitted ones sample
    assert loaded["binary/pi_4"].params.specs["gamma"] == Interval(0.0, 10.0)


@pytest.mark.slow
def test_committed_pi_theories_run_in_the_sandbox(cohort) -> None:
    """Every loadable pi runs on its run's first design through the sandbox with valid probabilities (one child
    per theory, ~13 children)."""
    from agentmill.methods.autocog.simulate import simulate

    for run in ("binary", "cardinal"):
        obs = next(o for o in cohort.observations if o.run == run)
        theories = json.loads((FIX / run / "observations.json").read_text())["theories"]
        for label, rec in theories.items():
            if (run, label) == ("binary", "pi_5"):
                continue
            d = simulate(theory_from_repo_record(rec, name=label), obs.design, 3, (0,))
            assert d.resp.shape == (3, obs.design.n_trials) and np.all((d.prob_a >= 0) & (d.prob_a <= 1)), label


# --- ReplayCohort ------------------------------------------------------------------------------------------------


def test_replay_cohort_serves_the_committed_observations(cohort) -> None:
    assert len(cohort.observations) == 20 and cohort.describe()["commit"].startswith("6761c69e")
    o = cohort.observation("binary/round_000_obs_00")
    assert o.design.validities == (0.95, 0.8, 0.7, 0.65) and o.design.n_unique == 8
    assert o.data.resp.shape == (25, 96) and len(o.rows) == 2400 and o.real_value == pytest.approx(0.4175)
    # Data's stimuli reproduce the file's rows of the first subject, trial by trial
    A, B = o.data.stimuli()
    first = [r for r in o.rows if r["subject_id"] == o.rows[0]["subject_id"]]
    assert [list(map(int, a)) for a in A[0]] == [r["option_a_ratings"] for r in first]
    assert o.data.resp[0].tolist() == [r["response"] for r in first]
    # the template metric on the replayed participants = a hand count on the rows
    assert TemplateMetric("p_choose_a")(o.data).value == pytest.approx(
        np.mean([r["response"] == 0 for r in o.rows]))
    with pytest.raises(ValueError, match="unknown replay observation"):
        cohort.observation("binary/round_009_obs_00")


def test_replay_cohort_flags_off_design_participants(cohort) -> None:
    """[D] The cardinal round 2-4 files mix in participants shown the sibling observation's pairs."""
    off = {o.obs_id: len(o.off_design_subjects) for o in cohort.observations if o.off_design_subjects}
    assert set(off) == {f"cardinal/round_00{r}_obs_0{k}" for r in (2, 3, 4) for k in (0, 1)}
    assert all(5 <= n <= 6 for n in off.values())
    o = cohort.observation("cardinal/round_002_obs_00")
    assert o.data.resp.shape[0] + len(o.off_design_subjects) == len({r["subject_id"] for r in o.rows})


def test_on_design_split_by_hand() -> None:
    d = Design.make([0.9, 0.6], [[1, 0]], [[0, 1]], max_trials=2)
    rows = [{"subject_id": 0, "option_a_ratings": [1, 0], "option_b_ratings": [0, 1], "response": r} for r in (0, 1)]
    rows += [{"subject_id": 1, "option_a_ratings": [0, 1], "option_b_ratings": [1, 0], "response": 0}] * 2  # mirror
    rows += [{"subject_id": 2, "option_a_ratings": [1, 0], "option_b_ratings": [0, 1], "response": 0}]  # too short
    data, off = _on_design_data(d, rows)
    assert data.resp.tolist() == [[0, 1]] and data.pair_idx.tolist() == [[0, 0]] and off == (1, 2)


def test_collect_by_id_by_design_or_pending(cohort) -> None:
    o = cohort.observation("binary/round_001_obs_01")
    assert cohort.collect(o.obs_id, o.design, 25).resp.shape == (25, 96)
    got = cohort.collect("r1_obs_7", o.design, 10)  # the loop's own id, same design
    assert got.resp.shape == (10, 96) and np.array_equal(got.resp, o.data.resp[:10])
    other = Design.make([0.9, 0.6], [[1, 0]], [[0, 1]])
    assert cohort.collect("r1_obs_8", other, 25) is None  # no human data for a new design: pending


def test_replay_cohort_refuses_a_tampered_fixture(tmp_path) -> None:
    import shutil

    shutil.copytree(FIX, tmp_path / "fx")
    p = tmp_path / "fx" / "binary" / "leaderboard_final.json"
    p.write_text(p.read_text().replace("0.", "0.9", 1))
    with pytest.raises(ValueError, match="integrity check failed"):
        ReplayCohort(tmp_path / "fx")


def test_predict_with_a_template_is_deterministic_and_separates_policies(cohort) -> None:
    o = cohort.observation("binary/round_000_obs_00")
    m = TemplateMetric("agree", {"theory": {**L.ttb().spec, "label": "ttb"}})
    pa = cohort.predict(L.ttb(policy="argmax"), o, metric=m)
    ps = cohort.predict(L.ttb(policy="sample"), o, metric=m)
    assert pa == 1.0 and 0.5 < ps < 1.0 and ps == cohort.predict(L.ttb(policy="sample"), o, metric=m)
    assert m(o.data).value < ps  # people follow TTB less than TTB's own sampling variant does


@pytest.mark.slow
def test_predict_with_the_committed_metric_matches_the_authors_seed_prediction(cohort) -> None:
    """Library TTB argmax under the committed metric (sandboxed pandas source) gives the committed pi_1 value."""
    o = cohort.observation("binary/round_000_obs_00")
    assert cohort.predict(L.ttb(policy="argmax"), o) == pytest.approx(o.predicted_values["pi_1"])
