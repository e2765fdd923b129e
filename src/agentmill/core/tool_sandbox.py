"""A persistent sandbox child for tools whose only door to the world is a capability broker in the parent.

A codified tool is ``def run(api, **slots)``. It runs in one long-lived :class:`~agentmill.core.sandbox.SandboxSession`
child (every layer of :mod:`agentmill.core.sandbox`: static policy, ``python -I`` with rlimits, bubblewrap or the
accepted python-only mode, seccomp, audit hook, curated builtins), each call in a fresh namespace. The tool gets one
object, ``api``, whose ``call(app, endpoint, **args)`` sends one JSON line to the parent and waits for the answer.
The parent serves it only if ``"app.endpoint"`` is among the call's ``capabilities`` and the call is within its
``budget``, against whatever ``serve`` function the caller passed (a world snapshot during validation, the live world
during a task). The child never holds world state, memory, other tools or credentials.

Errors, each a :class:`~agentmill.core.sandbox.SandboxError` with its own ``kind``:

- :class:`CapabilityDenied` — the tool asked for an endpoint outside its capabilities (the call ends at once);
- :class:`BudgetExceeded` — more than ``budget`` API calls;
- :class:`ToolApiError` — an API error the tool did not handle (``code`` and ``message`` kept);
- :class:`ToolOutputError` — the tool raised, or returned something not JSON-serialisable or larger than 1 MiB;
- :class:`ToolCrashed` — the child died (it is respawned on the next call);
- the session's own ``SandboxTimeout``, ``SandboxMemory``, ``SandboxViolation``, ``CodeRejected``,
  ``CodeCompileError``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentmill.core.sandbox import (CodeCompileError, CodeOutputError, CodeRejected, SandboxError, SandboxLimits,
                                    SandboxMemory, SandboxPolicy, SandboxSession, SandboxTimeout, SandboxViolation,
                                    check_source)

MAX_OUTPUT_BYTES = 1 << 20


class CapabilityDenied(SandboxError):
    kind = "denied"


class BudgetExceeded(SandboxError):
    kind = "budget"


class ToolApiError(SandboxError):
    """An API error escaped the tool. ``code`` is the API's code (401, 404, 422 …)."""

    kind = "api"

    def __init__(self, code: Any, message: str) -> None:
        super().__init__(f"API error {code}: {message}")
        self.code, self.message = code, message


class ToolOutputError(SandboxError):
    kind = "output"


class ToolCrashed(SandboxError):
    kind = "crashed"


TOOL_HARNESS = r'''
class ApiRefused(BaseException):  # not an Exception: `except Exception` in a tool cannot swallow a refusal
    pass
class ApiError(Exception):
    def __init__(self, code, message):
        Exception.__init__(self, str(code) + " " + str(message))
        self.code = code
        self.message = message
class Api:
    def call(self, app, endpoint, /, **args):
        pipe.write("rpc " + json.dumps({"app": app, "endpoint": endpoint, "args": args}) + "\n")
        pipe.flush()
        rep = json.loads(stdin.readline().decode("utf-8"))
        if rep.get("refused"):
            raise ApiRefused(rep["refused"])
        if "error" in rep:
            raise ApiError(rep["error"]["code"], rep["error"]["message"])
        return rep["result"]
fn = ns.get(req["function"])
if not callable(fn):
    fail("compile", "source must define " + str(req["function"]) + "(api, **slots)")
try:
    result = fn(Api(), **req.get("kwargs", {}))
    res = json.dumps({"ok": True, "result": result, "layers": layers})
    if len(res) > req["max_bytes"]:
        fail("output", "tool output larger than " + str(req["max_bytes"]) + " bytes")
except ApiRefused as e:
    res = json.dumps({"ok": True, "status": "refused", "error": str(e), "layers": layers})
except ApiError as e:
    res = json.dumps({"ok": True, "status": "api_error", "code": e.code, "error": str(e.message), "layers": layers})
except MemoryError:
    fail("memory", "MemoryError")
except RecursionError:
    fail("output", "RecursionError")
except (PermissionError, ImportError) as e:
    fail("violation", str(e))
except (TypeError, ValueError) as e:
    fail("output", type(e).__name__ + ": " + str(e))
except Exception as e:
    fail("output", type(e).__name__ + ": " + str(e))
out.write(res); out.flush()
'''
"""Child side: the ``api`` object (one JSON line out, one in, per call) and the call of ``run``. A refusal
(capability, budget) ends the call; an API error reaches the tool as ``ApiError`` (it may handle it)."""


@dataclass
class ToolRun:
    """One tool call: its result, the API calls it made (``(app.endpoint, ok)``), wall seconds, active layers."""

    result: Any
    api_calls: list[tuple[str, bool]] = field(default_factory=list)
    wall_s: float = 0.0
    layers: dict[str, Any] = field(default_factory=dict)


class ToolSandbox:
    """One persistent sandbox child; :meth:`run` calls a tool in it with a broker in the parent.

    ``policy`` is the caller's static/run-time policy (Metis adds "no attribute assignment" by its checker and keeps
    imports to ``math``, ``re``, ``json``, ``datetime``); ``check`` is an extra static check of the caller's (it
    raises :class:`~agentmill.core.sandbox.CodeRejected`). Use as a context manager or call :meth:`close`.
    """

    def __init__(self, policy: SandboxPolicy, limits: SandboxLimits = SandboxLimits(), *,
                 check: Callable[[str], Any] | None = None) -> None:
        self.policy, self.limits, self.check = policy, limits, check
        self.session = SandboxSession(TOOL_HARNESS, policy=policy, limits=limits, tmp_prefix="agentmill-tool-",
                                      name="tool")
        self.last_layers: dict[str, Any] = {}
        self._checked: set[tuple[str, str]] = set()

    def __enter__(self) -> ToolSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.session.close()

    @property
    def children_started(self) -> int:
        return self.session.children_started

    def static_check(self, source: str, entry: str = "run") -> None:
        """The policy's AST check plus the caller's; raises CodeRejected / CodeCompileError. A source that passed is
        remembered (the session still runs the policy's check before each call)."""
        if (source, entry) in self._checked:
            return
        check_source(source, self.policy, entry=entry, signature=f"{entry}(api, **slots)")
        if self.check is not None:
            self.check(source)
        self._checked.add((source, entry))

    def run(self, source: str, kwargs: Mapping[str, Any], *, serve: Callable[[str, str, dict], Any],
            capabilities: Collection[str], budget: int, wall_s: float, entry: str = "run") -> ToolRun:
        """Call ``entry(api, **kwargs)`` of ``source``; ``serve(app, endpoint, args)`` answers each permitted API
        call (it returns the result or raises an exception with ``code`` and ``message`` attributes, the API's
        error). Raises the module's errors (see the module docstring)."""
        self.static_check(source, entry)
        caps = frozenset(capabilities)
        calls: list[tuple[str, bool]] = []
        refusal: list[SandboxError] = []

        def broker(msg: Any) -> dict:
            if not isinstance(msg, dict) or not isinstance(msg.get("args"), dict):
                refusal.append(ToolOutputError("malformed API request from the tool"))
                return {"refused": "malformed request"}
            name = f"{msg.get('app')}.{msg.get('endpoint')}"
            if name not in caps:
                refusal.append(CapabilityDenied(f"endpoint {name} is not among the tool's capabilities "
                                                f"({', '.join(sorted(caps)) or 'none'})"))
                return {"refused": f"{name} not permitted"}
            if len(calls) >= budget:
                refusal.append(BudgetExceeded(f"more than {budget} API calls"))
                return {"refused": "API call budget exhausted"}
            try:
                result = serve(str(msg["app"]), str(msg["endpoint"]), msg["args"])
            except Exception as e:  # the API's error, passed to the tool as data
                calls.append((name, False))
                return {"error": {"code": getattr(e, "code", 500), "message": str(getattr(e, "message", e))}}
            calls.append((name, True))
            return {"result": result}

        t0 = time.perf_counter()
        try:
            res = self.session.call(source, {"function": entry, "kwargs": dict(kwargs), "max_bytes": MAX_OUTPUT_BYTES},
                                    timeout_s=wall_s, on_message=broker)
        except (CodeRejected, CodeCompileError, SandboxTimeout, SandboxMemory, SandboxViolation):
            raise
        except CodeOutputError as e:
            raise ToolOutputError(str(e)) from None
        except SandboxError as e:
            if refusal:
                raise refusal[0] from None
            if type(e) is SandboxError:  # no finer kind: the child died or fell out of step
                raise ToolCrashed(str(e)) from None
            raise
        self.last_layers = res.get("layers", {})
        if refusal:
            raise refusal[0]
        if res.get("status") == "api_error":
            raise ToolApiError(res.get("code"), str(res.get("error")))
        return ToolRun(res.get("result"), calls, time.perf_counter() - t0, self.last_layers)


__all__ = ["BudgetExceeded", "CapabilityDenied", "MAX_OUTPUT_BYTES", "TOOL_HARNESS", "ToolApiError", "ToolCrashed",
           "ToolOutputError", "ToolRun", "ToolSandbox"]
