"""ToolSandbox: a persistent child whose only door is the parent's capability broker."""

from __future__ import annotations

import pytest

from agentmill.core import bubblewrap
from agentmill.core.sandbox import CodeRejected, SandboxPolicy, SandboxTimeout
from agentmill.core.tool_sandbox import BudgetExceeded, CapabilityDenied, ToolApiError, ToolOutputError, ToolSandbox

POLICY = SandboxPolicy(imports=("math", "json"))


@pytest.fixture(autouse=True)
def _mode(monkeypatch: pytest.MonkeyPatch) -> None:
    if bubblewrap.probe() is not None:
        monkeypatch.setenv(bubblewrap.ENV_MODE, "python-only")


class Err(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code, self.message = code, message


def serve(app: str, endpoint: str, args: dict):
    if endpoint == "missing":
        raise Err(404, "no such thing")
    return {"app": app, "endpoint": endpoint, "args": args}


def test_broker_round_trip_and_refusals() -> None:
    with ToolSandbox(POLICY) as tb:
        src = ("def run(api, **slots):\n    r = api.call('a', 'b', app='x', n=slots['n'])\n"
               "    return [r['app'], r['args']]\n")
        run = tb.run(src, {"n": 2}, serve=serve, capabilities={"a.b"}, budget=3, wall_s=5)
        assert run.result == ["a", {"app": "x", "n": 2}] and run.api_calls == [("a.b", True)]
        with pytest.raises(CapabilityDenied, match="a.c"):
            tb.run("def run(api, **s):\n    return api.call('a', 'c')\n", {}, serve=serve, capabilities={"a.b"},
                   budget=3, wall_s=5)
        with pytest.raises(BudgetExceeded):
            tb.run("def run(api, **s):\n    while True:\n        api.call('a', 'b')\n", {}, serve=serve,
                   capabilities={"a.b"}, budget=3, wall_s=5)
        with pytest.raises(ToolApiError) as e:
            tb.run("def run(api, **s):\n    return api.call('a', 'missing')\n", {}, serve=serve,
                   capabilities={"a.missing"}, budget=3, wall_s=5)
        assert e.value.code == 404
        # a tool may handle the API's error itself; a refusal cannot be swallowed by `except Exception`
        ok = tb.run("def run(api, **s):\n    try:\n        api.call('a', 'missing')\n    except Exception:\n"
                    "        return 'handled'\n", {}, serve=serve, capabilities={"a.missing"}, budget=3, wall_s=5)
        assert ok.result == "handled"
        with pytest.raises(CapabilityDenied):
            tb.run("def run(api, **s):\n    try:\n        api.call('z', 'z')\n    except Exception:\n"
                   "        return 'swallowed'\n", {}, serve=serve, capabilities=(), budget=3, wall_s=5)
        assert tb.children_started == 1  # refusals and API errors keep the child warm


def test_limits_and_output_checks() -> None:
    with ToolSandbox(POLICY) as tb:
        with pytest.raises(SandboxTimeout):
            tb.run("def run(api, **s):\n    while True:\n        pass\n", {}, serve=serve, capabilities=(), budget=1,
                   wall_s=0.5)
        with pytest.raises(ToolOutputError, match="larger than"):
            tb.run("def run(api, **s):\n    return 'x' * (2 << 20)\n", {}, serve=serve, capabilities=(), budget=1,
                   wall_s=5)
        with pytest.raises(CodeRejected):
            tb.run("import os\ndef run(api, **s):\n    return 1\n", {}, serve=serve, capabilities=(), budget=1,
                   wall_s=5)
        assert tb.run("def run(api, **s):\n    return 7\n", {}, serve=serve, capabilities=(), budget=1,
                      wall_s=5).result == 7
        assert tb.children_started == 2  # respawned once, after the timeout
