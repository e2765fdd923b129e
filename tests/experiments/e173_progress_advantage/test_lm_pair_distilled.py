"""E173 P-6a: the smoke profile through the CLI's runner (tiny pair, no verdict). That a fresh pair starts at
π_ref is tested with the pair builder, tests/lm/test_candidate_pair.py."""

from __future__ import annotations

from agentmill.experiments import get
from agentmill.experiments.runner import record_path, run_experiment


def test_smoke_record_shape(tmp_path) -> None:
    exp = get("e173.progress_lm_pair_distilled")
    rec = run_experiment(exp, profile="smoke", runs_dir=tmp_path, raise_errors=True)
    assert rec.status == "ok" and record_path(tmp_path, "smoke", exp.id).exists()
    assert rec.verdicts == {"P-6a": "not_judged"}
    m = rec.metrics
    for k in ("spearman_candidates_observed", "spearman_free_text", "spearman_wrong_reference",
              "spearman_policy_logprob", "final_mean_kl"):
        assert k in m, k
    assert -1 <= m["spearman_candidates_observed"].value <= 1
    assert m["final_mean_kl"].value < m["initial_mean_kl"].value  # one distillation epoch moved π_θ towards π*
    assert len(rec.data["points"]["A"]) == m["n_state_action_pairs"].value > 0
    assert exp.plots(rec.data, tmp_path)[0].stat().st_size > 5000


def test_a_killed_run_resumes_at_the_next_layout_with_the_same_numbers(tmp_path) -> None:
    """Two layouts fitted in one go, then the checkpoint cut back to the first layout plus a torn line (a kill
    mid-write): the resumed run fits only the second layout and reproduces every column bit for bit."""
    from dataclasses import replace

    from agentmill.experiments.e173_progress_advantage import lm_pair_distilled as P
    from agentmill.experiments.protocol import RunContext

    s = replace(P.SETUPS["smoke"], n_layouts=2)
    ctx = RunContext(profile="smoke", model="none", executor=None, work_dir=tmp_path / "a")
    whole = P.measure(s, ctx)
    ckpt = P.checkpoint_path(s, ctx.work_dir)
    assert ctx.data["layouts_resumed"] == 0 and ckpt.name == ctx.data["checkpoint"]
    first, second = ckpt.read_text(encoding="utf-8").splitlines()
    ckpt.write_text(first + "\n" + second[: len(second) // 2], encoding="utf-8")

    ctx2 = RunContext(profile="smoke", model="none", executor=None, work_dir=tmp_path / "a")
    again = P.measure(s, ctx2)
    assert ctx2.data["layouts_resumed"] == 1
    assert ctx2.data["points"] == ctx.data["points"]
    for k, est in whole.items():
        if not k.startswith("seconds_"):  # wall time of the layout refitted after the kill
            assert (again[k].value, again[k].lo, again[k].hi) == (est.value, est.lo, est.hi), k
    # the checkpoint's name leaves out what only the analysis reads: a different bootstrap reuses every layout
    assert P.checkpoint_path(replace(s, n_boot=7, n_layouts=9), ctx.work_dir) == ckpt
    assert P.checkpoint_path(replace(s, lr=s.lr / 2), ctx.work_dir) != ckpt
