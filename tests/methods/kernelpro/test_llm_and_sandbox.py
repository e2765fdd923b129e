"""The LLM generator's prompt and code-block extraction over a scripted model, and the native-command runner
KernelPro added to ``core.sandbox`` (rlimits, watchdog, captured output, isolation layers)."""

from __future__ import annotations

import sys

from agentmill.core.sandbox import SandboxLimits, run_command
from agentmill.lm.scripted import ScriptedLM
from agentmill.methods.kernelpro.llm_generator import LLMGenerator, build_prompt, fenced_code
from agentmill.methods.kernelpro.tasks import get_task


def test_fenced_code() -> None:
    assert fenced_code("x\n```c\nint a;\n```\n") == "int a;\n"
    assert fenced_code("```python\nx=1\n```\n```C\nint b;\n```") == "int b;\n"
    assert fenced_code("no code here") is None


def test_prompt_carries_feedback_memory_and_error() -> None:
    t = get_task("sum")
    p = build_prompt(t, "void kernel(){}", "[ScalarFallback · critical] ...", [{"lesson": "fm=1 ok", "speedup": 2.0}],
                     "compile_error: x", shape=(8,))
    assert "Signature: `void kernel(const float* restrict in_0, float* restrict out, int64_t n);`" in p
    assert "Profiler feedback" in p and "fm=1 ok" in p and "previous attempt failed" in p
    assert "Profiler feedback" not in build_prompt(t, "s", "", [], "")


def test_generator_over_a_scripted_model() -> None:
    lm = ScriptedLM(["```c\nvoid kernel(){}\n```", "sorry"])
    g = LLMGenerator(lm, feedback="none")
    code, _ = g.propose(get_task("sum"), "src", "ignored", [])
    assert code == "void kernel(){}\n" and "Profiler feedback" not in lm.calls[0]
    assert g.propose(get_task("sum"), "src", "", [])[0] is None and len(g.calls) == 2


def test_run_command_caps_and_watchdog() -> None:
    r = run_command([sys.executable, "-c", "import sys; sys.stdout.write(sys.stdin.read() * 2)"], stdin=b"ab")
    assert r.returncode == 0 and r.stdout == b"abab" and not r.timed_out
    assert r.layers["nproc"].startswith("inactive")
    r = run_command(["sleep", "5"], limits=SandboxLimits(wall_s=0.3))
    assert r.timed_out and r.wall_s < 3
    r = run_command([sys.executable, "-c", "print('x' * 5000)"], max_output=100)
    assert len(r.stdout) == 100
    r = run_command([sys.executable, "-c", "bytearray(1 << 31)"], limits=SandboxLimits(memory_bytes=1 << 30))
    assert r.returncode != 0 and b"MemoryError" in r.stderr
