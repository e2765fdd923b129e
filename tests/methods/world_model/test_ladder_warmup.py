"""The oracle simulator, the reference rungs of the fidelity ladder, and the warm-up pieces (agent prompt, expert
decisions, shuffled actions, candidate scoring, BC)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from agentmill.envs.keydoor import KeyDoorEnv, generate_layout
from agentmill.methods.world_model.data import WM_WORLD, collect_keydoor
from agentmill.methods.world_model.ladder import OraclePredictor
from agentmill.methods.world_model.simulator import SimulatedEnv
from agentmill.methods.world_model.warmup import agent_prompt, expert_decisions, shuffle_actions


def test_oracle_predictor_reproduces_the_real_env_including_invalid_commands() -> None:
    for lseed in (3, 4, 5):
        lay = generate_layout(lseed, WM_WORLD)
        real, sim = KeyDoorEnv(lay, WM_WORLD), SimulatedEnv(OraclePredictor(lay, WM_WORLD), lay, WM_WORLD)
        for ep in range(4):
            rng = np.random.default_rng(ep)
            o1, i1 = real.reset(seed=ep)
            o2, _ = sim.reset(seed=ep)
            assert o1 == o2
            done = False
            while not done:
                cmds = i1["admissible_commands"]
                a = cmds[int(rng.integers(len(cmds)))] if rng.random() < 0.85 else "dance"
                o1, r1, t1, u1, i1 = real.step(a)
                o2, r2, t2, u2, _ = sim.step(a)
                assert (o1, r1, t1, u1) == (o2, r2, t2, u2)
                done = t1 or u1


def test_oracle_predictor_refuses_slips_and_returns_none_for_unreachable_text() -> None:
    lay = generate_layout(3, WM_WORLD)
    with pytest.raises(ValueError, match="deterministic"):
        OraclePredictor(lay, dataclasses.replace(WM_WORLD, slip=0.2))
    o = OraclePredictor(lay, WM_WORLD)
    assert o.predict_next([("-= Nowhere =-\nYou see nothing special.\nExits: up.\nYou are carrying nothing.",
                            "look", "", None)]) == [None]


def test_agent_prompt_layout_keeps_the_last_two_turns() -> None:
    p = agent_prompt("Open the chest.", [("go east", "a"), ("look", "b"), ("go west", "c")], "-= Hall =-",
                     ["go west", "look"])
    assert p == ("<|im_start|>system\nYou are an agent in a text world. Reply with the next command only.<|im_end|>\n"
                 "<|im_start|>user\n**Task:**\nOpen the chest.\n\n**Previous turns:**\n> look\nb\n> go west\nc\n\n"
                 "**Observation:**\n-= Hall =-\n\n**Commands:** go west; look<|im_end|>\n<|im_start|>assistant\n")
    assert "**Previous turns:**" not in agent_prompt("g", [], "o", ["look"])


def test_expert_decisions_follow_a_shortest_plan_to_the_win() -> None:
    lays = [generate_layout(s, WM_WORLD) for s in (3, 4)]
    ds = expert_decisions(lays, WM_WORLD, 4, seed=0)
    assert all(d.action in d.optimal and set(d.optimal) <= set(d.commands) for d in ds)
    for lay in lays:  # replaying one episode's expert actions wins, in exactly the oracle distance
        env = KeyDoorEnv(lay, WM_WORLD)
        _, info = env.reset()
        first = [d for d in ds if d.task_id == lay.task_id]
        ep = first[:next((i for i, d in enumerate(first[1:], 1) if d.t == 0), len(first))]
        assert len(ep) == info["oracle"]["distance_to_goal"]
        for d in ep:
            _, _, term, _, info = env.step(d.action)
        assert term and info["won"]


def test_shuffle_actions_permutes_within_tasks_only() -> None:
    rows = collect_keydoor([(3, "train"), (4, "train")], 2, seed=0).rows
    sh = shuffle_actions(rows, seed=1)
    assert [r.next_obs for r in sh] == [r.next_obs for r in rows]
    for task in {r.task_id for r in rows}:
        a = sorted(r.action for r in rows if r.task_id == task)
        b = sorted(r.action for r in sh if r.task_id == task)
        assert a == b
    assert sum(r.action != s.action for r, s in zip(rows, sh)) > len(rows) // 3
    assert shuffle_actions(rows, seed=1) == sh


def test_command_logprobs_equal_the_models_own_logprobs_plus_eos() -> None:
    pytest.importorskip("torch")
    import torch

    from agentmill.lm.tiny import TinyConfig, TinyLM
    from agentmill.methods.world_model.warmup import command_logprobs

    lm = TinyLM(TinyConfig(layers=1, d=32, heads=2, max_len=128, seed=0))
    prompt, cands = "Task: x. Commands: go east; look", ["go east", "look"]
    got = command_logprobs(lm, [prompt], [cands])[0]
    for c, g in zip(cands, got):
        ids = lm.render(prompt) + lm.encode(c)
        logits = lm.forward([ids]).logits[0]
        eos = float(torch.log_softmax(logits[-1].double(), -1)[lm.eos_token_ids[0]])
        assert g == pytest.approx(lm.logprobs(prompt, c).sum() + eos, abs=1e-4)
    # neither the batch (padding, other prompts) nor the order and number of candidates change a score
    other = "A much longer prompt than the first one, so that the first is left-padded. Commands: wait"
    both = command_logprobs(lm, [other, prompt], [["wait", "go north now"], cands[::-1] + ["wait"]], chunk=2)
    assert np.allclose(both[1][:2], got[::-1], atol=1e-5)
    assert np.allclose(both[0], command_logprobs(lm, [other], [["wait", "go north now"]])[0], atol=1e-5)


@pytest.mark.slow  # ~3 s: a 60-step BC on a byte model
def test_bc_teaches_the_expert_command_and_moves_parameters() -> None:
    pytest.importorskip("torch")
    from agentmill.lm.tiny import TinyConfig, TinyLM
    from agentmill.methods.world_model.train import StageConfig, train_sft
    from agentmill.methods.world_model.warmup import TextPair, command_logprobs

    lm = TinyLM(TinyConfig(layers=1, d=32, heads=2, max_len=128, seed=0))
    before = np.concatenate([p.detach().numpy().ravel() for p in lm.model.parameters()])
    pairs = [TextPair(f"room {i}: the only exit is {d}. >", f"go {d}") for i in range(4) for d in ("east", "west")]
    train_sft(lm, pairs, StageConfig(steps=60, batch=8, lr=3e-3, seq_len=128))
    after = np.concatenate([p.detach().numpy().ravel() for p in lm.model.parameters()])
    assert not np.allclose(before, after)
    lps = command_logprobs(lm, [p.prompt for p in pairs], [["go east", "go west"]] * len(pairs))
    picks = ["go east" if lp[0] > lp[1] else "go west" for lp in lps]
    assert sum(p == q.target for p, q in zip(picks, pairs)) >= 7
