"""Drive an agent's candidates with the controller: the adapter between ``Episode`` and a repair loop.

``control_candidates`` works with any source of candidates and any critics that expose ``check(task, cand) ->
outcome`` with ``.passed`` and ``.wall_s`` (``envs.pyrepo``'s critics do), and any verifier ``verify(cand) -> bool``;
so the reference repair agent, a pool generator or an LM generator plugs in without this package importing them.
Measured seconds are charged as the costs when ``charge_measured`` is set.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from agentmill.methods.bayes_ship.config import Calibration, CostModel
from agentmill.methods.bayes_ship.core import Episode, EpisodeResult


def control_candidates(controller: Any, calib: Calibration, cost: CostModel, *, task: Any,
                       next_candidate: Callable[[], Any | None], critics: Mapping[str, Any],
                       verify: Callable[[Any], bool], charge_measured: bool = False,
                       max_actions: int = 64) -> tuple[EpisodeResult, Any]:
    """Run one episode; returns the result and the last candidate (the one verified or shipped, if any)."""
    ep = Episode(controller, calib, cost)
    cand = next_candidate()
    if cand is None:
        ep.gave_up()
        return ep.result(), None
    for _ in range(max_actions):
        d = ep.next()
        if d.action == "critic":
            out = critics[d.critic].check(task, cand)
            ep.observe(d.critic, bool(out.passed), float(out.wall_s) if charge_measured else None)
        elif d.action == "generate":
            nxt = next_candidate()
            if nxt is None:
                ep.gave_up()
                break
            cand = nxt
            ep.new_candidate()
        elif d.action == "verify":
            ep.verified(bool(verify(cand)))
            if ep.outcome != "running":
                break
        elif d.action == "ship":
            ep.shipped()
            break
        else:
            ep.gave_up()
            break
    else:
        ep.gave_up()
    return ep.result(), cand
