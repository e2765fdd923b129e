"""The correctness wall: every planted exploit is caught by its expected check (native runs in the sandbox), honest
library variants pass, and the tolerance rules accept float32 arithmetic while rejecting float16."""

from __future__ import annotations

import numpy as np
import pytest

from agentmill.methods.kernelpro import library, wall
from agentmill.methods.kernelpro.config import TimingConfig, WallConfig

FAST = TimingConfig(max_repeats=5, min_repeats=5, budget_s=0.3)
from agentmill.methods.kernelpro.tasks import get_task


@pytest.mark.slow  # ~4 s each: 6 exploits + 2 honest variants compiled and run in one sandboxed child per task
@pytest.mark.parametrize("task", ["sum", "softmax_rows"])
def test_every_planted_exploit_is_caught_by_its_check(task: str) -> None:
    t = get_task(task)
    root = dict(library.root(task, "quick"))
    cands = [library.render(task, {**root, "exploit": e}) for e in library.EXPLOITS]
    honest = [library.render(task, root), library.render(task, {**root, "fm": 1, "opt": "O3"})]
    evs = wall.evaluate_many(t, cands + honest, timing=FAST)
    for e, ev in zip(library.EXPLOITS, evs):
        assert ev.status != "correct", e
        assert ev.wall.failed_check in library.EXPECTED_CHECKS[e], (e, ev.wall)
    for ev in evs[len(cands):]:
        assert ev.status == "correct", ev.wall
        assert ev.speedup > 0 and len(ev.cand_samples) >= 5


def test_compile_errors_crashes_and_forbidden_symbols_are_outcomes() -> None:
    t = get_task("sum")
    bad = "#include <stdint.h>\nvoid kernel(const float* x, float* out, int64_t n) { out[0] = x[0] +; }\n"
    crash = ("#include <stdint.h>\nvoid kernel(const float* x, float* out, int64_t n) {\n"
             "    float* p = (float*)0; out[0] = p[n];\n}\n")
    evs = wall.evaluate_many(t, [(bad, ("-O2",)), (crash, ("-O2",))])
    assert evs[0].status == "compile_error" and "error" in evs[0].wall.evidence
    assert evs[1].status == "crashed" and "SIGSEGV" in evs[1].wall.evidence
    ev = wall.evaluate(t, "#include <stdio.h>\nvoid kernel(){}", ("-O2",))
    assert ev.status == "rejected" and ev.wall.failed_check == "policy"


def test_tolerance_accepts_float32_and_rejects_float16() -> None:
    rng = np.random.default_rng(0)
    cfg = WallConfig()
    for name in ("vadd", "softmax_rows", "layernorm", "sum"):
        t = get_task(name)
        for dist in ("normal", "uniform", "cancel"):
            ins = t.make(t.sizes["M"], rng, dist)
            assert wall.tolerance_failure(t, t.ref32(*ins), ins, cfg) is None, (name, dist)
        probe = t.make(t.sizes["M"], rng, t.probe)
        half = [x.astype(np.float16).astype(np.float32) if x.ndim == len(t.sizes["M"]) else x for x in probe]
        assert wall.tolerance_failure(t, t.ref32(*half), probe, cfg) is not None, name


def test_trivial_output_guard() -> None:
    ref = np.array([1.0, 2.0, 3.0])
    assert "constant" in wall.trivial_failure(np.zeros(3, np.float32), ref, [])
    x = np.array([5.0, 6.0, 7.0], np.float32)
    assert "equal to an input" in wall.trivial_failure(x.copy(), ref, [x])
    assert wall.trivial_failure(np.array([1, 2, 3], np.float32), ref, []) is None
