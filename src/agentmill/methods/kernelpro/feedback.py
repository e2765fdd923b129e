"""Findings and the semantic feedback operator: profiler signals → one short paragraph per finding, most severe
first (or the raw metrics as JSON: the ablation arm; or nothing)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from agentmill.methods.kernelpro.asm import HotLoop

SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}


@dataclass
class Profile:
    """What the tools read about one candidate: its hot loop and every loop (A), and named signals (T timing,
    V valgrind, M allocation, P thread scaling, D subnormals, R the Stage-1 report's numbers). A tool whose
    signal is missing does not run (``diagnose`` lists why)."""

    task: str
    shape: tuple[int, ...]
    flags: tuple[str, ...] = ()
    hot: HotLoop | None = None
    loops: list[HotLoop] = field(default_factory=list)
    signals: dict[str, Any] = field(default_factory=dict)


@dataclass
class Finding:
    tool: str
    severity: str
    metrics: dict[str, float]
    analysis: str
    recommendation: str
    actions: list[str]
    expected_gain: tuple[float, float]
    evidence: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def severity(gain: tuple[float, float]) -> str:
    """critical if the expected gain's lower end is ≥ 2×, warning if ≥ 1.2×, else info."""
    lo = gain[0]
    return "critical" if lo >= 2.0 else "warning" if lo >= 1.2 else "info"


def cap(gain: tuple[float, float], headroom: float | None) -> tuple[float, float]:
    """Expected gains never exceed the headroom H = t / t_min (the largest honest speedup)."""
    if headroom is None or headroom != headroom:
        return gain
    h = max(1.0, headroom)
    return (min(gain[0], h), min(gain[1], h))


def render_feedback(findings: Sequence[Finding], report: Any = None,
                    mode: Literal["diagnoses", "raw", "none", "both"] = "diagnoses", limit: int = 6) -> str:
    """The text an LLM proposer sees. ``diagnoses``: ``[Tool · severity] analysis Do: recommendation Expected:
    lo–hi×`` per finding, most severe first, at most ``limit``; ``raw``: the metric dictionaries as JSON without
    analysis; ``both``: raw then diagnoses; ``none``: empty."""
    fs = sorted(findings, key=lambda f: (SEVERITY_ORDER[f.severity], f.tool))[:limit]
    head = ""
    if report is not None:
        head = (f"[RooflineGap] class {report.cls} ({report.confidence} confidence), AI {report.ai:.2f} flop/byte, "
                f"ridge {report.ridge:.2f}; reference reaches {report.achieved_gbs:.1f} GB/s and "
                f"{report.achieved_gflops:.1f} GFLOP/s; headroom {report.headroom:.1f}×.\n")
    if mode == "none":
        return ""
    raw = json.dumps({f.tool: f.metrics for f in fs}, sort_keys=True)
    diag = head + "\n".join(f"[{f.tool} · {f.severity}] {f.analysis} Do: {f.recommendation} Expected: "
                            f"{f.expected_gain[0]:.2g}–{f.expected_gain[1]:.2g}×." for f in fs)
    return {"raw": raw, "diagnoses": diag, "both": raw + "\n" + diag}[mode]
