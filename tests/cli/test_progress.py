"""``agentmill progress``: scoring with the tiny:/scripted: backends, best-of-N / AUROC / attribution on a
hand-checkable score file, and bad input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from agentmill.cli.main import main
from agentmill.core.types import StepTable
from agentmill.lm import load_lm
from agentmill.methods.progress_advantage.config import PAConfig
from agentmill.methods.progress_advantage.scorer import (ProgressAdvantageScorer, StepScores, episodes_from_table,
                                                         read_scores, write_scores)

TINY_A = "tiny:new?seed=1&max_len=1024"
TINY_B = "tiny:new?seed=2&max_len=1024"


def _json_after(text: str) -> dict:
    return json.loads(text[text.index("{\n"):])


@pytest.fixture(scope="module")
def short_rollouts(tmp_path_factory):
    """4 KeyDoor trajectories of at most 3 steps (short enough for the 512-1024-token fakes)."""
    path = tmp_path_factory.mktemp("r") / "r.jsonl"
    assert main(["envs", "rollout", "--env", "keydoor-v0", "--groups", "2", "--n", "2", "--max-steps", "3",
                 "--no-calibrate", "--out", str(path)]) == 0
    return path


def test_score_equals_the_library_and_beta_scales(short_rollouts, tmp_path, capsys):
    out1, out2 = tmp_path / "s1.json", tmp_path / "s2.json"
    assert main(["progress", "score", "--in", str(short_rollouts), "--policy", TINY_A, "--reference", TINY_B,
                 "--out", str(out1)]) == 0
    printed = _json_after(capsys.readouterr().out)
    assert main(["progress", "score", "--in", str(short_rollouts), "--policy", TINY_A, "--reference", TINY_B,
                 "--beta", "2", "--out", str(out2)]) == 0
    table, _ = StepTable.from_jsonl(str(short_rollouts))
    scorer = ProgressAdvantageScorer(load_lm(TINY_A), load_lm(TINY_B), PAConfig())
    keyed = episodes_from_table(table)
    ref = scorer.score_many([ep for _, ep in keyed])
    got = read_scores(out1, identity=scorer.identity())  # the pair's identity is stored: re-reading it checks
    assert [k for k, _ in got] == [k for k, _ in keyed]
    for (_, g), r in zip(got, ref):
        np.testing.assert_allclose(g.A, r.A, rtol=0, atol=1e-9)
        assert not np.isnan(g.A).any() and np.abs(g.A).max() > 0
    doubled = read_scores(out2)
    for (_, g1), (_, g2) in zip(got, doubled):
        np.testing.assert_allclose(g2.A, 2 * g1.A, rtol=1e-9, atol=1e-9)
    assert printed["identity"]["policy"] == TINY_A and printed["trajectories"] == 4 and printed["missing_steps"] == 0
    with pytest.raises(ValueError, match="another pair"):  # never re-used for another β silently
        read_scores(out2, identity=scorer.identity())


def test_identical_pair_scores_zero_and_warns(short_rollouts, tmp_path, capsys):
    """Negative control π_θ ≡ π_ref: every step score is 0 and the CLI says the pair carries no signal."""
    out = tmp_path / "s.json"
    assert main(["progress", "score", "--in", str(short_rollouts), "--policy", "scripted:whitebox",
                 "--reference", "scripted:whitebox", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "policy equals the reference" in err and err.count("\n") == 1
    assert all(np.all(s.A == 0) for _, s in read_scores(out))


def test_candidate_action_space_equals_the_library(short_rollouts, tmp_path):
    """--action-space candidates: log π(a|s) renormalised over the admissible set, for each model (one trajectory)."""
    one = tmp_path / "one.jsonl"
    one.write_text(short_rollouts.read_text().splitlines()[0] + "\n")
    out = tmp_path / "s.json"
    assert main(["progress", "score", "--in", str(one), "--policy", TINY_A, "--reference", TINY_B,
                 "--action-space", "candidates", "--out", str(out)]) == 0
    table, _ = StepTable.from_jsonl(str(one))
    scorer = ProgressAdvantageScorer(load_lm(TINY_A), load_lm(TINY_B), PAConfig(action_space="candidates"))
    ref = scorer.score_many([ep for _, ep in episodes_from_table(table)])[0]
    (_, got), = read_scores(out, identity=scorer.identity())
    np.testing.assert_allclose(got.A, ref.A, rtol=0, atol=1e-9)
    assert np.all(got.policy_logprob < 0) and np.abs(got.A).max() > 0


# ------------------------------------------------------------------------------------------ hand-checkable analysis
def _rollout(gid, tid, success, progress, dead_end):
    steps = [{"t": t, "obs": f"room {t}", "info": {}, "action": f"act{t}", "reward": 0.0,
              "label": {"dist_before": -1, "dist_after": -1, "progress": p, "dead_end": d}}
             for t, (p, d) in enumerate(zip(progress, dead_end))]
    steps[-1]["reward"] = 1.0 if success else 0.0
    return {"schema": "agentmill.rollout/1", "group_id": gid, "traj_id": tid, "success": success,
            "end": "terminated" if success else "truncated", "final_obs": "end", "steps": steps}


SCORES = {("g1", "a"): [1.0, 1.0], ("g1", "b"): [0.5, -2.0], ("g2", "c"): [-1.0, 0.0], ("g2", "d"): [0.2, 0.3]}


@pytest.fixture()
def hand(tmp_path):
    """Two groups of two 2-step trajectories. Sums: a 2 (won), b -1.5 (lost, dead end at step 1), c -1 (lost, dead
    end at step 0), d 0.5 (won)."""
    r = tmp_path / "r.jsonl"
    rows = [_rollout("g1", "a", True, [1, 1], [False, False]), _rollout("g1", "b", False, [1, 0], [False, True]),
            _rollout("g2", "c", False, [0, 0], [True, False]), _rollout("g2", "d", True, [1, 1], [False, False])]
    r.write_text("".join(json.dumps(x) + "\n" for x in rows))
    s = tmp_path / "s.json"
    nan2 = np.full(2, np.nan)
    write_scores(s, [(k, StepScores(np.array(v), nan2, nan2, None, ("", ""))) for k, v in SCORES.items()],
                 {"policy": "p", "reference": "q"})
    return r, s


def test_bon_picks_the_highest_sum_per_group(hand, capsys):
    r, s = hand
    assert main(["progress", "bon", "--in", str(s), "--rollouts", str(r)]) == 0
    out = _json_after(capsys.readouterr().out)
    assert out["best_of_n_success"] == 1.0 and out["pass_at_1"] == 0.5 and out["pass_at_n"] == 1.0
    assert out["tasks"] == 2 and out["n_per_task"] == [2] and out["gain_over_random_pick"]["value"] == 0.5
    # with "min" as step aggregation g1 still picks a (min 1 > -2) and g2 picks d (0.2 > -1)
    assert main(["progress", "bon", "--in", str(s), "--rollouts", str(r), "--step-agg", "last"]) == 0
    # "last": a 1 vs b -2 -> a; c 0 vs d 0.3 -> d
    assert _json_after(capsys.readouterr().out)["best_of_n_success"] == 1.0


def test_auroc_on_separable_scores_is_one(hand, capsys):
    r, s = hand
    assert main(["progress", "auroc", "--in", str(s), "--rollouts", str(r), "--n-boot", "200"]) == 0
    out = _json_after(capsys.readouterr().out)
    assert out["success_auroc"]["value"] == 1.0
    # errors (progress 0) have A in {-2, -1, 0}; progress steps {1, 1, 0.5, 0.2, 0.3}: every error ranks lower
    se = out["step_error_auroc"]
    assert se["value"] == 1.0 and se["steps"] == 8 and se["errors"] == 3 and se["unknown_label"] == 0
    assert out["return_spearman"]["value"] == pytest.approx(2 / np.sqrt(5), abs=1e-12)  # ranks 4,1,2,3 vs ties


def test_attribute_blames_the_dead_end_steps(hand, tmp_path, capsys):
    r, s = hand
    picks = tmp_path / "picks.jsonl"
    assert main(["progress", "attribute", "--in", str(s), "--rollouts", str(r), "--out", str(picks)]) == 0
    out = _json_after(capsys.readouterr().out)
    # b: running sums (0.5, -1.5) -> step 1; c: (-1, -1) -> step 0 (ties go to the earliest)
    rows = [json.loads(x) for x in picks.read_text().splitlines()]
    assert [(p["traj_id"], p["step"], p["action"], p["true_step"]) for p in rows] == [("b", 1, "act1", 1),
                                                                                       ("c", 0, "act0", 0)]
    known = out["with_known_decisive_step"]
    assert out["failed_trajectories"] == 2 and known["accuracy"] == 1.0 and known["mae_steps"] == 0.0
    assert known["first_step_baseline_accuracy"] == 0.5 and known["random_step_baseline_accuracy"] == 0.5
    assert main(["progress", "attribute", "--in", str(s), "--rollouts", str(r), "--method", "sharpest_drop"]) == 0
    # sharpest_drop: b -> argmin (0.5, -2) = 1; c -> argmin (-1, 0) = 0
    assert _json_after(capsys.readouterr().out)["with_known_decisive_step"]["accuracy"] == 1.0


def test_scores_from_other_rollouts_are_refused(hand, tmp_path, capsys):
    r, s = hand
    other = tmp_path / "other.jsonl"
    other.write_text(r.read_text().replace('"traj_id": "d"', '"traj_id": "e"'))
    longer = tmp_path / "longer.jsonl"
    rows = [json.loads(x) for x in r.read_text().splitlines()]
    rows[0]["steps"].append({**rows[0]["steps"][-1], "t": 2})
    rows[0]["steps"][1]["reward"] = 0.0
    longer.write_text("".join(json.dumps(x) + "\n" for x in rows))
    for path in (other, longer):
        assert main(["progress", "bon", "--in", str(s), "--rollouts", str(path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and "('g2', 'd') is not in" in err[0] and "3 steps in" in err[1]


@pytest.mark.parametrize("argv,needle", [
    (["score", "--policy", TINY_A, "--reference", TINY_B, "--beta", "0"], "beta must be > 0"),
    (["score", "--policy", TINY_A, "--reference", TINY_B, "--beta", "inf"], "--beta must be a finite number"),
    (["score", "--policy", TINY_A, "--reference", TINY_B, "--token-agg", "median"], "token_agg must be one of"),
    (["score", "--policy", TINY_A, "--reference", TINY_B, "--action-space", "tools"], "action_space must be one of"),
    (["score", "--policy", TINY_A, "--reference", TINY_B, "--batch-size", "0"], "--batch-size must be >= 1"),
    (["score", "--policy", "tinny:new", "--reference", TINY_B], "unknown model backend"),
    (["score", "--policy", "hf:smollm2+adapter=/x", "--reference", "hf:gemma3-270m"], "--reference must be hf:smollm2"),
    (["score", "--policy", TINY_A, "--reference", "hf:smollm2+adapter=/x"], "put +adapter= on --policy"),
    (["score", "--policy", "tiny:/nonexistent/model", "--reference", TINY_B], "no saved tiny model"),
])
def test_score_bad_input(short_rollouts, tmp_path, capsys, argv, needle):
    out = tmp_path / "s.json"
    assert main(["progress", argv[0], "--in", str(short_rollouts), *argv[1:], "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1 and "Traceback" not in err
    assert not list(tmp_path.iterdir())


def test_analysis_bad_input(hand, tmp_path, capsys):
    r, s = hand
    notjson = tmp_path / "x.json"
    notjson.write_text("{")
    other = tmp_path / "y.json"
    other.write_text(json.dumps({"schema": "something/1"}))
    cases = [(["bon", "--in", str(tmp_path / "missing.json")], "no such file"),
             (["bon", "--in", str(notjson)], "not JSON"),
             (["auroc", "--in", str(other)], "not a progress-score file"),
             (["bon", "--in", str(s), "--step-agg", "median"], "--step-agg must be one of"),
             (["attribute", "--in", str(s), "--method", "blame_all"], "--method must be one of")]
    for argv, needle in cases:
        assert main(["progress", *argv, "--rollouts", str(r)]) == 2
        err = capsys.readouterr().err
        assert needle in err and err.count("\n") == 1, (argv, err)
    assert main(["progress", "bon", "--in", str(s), "--rollouts", str(tmp_path / "none.jsonl")]) == 2
    assert "--rollouts: no such file" in capsys.readouterr().err
