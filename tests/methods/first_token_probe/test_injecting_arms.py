"""The injecting defense arms (``mid_trace_reminder``, ``header_reinjection``), τ_H calibration and ``safety_sft``."""

from __future__ import annotations

import numpy as np
import pytest

from agentmill.lm.decoding import StepState
from agentmill.methods.first_token_probe.defenses import (ASSISTANT_HEADER, REMINDER, InjectionRun, calibrate_tau,
                                                          make_arm)


class ByteLM:
    """Byte tokenizer only: what the hook needs from a model."""

    def encode(self, text: str) -> list[int]:
        return list(text.encode())

    def decode(self, ids) -> str:
        return bytes(ids).decode()


def _feed(run: InjectionRun, text: str, entropies: list[float] | None = None, row: int = 0) -> list[tuple[int, str]]:
    """Feed ``text`` byte by byte as sampled tokens; return (step, injected text) for every injection."""
    ids: list[int] = []
    got = []
    for t, b in enumerate(text.encode()):
        ids.append(b)
        e = entropies[t] if entropies else 0.0
        out = run.hook(StepState(row, row, 0, t, tuple(ids), e))
        if out:
            got.append((t, bytes(out).decode()))
            ids.extend(out)
    return got


def test_make_arm_parses_the_new_arms() -> None:
    a = make_arm("mid_trace_reminder:tau=0.75")
    assert a.id == "mid_trace_reminder:tau=0.75" and a.inject.kind == "entropy" and a.inject.tau == 0.75
    h = make_arm("header_reinjection:k=2")
    assert h.id == "header_reinjection:k=2" and h.inject.k == 2 and h.inject.text == ASSISTANT_HEADER
    assert ASSISTANT_HEADER == "\nAssistant: <think>\n"
    assert make_arm("header_reinjection").inject.k == 1 and make_arm("safety_sft").sft
    for bad in ("mid_trace_reminder", "header_reinjection:k=0", "header_reinjection:k=1.5", "header_reinjection:n=2"):
        with pytest.raises(ValueError):
            make_arm(bad)


def test_header_reinjection_fires_once_after_sentence_k() -> None:
    trace = "Well, this is fine. A short ask. So I will help.\n</think>\nSure. Done."
    run = InjectionRun(make_arm("header_reinjection:k=2").inject, ByteLM())
    got = _feed(run, trace)
    assert got == [(trace.index("ask.") + 3, ASSISTANT_HEADER)]
    assert run.fired == {(0, 0): trace.index("ask.") + 3}
    # no sentence end before the closer: never fires (the answer's sentences do not count)
    run1 = InjectionRun(make_arm("header_reinjection:k=1").inject, ByteLM())
    assert _feed(run1, "Well\n</think>\nSure. Done.") == []


def test_mid_trace_reminder_arms_on_entropy_and_waits_for_a_sentence_end() -> None:
    trace = "Well, this is fine. A short ask. So I will help."
    ent = [0.0] * len(trace)
    i = trace.index("short")
    ent[i: i + 3] = [3.0, 3.0, 3.0]  # a 3-step window with mean 3 > τ = 2, inside sentence 2
    run = InjectionRun(make_arm("mid_trace_reminder:tau=2").inject, ByteLM())
    got = _feed(run, trace, ent)
    assert got == [(trace.index("ask.") + 3, " " + REMINDER)]
    # two high steps are not a window; τ above every mean never fires
    ent2 = [0.0] * len(trace)
    ent2[i: i + 2] = [3.0, 3.0]
    assert _feed(InjectionRun(make_arm("mid_trace_reminder:tau=2.5").inject, ByteLM()), trace, ent2) == []
    # armed at a sentence end already followed by its space: the leading space is not doubled
    ent3 = [0.0] * len(trace)
    j = trace.index(". A") + 1
    ent3[j - 2: j + 1] = [3.0, 3.0, 3.0]  # the window first exceeds 2.5 at the space after the sentence end
    got3 = _feed(InjectionRun(make_arm("mid_trace_reminder:tau=2.5").inject, ByteLM()), trace, ent3)
    assert got3 == [(j, REMINDER)]


def test_calibrate_tau_is_a_quantile_of_window_means() -> None:
    assert calibrate_tau([np.array([0.0, 0.0, 3.0, 3.0, 3.0])], 0.5) == pytest.approx(2.0)
    assert calibrate_tau([np.array([0.0, 0.0, 3.0, 3.0, 3.0]), np.array([6.0, 6.0, 6.0])], 1.0) == pytest.approx(6.0)
    with pytest.raises(ValueError):
        calibrate_tau([np.array([1.0, 2.0])], 0.5)


def _organism():
    from agentmill.methods.first_token_probe.organism import load_organism

    return load_organism("locked", allow_unvalidated=True)[0]


@pytest.mark.slow
def test_injected_rollouts_align_with_none_and_share_its_prefix(tmp_path, monkeypatch) -> None:
    from agentmill.methods.first_token_probe.defenses import sample_injected
    from agentmill.methods.first_token_probe.prompts import sample_prompts
    from agentmill.methods.first_token_probe.sampling import sample_rollouts

    monkeypatch.setenv("AGENTMILL_CACHE", str(tmp_path))
    lm = _organism()
    items = sample_prompts("probe_test", {"C": 1, "N": 0, "B": 1, "D": 0}, seed=0)
    none = sample_rollouts(lm, items, k=1, seed=0)
    arm = make_arm("header_reinjection:k=1")
    rolls, fired = sample_injected(lm, items, arm, k=1, seed=0, cache=True)
    assert [r.key for r in rolls] == [r.key for r in none] and all(r.defense == arm.id for r in rolls)
    header = lm.encode(ASSISTANT_HEADER)
    for r, n in zip(rolls, none):
        st = fired[(items.index(r.item), r.sample)]
        assert r.sampled_ids[: st + 1] == n.sampled_ids[: st + 1]  # same noise until the injection
        assert r.sampled_ids[st + 1: st + 1 + len(header)] == header
        assert r.text.startswith(n.text.split(". ")[0] + "." + ASSISTANT_HEADER)
    again, fired2 = sample_injected(lm, items, arm, k=1, seed=0, cache=True)  # from the content cache
    assert [r.sampled_ids for r in again] == [r.sampled_ids for r in rolls] and fired2 == fired


@pytest.mark.slow
def test_safety_sft_moves_a_copy_and_its_traces_refuse() -> None:
    from agentmill.methods.first_token_probe.defenses import safety_sft, safety_sft_examples
    from agentmill.methods.first_token_probe.traces import parse_completion

    ex = safety_sft_examples("locked", n=12)
    assert len(ex) == 12 and all(t[:p].endswith("<think>\n") for t, p in ex)
    assert all(parse_completion(t[p:]).outcome == 1 for t, p in ex)  # every trace refuses
    lm = _organism()
    w0 = [p.detach().clone() for p in lm.model.parameters()]
    tuned, info = safety_sft(lm, "locked", n=8, batch=8)
    assert info["steps"] == 1 and info["param_change_norm"] > 0 and tuned.spec.endswith("+safety_sft")
    assert all(np.array_equal(a.detach().numpy(), b.numpy()) for a, b in zip(lm.model.parameters(), w0))
    with pytest.raises(TypeError):
        safety_sft(ByteLM(), "locked")


def test_sample_rollouts_refuses_arms_it_cannot_apply() -> None:
    from agentmill.methods.first_token_probe.defenses import make_arm
    from agentmill.methods.first_token_probe.sampling import sample_rollouts

    for name in ("mid_trace_reminder:tau=0.5", "header_reinjection:k=1", "safety_sft"):
        with pytest.raises(ValueError, match="arm_rollouts"):
            sample_rollouts(None, [], k=1, defense=make_arm(name))
