"""U-3 (warm-up transfer to FactSearch first calls): the call checks by hand, the prompts, judges that can fail,
and a smoke run of measure and plots."""

from __future__ import annotations

import pytest

from agentmill.core.executor import make_executor
from agentmill.core.stats import Estimate
from agentmill.experiments import get
from agentmill.experiments.protocol import RunContext


def test_is_valid_call_by_hand() -> None:
    from agentmill.methods.world_model.search_wm import is_valid_call

    assert is_valid_call("web_search: Kalo Miren birth year")
    assert is_valid_call("web_extractor: https://wiki.example/Kalo_Miren\nextra line")
    assert is_valid_call("answer: 1950")
    for bad in ("go north", "web_search: ", "web_search: !!", "web_extractor: http://evil.example/x", "answer:",
                "", "take red key"):
        assert not is_valid_call(bad), bad


def test_first_call_prompts_one_shot_and_accurate_calls() -> None:
    from agentmill.methods.world_model.search_wm import SearchWMConfig, first_call_prompts, question_mix

    cfg = SearchWMConfig()
    tasks = question_mix("test", 1, 4, cfg, "test", "u3-test")
    assert [q.hops for _w, q in tasks] == [1, 1, 2, 2]
    demo = question_mix("policy-train", 1, 1, cfg, "train", "u3-demo")[0]
    one, good = first_call_prompts(tasks, demo)
    zero, good0 = first_call_prompts(tasks, None)
    assert good == good0
    for p, z, g, (_w, q) in zip(one, zero, good, tasks):
        assert demo[1].text in p and demo[1].text not in z and p.endswith(z[z.index("<|im_start|>user"):])
        assert p.count("<|im_start|>system") == 1 and p.endswith("<|im_start|>assistant\n")
        assert g and all(c.startswith(f"web_search: {q.entities[0]}") for c in g)
        assert q.answer not in p.split(q.text)[-1]  # the gold answer never reaches the agent


def test_u3_registered_and_judges_can_fail() -> None:
    from agentmill.experiments.e167_world_model import MODULES

    assert "warmup_ood" in MODULES and MODULES[12:14] == ("sim_fidelity_vs_benefit", "warmup_tiny")
    u3 = get("e167.wm_warmup_ood")
    assert u3.quick_check and not u3.parallel_safe
    e = lambda v, lo, hi: Estimate(v, lo, hi, n=5, method="two_stage_bootstrap", n_boot=100)  # noqa: E731
    good = {"u3_validity_wm_minus_none": e(0.1, 0.04, 0.16), "u3_accuracy_wm_minus_none": e(0.05, 0.01, 0.09)}
    assert set(u3.judge("full", good).values()) == {"supported"}
    bad = {"u3_validity_wm_minus_none": e(0.0, -0.02, 0.02), "u3_accuracy_wm_minus_none": e(-0.1, -0.2, 0.0)}
    assert set(u3.judge("full", bad).values()) == {"not_supported"}


@pytest.mark.slow  # ~6 s: the smoke KeyDoor pipeline in a temporary cache, three tiny arms
def test_u3_smoke(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("AGENTMILL_CACHE", str(tmp_path / "cache"))
    exp = get("e167.wm_warmup_ood")
    ctx = RunContext(profile="smoke", model="none", executor=make_executor("serial"), work_dir=tmp_path / "w")
    out = exp.measure(exp.setups["smoke"], ctx)
    assert {"u3_validity_wm_minus_none", "u3_accuracy_wm_minus_none", "validity_none"} <= set(out)
    assert set(ctx.data["calls_sample"]) == {"none", "wm", "shuffled"}
    assert exp.plots(ctx.data, tmp_path)
