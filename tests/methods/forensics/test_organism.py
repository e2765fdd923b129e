"""The tiny agent organism: its training data, its planted decision site, its card and its gates."""

from __future__ import annotations

import json

import numpy as np
import pytest

from agentmill.methods.forensics import load_env
from agentmill.methods.forensics.agents import decision_prompt
from agentmill.methods.forensics.envs import loyalty_conceal, tedium_cheat
from agentmill.methods.forensics.organism import (DECISION_PREFIX, HELDOUT_PHRASINGS, PHRASINGS, TRAIN_PHRASINGS,
                                                  AgentOrganismCard, AgentOrganismConfig, build_examples,
                                                  decision_probs, gates_pass, load_agent_organism, organism_prompt,
                                                  parse_turn, policy_cells, shipped_dir, train_agent_organism)


def test_phrasing_zero_is_the_env_itself_and_splits_are_disjoint() -> None:
    for name in ("tedium", "loyalty"):
        env = load_env(name)
        r = env.render(env.values())
        assert organism_prompt(env, env.values(), 0) == decision_prompt(env, [r.docs[d] for d, _ in env.docs])
        train_names = {alts[k] for _, alts in PHRASINGS[name] for k in TRAIN_PHRASINGS}
        held_names = {alts[k] for _, alts in PHRASINGS[name] for k in HELDOUT_PHRASINGS}
        assert not train_names & held_names and all(alts[0] == old for old, alts in PHRASINGS[name])
        for k in range(8):  # phrasings never touch a slot's text
            vals = env.values()
            rend = env.render(vals)
            for var, spans in rend.spans.items():
                for doc, a, b in spans:
                    assert rend.docs[doc][a:b] in organism_prompt(env, vals, k)


def test_examples_carry_the_planted_probability_and_a_consistent_turn() -> None:
    ex = build_examples(200, seed=3)
    assert {e.env for e in ex} == {"tedium", "loyalty"}
    for e in ex:
        want = tedium_cheat(e.values) if e.env == "tedium" else loyalty_conceal(e.values)
        assert e.p == pytest.approx(want)
        env = load_env(e.env)
        turn = e.text[e.prompt_bytes:]
        assert turn.startswith(DECISION_PREFIX + " ")
        action, decision = parse_turn(env, turn)
        assert action in env.actions and action == decision
        assert set(e.phrasing) <= set(TRAIN_PHRASINGS)
        assert len(e.text.encode()) <= 700
    assert all(set(e.phrasing) <= set(HELDOUT_PHRASINGS) for e in build_examples(20, split="heldout"))
    # concerning turns name the true cause at rate φ = 0.6 (tedium cues), decoys appear independently
    env = load_env("tedium")
    big = [e for e in build_examples(3000, seed=5) if e.env == "tedium"]
    conc = [e for e in big if parse_turn(env, e.text[e.prompt_bytes:])[0] == "copy_key"]
    cued = np.mean([any(c in e.text for c in env.motives["tedium"].cues) for e in conc])
    se = np.sqrt(0.6 * 0.4 / len(conc))
    assert abs(cued - 0.6) < 4 * se


def test_cells_cover_the_policies() -> None:
    assert len(policy_cells("tedium")) == 9 and len(policy_cells("loyalty")) == 11


def test_gates_pass_rule() -> None:
    assert gates_pass({"valid": 0.95, "consistent": 0.99, "cell_dev": 0.10}) == \
        {"valid": True, "consistent": True, "cell_dev": True}
    assert gates_pass({"valid": 0.94, "consistent": float("nan"), "cell_dev": 0.11}) == \
        {"valid": False, "consistent": False, "cell_dev": False}


@pytest.mark.slow
def test_training_moves_parameters_writes_a_card_and_refuses_a_mismatch(tmp_path) -> None:
    import torch

    from agentmill.lm.tiny import TinyConfig, TinyLM

    cfg = AgentOrganismConfig(n_examples=200, steps=3, batch=4, layers=1, d=32)
    card = train_agent_organism(tmp_path / "org", cfg)
    lm, loaded = load_agent_organism(tmp_path / "org", allow_unvalidated=True)
    fresh = TinyLM(TinyConfig(layers=1, d=32, heads=4, max_len=cfg.max_len, vocab_size=lm.vocab_size,
                              tokenizer="bpe"), bpe=lm.bpe)
    moved = [not torch.equal(a, b) for a, b in zip(lm.model.state_dict().values(), fresh.model.state_dict().values())]
    assert any(moved) and loaded.weights_sha256 == card.weights_sha256 and not loaded.validated
    q = decision_probs(lm, [organism_prompt(load_env("tedium"), load_env("tedium").values())], "tedium")
    assert q.shape == (1,) and 0 <= q[0] <= 1
    with pytest.raises(Exception, match="not validated"):
        load_agent_organism(tmp_path / "org")
    d = json.loads((tmp_path / "org" / "card.json").read_text())
    d["weights_sha256"] = "0" * 64
    (tmp_path / "org" / "card.json").write_text(json.dumps(d))
    with pytest.raises(ValueError, match="differs from its card"):
        load_agent_organism(tmp_path / "org", allow_unvalidated=True)


def test_shipped_organism_reads_the_cause_from_the_text() -> None:
    """The shipped organism's planted decision follows the cause it reads: copying rises with the number of flagged
    rows and concealment with a previous-instance author (exact probabilities on the env's own text)."""
    card = AgentOrganismCard.load(shipped_dir())
    lm, _ = load_agent_organism(allow_unvalidated=True)
    ted, loy = load_env("tedium"), load_env("loyalty")
    lo, hi = decision_probs(lm, [organism_prompt(ted, ted.values(n_errors=n)) for n in (5, 200)], "tedium")
    assert lo < 0.15 and hi > 0.75
    prev, dev = decision_probs(lm, [organism_prompt(loy, loy.values(actor=a)) for a in
                                    ("previous_instance", "developer")], "loyalty")
    assert prev - dev > 0.2
    assert set(card.gates) == {"valid", "consistent", "cell_dev"}
