from __future__ import annotations

import numpy as np
import pytest

from agentmill.envs.pathstar import BWD, FWD, PathStarMultigraph
from agentmill.methods.backtrack_maze import text as tx


def test_state_lines_follow_the_spec() -> None:
    env = PathStarMultigraph(4, 4, 2)
    assert tx.state_line(env, 2, BWD) == "depth 2 of 4, last move back. Moves: F1 F2, B. Move:"
    assert tx.state_line(env, 1, FWD) == "depth 1 of 4, last move forward. Moves: F1 F2, B. Move:"
    assert tx.state_line(env, 0, FWD) == "at the start. Moves: A1 A2 A3 A4. Move:"
    assert [tx.move_text(env, 1, a) for a in range(3)] == [" F1", " F2", " B"]
    assert tx.move_text(env, 0, 3) == " A4"
    with pytest.raises(ValueError):
        tx.state_line(env, 5, FWD)


def test_golden_steps_never_show_a_backward_facing_context_or_a_back_move() -> None:
    env = PathStarMultigraph(4, 4, 2)
    steps = tx.golden_steps(env, np.random.default_rng(0), 400)
    assert not any("last move back" in c for c, _ in steps)
    assert not any(m == " B" for _, m in steps)
    assert {m for _, m in steps} == {" A1", " A2", " A3", " A4", " F1", " F2"}


def test_probe_and_sft_on_a_tiny_transformer() -> None:
    pytest.importorskip("torch")
    from agentmill.lm import load_lm

    lm = load_lm("tiny:new")
    env = PathStarMultigraph(2, 3, 1)
    before = [p.detach().clone() for p in lm.model.parameters()]
    pb = tx.p_back(lm, tx.base_model(lm), env, BWD)
    assert pb.shape == (2, len(tx.HEADERS)) and np.all((pb > 0) & (pb < 1))
    model, log = tx.train_text_sft(lm, env, steps=2, lr=1e-2, batch=2, seed=0)
    assert log.params_moved > 0 and len(log.losses) == 2
    # the loaded model (shared by other experiments in the process) is untouched
    assert all(bool((p.detach() == q).all()) for p, q in zip(lm.model.parameters(), before))
    after = tx.p_back(lm, model, env, BWD)
    assert not np.allclose(after, pb)
    with pytest.raises(ValueError):
        tx.train_text_sft(lm, env, steps=0, lr=1e-3, batch=2, seed=0)


def test_black_box_backends_are_refused() -> None:
    class Box:
        pass

    with pytest.raises(TypeError, match="torch module"):
        tx.base_model(Box())
