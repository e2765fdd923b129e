"""The validator [R]: replay a candidate tool on the ≤ ``max_instances`` most recent successful instances (each
from the world snapshot taken at its start, under the current API), compare the normalised answer and the end-state
digest with the recorded success, require a pass rate ≥ θ; then a live probe on a copy of the current world with
the latest instance's slots (any exception rejects). The live world is never touched."""

from __future__ import annotations

from collections.abc import Callable

from agentmill.core.sandbox import SandboxError
from agentmill.core.tool_sandbox import ToolSandbox
from agentmill.envs.appsim import AppSim, normalise_answer
from agentmill.methods.metis.records import InstanceRef, ToolSource, ValidationReport
from agentmill.methods.metis.toolbox import run_tool


class Validator:
    def __init__(self, sandbox: ToolSandbox, world: Callable[[bytes], AppSim], *, threshold: float = 0.9,
                 max_instances: int = 8, live_probe: bool = True, budget: int = 200, wall_s: float = 5.0) -> None:
        self.sandbox, self.world = sandbox, world
        self.threshold, self.max_instances, self.live_probe = threshold, max_instances, live_probe
        self.budget, self.wall_s = budget, wall_s
        self.replays = 0
        """Instance replays and probes run so far (build cost)."""

    def validate(self, tool: ToolSource, instances: list[InstanceRef], current_world: bytes,
                 snapshots: Callable[[str], bytes | None]) -> ValidationReport:
        """``snapshots(snapshot_id)`` returns an instance's start snapshot (None if it was dropped)."""
        good = [i for i in instances if i.outcome][-self.max_instances:]
        reasons: list[str] = []
        passed = n = api = 0
        for inst in good:
            snap = snapshots(inst.snapshot_id)
            if snap is None:
                continue
            n += 1
            self.replays += 1
            w = self.world(snap)
            w.begin_task()
            try:
                ans, calls = run_tool(self.sandbox, tool.source, tool.capabilities, dict(inst.slots), w,
                                      budget=self.budget, wall_s=self.wall_s)
                api += calls
            except SandboxError as e:
                api += w.api_calls
                reasons.append(f"{inst.task_id}: {getattr(e, 'kind', 'error')}: {str(e)[:120]}")
                continue
            if normalise_answer(ans) != normalise_answer(inst.answer):
                reasons.append(f"{inst.task_id}: answer {ans!r} != recorded {inst.answer!r}")
            elif w.state_digest() != inst.state_digest:
                reasons.append(f"{inst.task_id}: end state differs from the recorded success")
            else:
                passed += 1
        rate = passed / n if n else 0.0
        if n == 0:
            reasons.append("no successful instance with a snapshot to replay")
        ok = n > 0 and rate >= self.threshold
        probe_ok = None
        if ok and self.live_probe:
            self.replays += 1
            w = self.world(current_world)
            w.begin_task()
            try:
                _, calls = run_tool(self.sandbox, tool.source, tool.capabilities, dict(good[-1].slots), w,
                                    budget=self.budget, wall_s=self.wall_s)
                api += calls
                probe_ok = True
            except SandboxError as e:
                api += w.api_calls
                probe_ok = False
                ok = False
                reasons.append(f"live probe: {getattr(e, 'kind', 'error')}: {str(e)[:120]}")
        return ValidationReport(ok, rate, n, probe_ok, tuple(reasons), api)
