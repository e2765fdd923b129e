"""The 15 CPU micro-profiling tools: deterministic trigger → analysis → recommendation rules.

The registry is explicit: :data:`TOOLS` is a tuple filled by :func:`register_tool` when the rule modules are
imported below (a duplicate name is an error). :func:`diagnose` runs the tools whose affinity matches the Stage-1
class (the paper's two-stage, proactive invocation) and returns their findings plus why the others did not run."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentmill.methods.kernelpro.config import ToolThresholds
from agentmill.methods.kernelpro.feedback import Finding, Profile


@dataclass(frozen=True)
class MicroTool:
    name: str
    affinity: frozenset[str]
    """Stage-1 classes the tool runs for ("any" = always)."""
    signals: frozenset[str]
    """Signals it needs: A (assembly), T (timing), V (valgrind), M (allocation), P (threads), D (subnormals)."""
    gpu_counterpart: str
    trigger: Callable[[Profile, Any, ToolThresholds], Finding | None]


TOOLS: tuple[MicroTool, ...] = ()

SIGNAL_KEYS = {"A": ("hot",), "T": ("t",), "V": ("d1_read_miss_ratio",), "M": ("alloc_peak_ratio",),
               "P": ("speedup_2t",), "D": ("subnormal_share",), "S": ("dispatch_share",), "R": ("bw_fraction",),
               "C": ("compute_fraction",)}
"""Which profile signal stands for each signal letter (R: bandwidth fraction of the roof; C: compute fraction)."""


def register_tool(tool: MicroTool) -> MicroTool:
    global TOOLS
    if any(t.name == tool.name for t in TOOLS):
        raise ValueError(f"duplicate micro-tool {tool.name!r}")
    TOOLS = TOOLS + (tool,)
    return tool


def has_signal(profile: Profile, sig: str) -> bool:
    if sig == "A":
        return profile.hot is not None
    return all(profile.signals.get(k) is not None for k in SIGNAL_KEYS[sig])


def diagnose(profile: Profile, report: Any, th: ToolThresholds = ToolThresholds(), *, tools: tuple[str, ...] | None = None,
             affinity: bool = True) -> tuple[list[Finding], dict[str, str]]:
    """(findings, skipped: tool → why it did not run). Deterministic: the same profile gives the same findings."""
    findings, skipped = [], {}
    cls = getattr(report, "cls", None)
    for t in TOOLS:
        if tools is not None and t.name not in tools:
            continue
        if affinity and cls is not None and "any" not in t.affinity and cls not in t.affinity:
            skipped[t.name] = f"affinity {sorted(t.affinity)} excludes class {cls}"
            continue
        missing = [s for s in sorted(t.signals) if not has_signal(profile, s)]
        if missing:
            skipped[t.name] = f"signal(s) {', '.join(missing)} not collected"
            continue
        f = t.trigger(profile, report, th)
        if f is not None:
            findings.append(f)
    return findings, skipped


from agentmill.methods.kernelpro.tools import rules as _rules  # noqa: E402,F401  (registers the 15 tools)

__all__ = ["TOOLS", "MicroTool", "diagnose", "register_tool"]
