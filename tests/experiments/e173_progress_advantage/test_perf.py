"""E173 performance experiment: the smoke profile (canned scorers, no model load) through the CLI's runner."""

from __future__ import annotations

from agentmill.experiments import get
from agentmill.experiments.runner import run_experiment


def test_perf_smoke(tmp_path) -> None:
    exp = get("e173.progress_perf")
    rec = run_experiment(exp, profile="smoke", runs_dir=tmp_path, raise_errors=True)
    assert rec.status == "ok" and set(rec.verdicts.values()) == {"not_judged"}
    m = rec.metrics
    assert m["perf5_max_abs_diff_onepass_vs_prefix"].value < 1e-10  # both designs give the same scores
    assert m["perf5_onepass_s"].value > 0 and m["perf5_prefix_s"].value > 0
    assert m["perf8_vi_ms"].lo <= m["perf8_vi_ms"].value <= m["perf8_vi_ms"].hi
    assert "perf6_memory_ratio" not in m  # PERF-6 needs the real model; skipped in smoke


def test_head_episode_keeps_the_first_actions() -> None:
    """The warm-up episode is the prefix up to the n-th action, its candidates cut alike; short episodes pass."""
    import pytest

    from agentmill.experiments.e173_progress_advantage.perf import head_episode
    from agentmill.methods.progress_advantage.scorer import Episode

    ep = Episode(("o1", "a1", "o2", "a2", "o3", "a3"), (False, True, False, True, False, True),
                 candidates=(("a1",), ("a2", "x"), ("a3",)), end_of_turn="\n")
    h = head_episode(ep, 2)
    assert h.segments == ("o1", "a1", "o2", "a2") and h.is_action == (False, True, False, True)
    assert h.candidates == (("a1",), ("a2", "x")) and h.end_of_turn == "\n"
    assert head_episode(ep, 3) is ep and head_episode(ep, 5) is ep
    with pytest.raises(ValueError, match="n_actions"):
        head_episode(ep, 0)
