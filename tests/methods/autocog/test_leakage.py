"""Pitfall 22 / AC-12: the ground truth's name, prose and code tokens never reach a prompt — checked on every
prompt of a real run over loopback HTTP, with hand cases showing the scanner finds what it should."""

from __future__ import annotations

from agentmill.lm import load_lm
from agentmill.methods.autocog import library as L
from agentmill.methods.autocog.agents.loopback import DESIGN, scripted_server
from agentmill.methods.autocog.leakage import find_leaks, gt_tokens
from agentmill.core.ledger import Ledger
from agentmill.methods.autocog.recovery import GROUND_TRUTHS, battery_exclusions, load_batteries


def test_tokens_and_hand_cases() -> None:
    t = gt_tokens(L.wadd(), extra_names=["wadd"])
    assert t.names == ("wadd",) and "wadd_delta" in t.identifiers
    assert "return ((A - B) * _v(ctx)).sum(-1)" in t.lines
    assert find_leaks(["compare options by cue counts"], t) == []
    assert find_leaks(["x = 1\n  return ((A - B) *   _v(ctx)).sum(-1)"], t)  # whitespace-normalised line
    assert find_leaks(["use WADD here"], t) == [(0, "wadd")]  # whole word, any case
    assert find_leaks(["dr_wadds and wadd_weighted are other words"], t) == []
    assert find_leaks([t.prose], t) == [(0, t.prose)]
    d = gt_tokens(GROUND_TRUTHS["dial3"].theory(), extra_names=["dial3"])
    assert "dial_weights" in d.identifiers and any("keepdims" in x for x in d.lines)  # the helper's code counts


def test_stub_design_avoids_the_held_out_battery() -> None:
    ex = battery_exclusions(load_batteries()[1])
    pairs = list(zip(map(tuple, DESIGN["pairs_a"]), map(tuple, DESIGN["pairs_b"])))
    assert not [p for p in pairs if p in ex or p[::-1] in ex]


def test_no_prompt_of_an_http_run_contains_gt_tokens(tmp_path) -> None:
    from agentmill.experiments.e176_autocog.llm import Setup, build_loop

    s = Setup(gts=("dial3",), rounds=1, reviser_iters=1, max_candidates=6)
    with scripted_server() as srv:
        res = build_loop(load_lm(srv.lm_spec), "dial3", s, tmp_path).run()
        served = list(srv.prompts)
    led = Ledger(tmp_path)
    prompts = [led.payload(e)["prompt"] for e in led.events if e["kind"] == "lm_call"]
    assert res.status == "done" and len(prompts) == len(served) >= 6
    tokens = gt_tokens(GROUND_TRUTHS["dial3"].theory(), extra_names=["dial3"])
    assert find_leaks(prompts + served, tokens) == []
    assert find_leaks([prompts[-1] + tokens.lines[-1]], tokens)  # the same scan sees a planted line
