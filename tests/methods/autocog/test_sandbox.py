"""AC-11: the sandbox contains bad theory code: each case gives its specific error within its limit + 1 s, leaves no
file behind and leaves the parent unaffected."""

from __future__ import annotations

import glob
import os
import tempfile
import time

import numpy as np
import pytest

from agentmill.methods.autocog import library as L
from agentmill.methods.autocog.design import Design
from agentmill.methods.autocog.sandbox import (SandboxMemory, SandboxTimeout, SandboxViolation, TheoryCompileError,
                                               TheoryOutputError, TheoryRejected, run_batch)
from agentmill.methods.autocog.simulate import simulate
from agentmill.methods.autocog.theory import CodeTheory, Interval, ParamSpace

A = [[[1, 0, 0, 0], [0, 1, 1, 1]]]
B = [[[0, 1, 1, 1], [1, 0, 0, 0]]]
OK = "import numpy as np\ndef predict(params, stimulus, history):\n{body}\n"


def src(body: str) -> str:
    return OK.format(body="\n".join("    " + x for x in body.splitlines()))


STATIC = {
    "socket": "import socket\ndef predict(p, s, h):\n    return [0.5, 0.5]\n",
    "os import": "import os\ndef predict(p, s, h):\n    return [0.5, 0.5]\n",
    "ctypes": "import ctypes\ndef predict(p, s, h):\n    return [0.5, 0.5]\n",
    "subclasses": src("x = ().__class__.__bases__[0].__subclasses__()\nreturn [0.5, 0.5]"),
    "np.load": src("np.load('x.npy')\nreturn [0.5, 0.5]"),
    "np.save": src("np.save('x.npy', np.zeros(2))\nreturn [0.5, 0.5]"),
    "open": src("open('/tmp/autocog-pwn', 'w').write('x')\nreturn [0.5, 0.5]"),
    "np.random": src("return [np.random.rand(), 0.5]"),
    "eval": src("return eval('[0.5, 0.5]')"),
    "builtins": src("m = __builtins__\nreturn [0.5, 0.5]"),
}


@pytest.mark.parametrize("case", sorted(STATIC))
def test_static_policy_rejects(case) -> None:
    with pytest.raises(TheoryRejected):
        run_batch(STATIC[case], A, B, {})


def test_compile_error() -> None:
    with pytest.raises(TheoryCompileError):
        run_batch("def predict(:\n", A, B, {})


RUNTIME = {
    # reached only through the builtins the policy cannot see statically: the audit hook / curated builtins stop them
    # not caught by the static policy, stopped at run time by the audit hook
    "file read via numpy": (src("np.fromregex('/etc/hostname', 'x', dtype=[('a', 'S1')])\nreturn [0.5, 0.5]"),
                            SandboxViolation),
    "file write via ndarray.dump": (src("np.zeros(2).dump('/tmp/autocog-pwn')\nreturn [0.5, 0.5]"), SandboxViolation),
    "nan": (src("return np.array([np.nan, 0.5])"), TheoryOutputError),
    "negative": (src("return np.array([-0.5, 1.5])"), TheoryOutputError),
    "wrong shape": (src("return np.array([0.2, 0.3, 0.5])"), TheoryOutputError),
    "recursion": ("import numpy as np\ndef f(n):\n    return f(n + 1)\ndef predict(p, s, h):\n    return f(0)\n",
                  TheoryOutputError),
    "infinite loop": (src("while True:\n    pass"), SandboxTimeout),
    "memory bomb": (src("x = np.ones((1 << 31,))\nreturn [0.5, 0.5]"), SandboxMemory),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(RUNTIME))
def test_runtime_containment(case, tmp_path, monkeypatch) -> None:
    # the sandbox's temp cwd goes under a private dir: other processes' sandboxes in /tmp cannot disturb the check
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    source, exc = RUNTIME[case]
    t0 = time.time()
    with pytest.raises(exc):
        run_batch(source, A, B, {})
    assert time.time() - t0 < 21  # wall watchdog 20 s + 1
    assert glob.glob(str(tmp_path / "autocog-sbx-*")) == []  # temp cwd removed
    assert not os.path.exists("/tmp/autocog-pwn")


def test_code_theory_matches_library_and_roundtrips() -> None:
    """An LLM-style WADD written as code gives the library's probabilities, and simulates through the sandbox."""
    code = src("v = np.array([0.9, 0.8, 0.7, 0.6])\nd = float(np.dot(v, stimulus[0] - stimulus[1]))\n"
               "pa = (1 - params['eps']) / (1 + math.exp(-params['beta'] * d)) + params['eps'] / 2\n"
               "return np.array([pa, 1 - pa])").replace("import numpy as np", "import numpy as np\nimport math")
    th = CodeTheory("wadd-code", "WADD written as code", code, ParamSpace({"beta": Interval(0.1, 20),
                                                                           "eps": Interval(0, 0.5)}))
    ctx = {"validities": np.array([0.9, 0.8, 0.7, 0.6]), "n_features": 4, "rating_max": 1}
    params = {"beta": np.array([2.0, 7.0]), "eps": np.array([0.1, 0.3])}
    Aa, Bb = np.array(A * 2, float), np.array(B * 2, float)
    np.testing.assert_allclose(th.prob_batch(params, Aa, Bb, ctx), L.wadd().prob_batch(
        {**params, "validities": np.tile(ctx["validities"], (2, 1))}, Aa, Bb, ctx), atol=1e-12)
    assert L.theory_from_spec(th.spec).content_id == th.content_id
    d = Design.make([0.9, 0.8, 0.7, 0.6], [[1, 0, 0, 0], [1, 1, 0, 0]], [[0, 1, 1, 1], [0, 0, 1, 1]])
    data = simulate(th, d, 5, 0)
    assert data.resp.shape == (5, 96) and set(np.unique(data.resp)) <= {0, 1}
