"""Tools at run time: the library (versions, status, demotion) and the call path through the sandbox broker.

A tool's API calls reach only the world the caller chose (the live world during a task, a restored snapshot during
validation) and only the endpoints in its ``capabilities``, within ``tool_api_call_budget`` calls."""

from __future__ import annotations

import dataclasses
from typing import Any

from agentmill.core.sandbox import SandboxLimits
from agentmill.core.tool_sandbox import ToolSandbox
from agentmill.envs.appsim import AppSim
from agentmill.methods.metis.codify import TOOL_POLICY, metis_check
from agentmill.methods.metis.records import Tool

TOOL_LIMITS = SandboxLimits(wall_s=5.0, cpu_s=10, cpu_hard_s=12, memory_bytes=512 << 20, max_file_bytes=0,
                            max_open_files=16)
"""The tool child's caps: CPU 10 s, 512 MiB address space, no file growth, 16 fds, no core [R]."""


def make_sandbox(wall_s: float = 5.0) -> ToolSandbox:
    """One persistent tool child (call :meth:`ToolSandbox.close` when done)."""
    return ToolSandbox(TOOL_POLICY, dataclasses.replace(TOOL_LIMITS, wall_s=wall_s), check=metis_check)


def run_tool(sandbox: ToolSandbox, source: str, capabilities: tuple[str, ...], slots: dict[str, Any],
             world: AppSim, *, budget: int, wall_s: float) -> tuple[Any, int]:
    """Run ``source`` on ``world`` through the broker; return (result, API calls made). Raises sandbox errors."""
    def serve(app: str, endpoint: str, args: dict) -> Any:
        return world.call(app, endpoint, **args)

    run = sandbox.run(source, slots, serve=serve, capabilities=capabilities, budget=budget, wall_s=wall_s)
    return run.result, len(run.api_calls)


class ToolLibrary:
    """Tool versions by pattern; :meth:`record_use` applies the demotion rule (``demote_failures`` failures within
    the last ``demote_window`` uses)."""

    def __init__(self, demote_failures: int = 2, demote_window: int = 5, demote: bool = True) -> None:
        self.demote_failures, self.demote_window, self.demote = demote_failures, demote_window, demote
        self.versions: dict[str, int] = {}

    def next_version(self, key: str) -> int:
        self.versions[key] = self.versions.get(key, 0) + 1
        return self.versions[key]

    def record_use(self, tool: Tool, ok: bool) -> Tool:
        recent = (tool.recent + (ok,))[-self.demote_window:]
        t = dataclasses.replace(tool, uses=tool.uses + 1, failures=tool.failures + (not ok), recent=recent)
        if self.demote and sum(1 for x in recent if not x) >= self.demote_failures:
            t = dataclasses.replace(t, status="demoted")
        return t
