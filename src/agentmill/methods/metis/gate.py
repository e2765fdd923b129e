"""The recurrence ("desire-path") gate: demand is counted when a query arrives, before its outcome is known, so
failed runs count too [S]; codification needs a plan from a successful run [R]."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class GateDecision:
    key: str
    t: int
    demand: int
    codify: bool
    reason: str


@dataclass
class RecurrenceGate:
    """``observe(key, t)`` counts one occurrence; ``decide(...)`` says whether to codify now.

    Codify iff no active tool, demand ≥ k (over the last ``window`` tasks when set), the plan has ≥
    ``min_success_instances`` successes, and ≥ ``rebuild_after`` occurrences have passed since the pattern's last
    rejection or demotion."""

    k: int = 3
    window: int | None = None
    min_success_instances: int = 1
    rebuild_after: int = 3
    times: dict[str, list[int]] = field(default_factory=dict)
    blocked_at: dict[str, int] = field(default_factory=dict)
    """key → total occurrences when its last tool was rejected or demoted."""
    log: list[GateDecision] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ValueError(f"gate k must be >= 1, got {self.k}")

    def observe(self, key: str, t: int) -> int:
        self.times.setdefault(key, []).append(t)
        return self.demand(key, t)

    def demand(self, key: str, t: int) -> int:
        ts = self.times.get(key, [])
        if self.window is None:
            return len(ts)
        return sum(1 for x in ts if x > t - self.window)

    def block(self, key: str) -> None:
        """A tool for ``key`` was rejected or demoted: wait ``rebuild_after`` further occurrences."""
        self.blocked_at[key] = len(self.times.get(key, []))

    def decide(self, key: str, t: int, *, has_active_tool: bool, plan_successes: int | None) -> GateDecision:
        d = self.demand(key, t)
        since = len(self.times.get(key, [])) - self.blocked_at.get(key, -10 ** 9)
        if has_active_tool:
            dec = GateDecision(key, t, d, False, "active tool")
        elif d < self.k:
            dec = GateDecision(key, t, d, False, f"demand {d} < k = {self.k}")
        elif plan_successes is None:
            dec = GateDecision(key, t, d, False, "no plan")
        elif plan_successes < self.min_success_instances:
            dec = GateDecision(key, t, d, False, f"plan has {plan_successes} successes")
        elif since < self.rebuild_after:
            dec = GateDecision(key, t, d, False, f"{since} occurrences since the last rejection/demotion")
        else:
            dec = GateDecision(key, t, d, True, "open")
        self.log.append(dec)
        return dec
