"""Single-variable rule on the assignment and on the rendered text; the six envs' spans and principles."""

from __future__ import annotations

import numpy as np
import pytest

from agentmill.methods.forensics.envs import ENVS, confounded_fixture, load_env
from agentmill.methods.forensics.planner import check_arm
from agentmill.methods.forensics.variables import (Arm, ConfoundedArmError, Intervention, MultiVariableArmError,
                                                   Rendered, changed_variable, check_span_locality)


def test_changed_variable_counts_exactly_one() -> None:
    assert changed_variable({"a": 1, "b": 2}, {"a": 1, "b": 3}) == "b"
    with pytest.raises(MultiVariableArmError, match="changes 2"):
        changed_variable({"a": 1, "b": 2}, {"a": 0, "b": 3})
    with pytest.raises(MultiVariableArmError, match="changes 0"):
        changed_variable({"a": 1}, {"a": 1})


def test_span_locality_by_hand() -> None:
    # control "Hi Bob!" with slot [3, 6); arm "Hi Alice!" with slot [3, 8)
    ctl = Rendered({"d": "Hi Bob!"}, {"name": [("d", 3, 6)]})
    arm = Rendered({"d": "Hi Alice!"}, {"name": [("d", 3, 8)]})
    check_span_locality(ctl, arm, "name")
    leak = Rendered({"d": "Yo Alice!"}, {"name": [("d", 3, 8)]})
    with pytest.raises(ConfoundedArmError, match="document 'd' line 1") as e:
        check_span_locality(ctl, leak, "name")
    assert e.value.diff_outside_slots[0][0] == "d"
    two_lines = Rendered({"d": "Hi Alice!\nbye"}, {"name": [("d", 3, 8)]})
    with pytest.raises(ConfoundedArmError, match="line 2: control 'bye now' vs arm 'bye'"):
        check_span_locality(Rendered({"d": "Hi Bob!\nbye now"}, {"name": [("d", 3, 6)]}), two_lines, "name")


def test_rendering_records_spans_that_hold_the_slot_text() -> None:
    env = load_env("loyalty")
    r = env.render(env.values())
    (doc, s, e), = r.spans["actor"]
    assert r.docs[doc][s:e] == "a previous instance of you"
    assert r.exposed_in("notes") == ["actor", "appeal", "motive"]
    assert r.exposed_in("task") == ["honesty_instruction"]


def test_every_env_passes_its_checks_and_every_single_arm_is_local() -> None:
    rng = np.random.default_rng(0)
    for env in ENVS.values():
        assert all(env.check_principles().values()), env.name
        for _ in range(30):
            base = {v.name: v.domain[int(rng.integers(len(v.domain)))] for v in env.variables}
            var = env.variables[int(rng.integers(len(env.variables)))]
            val = next(x for x in var.domain if x != base[var.name])
            assert check_arm(env, base, Arm("a", tuple(sorted(base.items())), Intervention(var.name, val))) == var.name


def test_the_confounded_fixture_is_refused_with_its_line() -> None:
    fx = confounded_fixture()
    base = fx.values()
    with pytest.raises(ConfoundedArmError, match="document 'task' line 1"):
        check_arm(fx, base, Arm("a", tuple(sorted(base.items())), Intervention("deadline", "none")))
    # an arm on another variable of the fixture is fine
    assert check_arm(fx, base, Arm("b", tuple(sorted(base.items())), Intervention("n_errors", 5))) == "n_errors"


def test_values_outside_a_domain_are_refused() -> None:
    with pytest.raises(ValueError, match="not in the domain"):
        load_env("tedium").values(n_errors=7)
    with pytest.raises(KeyError, match="unknown environment"):
        load_env("nope")
