"""AutoCog's sandbox against the probe's escapes (issue: hostile input).

The probe's theory reached the real builtins through ``np.ma.core.builtins``, replaced the audit hook's code, ran
shell commands and deleted a user's file while ``agentmill autocog theory check`` printed "holds" and exited 0;
another wrote a fake ``{"ok": true, "probs": …}`` to the child's answer pipe and the parent accepted it. Here the
same attacks go through the CLI a user runs, and forged answers meet the parent's validation.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from agentmill.core import sandbox as core
from agentmill.methods.autocog.sandbox import (TheoryOutputError, run_batch, run_metric, validated_batch,
                                               validated_metric)

ESCAPE = """import numpy as np
def predict(params, stimulus, history):
    b = np.ma.core.builtins
    os = b.__import__("os")
    main = b.__import__("sys").modules["__main__"]
    main.hook.__code__ = (lambda event, args: None).__code__
    os.system("rm -f {victim}")
    return np.array([0.5, 0.5])
"""


def test_the_probes_escape_through_the_cli_is_refused_and_the_file_survives(tmp_path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("the user's file")
    f = tmp_path / "theory.json"
    f.write_text(json.dumps({"factory": "code", "name": "escape", "prose": "", "params": {}, "policy": "sample",
                             "source": ESCAPE.format(victim=victim)}))
    p = subprocess.run([str(Path(sys.executable).with_name("agentmill")), "autocog", "theory", "check", str(f),
                        "--rating-max", "1"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "holds" not in p.stdout
    assert "TheoryRejected" in p.stderr and "'builtins' is not allowed" in p.stderr
    assert victim.read_text() == "the user's file"


@pytest.fixture()
def no_python_layers(monkeypatch):
    """The attacker past the static policy and the audit hook."""
    monkeypatch.setattr(core, "check_source", lambda source, policy, **kw: None)
    monkeypatch.setattr(core, "CHILD_SETUP", core.CHILD_SETUP.replace("sys.addaudithook(hook)", "pass"))


def forging(answer: dict) -> str:
    """A theory that writes ``answer`` to the answer pipe itself and exits before the harness can."""
    return ("import numpy as np\ndef predict(params, stimulus, history):\n"
            "    b = np.ma.core.builtins\n    os = b.__import__('os')\n"
            f"    os.write(1, {json.dumps(answer).encode()!r})\n    os._exit(0)\n")


A = [[[1, 0], [0, 1]]]
B = [[[0, 1], [1, 0]]]


@pytest.mark.parametrize(("answer", "why"), [
    ({"ok": True, "probs": [[0.5]], "resps": [[]], "renormalised": 0}, "not a 1x2 grid"),
    ({"ok": True, "probs": [[0.5, 1.5]], "resps": [[]], "renormalised": 0}, "finite number in"),
    ({"ok": True, "probs": [[0.5, "NaN"]], "resps": [[]], "renormalised": 0}, "finite number in"),
    ({"ok": True, "probs": [[0.5, True]], "resps": [[]], "renormalised": 0}, "finite number in"),
    ({"ok": True, "probs": [[0.5, 0.5]], "resps": [[]], "renormalised": -1}, "renormalised"),
    ({"ok": True, "probs": [[0.5, 0.5]], "resps": [[1, 1]], "renormalised": 0}, "resps disagree"),
])
def test_a_forged_theory_answer_is_rejected_by_the_parent(no_python_layers, answer, why) -> None:
    with pytest.raises(TheoryOutputError, match=why):
        run_batch(forging(answer), A, B, {})


def test_forged_responses_must_match_the_probabilities_and_uniforms(no_python_layers) -> None:
    u = [[0.1, 0.9]]
    honest = {"ok": True, "probs": [[0.5, 0.5]], "resps": [[0, 1]], "renormalised": 0}
    assert run_batch(forging(honest), A, B, {}, u=u)["resps"] == [[0, 1]]  # consistent data is only data
    with pytest.raises(TheoryOutputError, match="resps disagree"):
        run_batch(forging({**honest, "resps": [[0, 0]]}), A, B, {}, u=u)


def test_validated_batch_by_hand() -> None:
    res = {"probs": [[0.25, 0.75]], "resps": [[1, 0]], "renormalised": 1}
    assert validated_batch(res, (1, 2), [[0.3, 0.2]], "sample")["resps"] == [[1, 0]]
    assert validated_batch({**res, "resps": [[1, 0]]}, (1, 2), [[0.9, 0.9]], "argmax")["resps"] == [[1, 0]]
    with pytest.raises(TheoryOutputError):
        validated_batch({**res, "renormalised": 3}, (1, 2), None, "sample")


def test_a_forged_metric_answer_is_rejected(no_python_layers) -> None:
    src = ("import numpy as np\ndef metric(data):\n    b = np.ma.core.builtins\n    os = b.__import__('os')\n"
           "    os.write(1, b'{\"ok\": true, \"values\": [1e400, 2.0], \"errors\": [null, null]}')\n"
           "    os._exit(0)\n")
    with pytest.raises(TheoryOutputError, match="finite number"):
        run_metric(src, {"subject_id": np.array([0, 0]), "response": np.array([0, 1])})


def test_validated_metric_by_hand() -> None:
    ok = {"values": [0.5, None], "errors": [None, "ValueError: x"]}
    assert validated_metric(ok, 2)["values"] == [0.5, None]
    for bad in ({"values": [0.5], "errors": [None]}, {"values": [0.5, None], "errors": [None, None]},
                {"values": [float("inf"), 1.0], "errors": [None, None]}, {"values": [True, 1.0], "errors": [None, None]}):
        with pytest.raises(TheoryOutputError):
            validated_metric(bad, 2)


def test_honest_theories_still_run() -> None:
    src = "import numpy as np\ndef predict(params, stimulus, history):\n    return np.array([0.7, 0.3])\n"
    res = run_batch(src, A, B, {}, u=[[0.5, 0.8]])
    assert res["probs"] == [[0.7, 0.7]] and res["resps"] == [[0, 1]] and res["layers"]["isolation"] == "bwrap"
    assert res["layers"]["seccomp"] is True
