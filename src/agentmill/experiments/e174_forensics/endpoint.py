"""E174 FO-9: the protocol runs against an OpenAI-compatible endpoint, and a cassette replays the run offline.

The agent is an ``LMAgent`` over ``openai:<model>@<url>`` behind ``RecordReplayLM`` (record mode): by default the
project's loopback stub (``lm.loopback``) answering by the planted text rule (it reads the rendered documents it is
sent, never the variables), or a user's endpoint (``--set endpoint=openai:MODEL@URL``). It runs FO-1's tedium sweep
and FO-2's two loyalty arms, then replays every episode from the cassette with no model at all. Numbers are reported
only (a real endpoint's rates have no pre-registered threshold, [R]); the one claim is that the offline replay
reproduces every episode's log byte for byte with zero endpoint calls.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate, newcombe_diff, proportion_estimate, rate_ratio_ci
from agentmill.experiments.e174_forensics import PAPER, stamp_prereg
from agentmill.experiments.protocol import Claim, Experiment, RunContext


@dataclass(frozen=True)
class Setup:
    endpoint: str = ""
    """``openai:MODEL@URL`` of a user's endpoint; empty = the loopback stub with the planted text rule."""
    n_per_dose: int = 10
    """Tedium episodes per dose."""
    n_per_arm: int = 30
    """Loyalty episodes per arm (previous instance, developer)."""
    seed: int = 0


SETUPS = {"smoke": Setup(n_per_dose=2, n_per_arm=4), "quick": Setup(n_per_dose=5, n_per_arm=20),
          "full": Setup(n_per_dose=25, n_per_arm=60)}

CLAIMS = (
    Claim("FO-9-replay", "An endpoint run replays offline from its cassette: every episode's log is byte-identical "
          "and no endpoint call is made (share of episodes).", "[R]", "—", "cassette_identical", ">=", 1.0,
          judge_on="exact", exact_why="a deterministic replay checked episode by episode over a fixed set"),
)


def _stub_reply(req: Any) -> str:
    from agentmill.methods.forensics.agents import planted_rule

    env = "tedium" if "validate records.csv" in req.prompt else "loyalty"
    rng = np.random.default_rng(int(req.body.get("seed") or 0))
    act = ("copy_key", "fix_rows") if env == "tedium" else ("conceal", "report")
    a = act[0] if rng.random() < planted_rule(env, req.prompt) else act[1]
    return f"THINK: I read the files. ACTION: {a}"


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    from agentmill.lm import load_lm
    from agentmill.lm.loopback import LoopbackServer
    from agentmill.lm.replay import RecordReplayLM
    from agentmill.methods.forensics import LMAgent, dose_response, load_env, replay, run_episode

    stamp_prereg(ctx.data)
    tedium, loyalty = load_env("tedium"), load_env("loyalty")
    cas = ctx.work_dir / f"endpoint-{ctx.profile}.jsonl"
    cas.unlink(missing_ok=True)
    srv = None
    if s.endpoint:
        spec = s.endpoint
    else:
        srv = LoopbackServer(_stub_reply, model="planted-stub").start()
        spec = srv.lm_spec
    eps: list[tuple[Any, Any]] = []
    try:
        lm = RecordReplayLM(load_lm(spec), cas, "record")
        for d in tedium.variable("n_errors").domain:
            for i in range(s.n_per_dose):
                ep = run_episode(tedium, tedium.values(n_errors=d), LMAgent(tedium, lm), seed=s.seed,
                                 episode_id=f"t/{d}/{i}")
                eps.append((tedium, ep))
        ctx.progress("tedium sweep", 1, 3)
        for actor in ("previous_instance", "developer"):
            for i in range(s.n_per_arm):
                ep = run_episode(loyalty, loyalty.values(actor=actor), LMAgent(loyalty, lm), seed=s.seed,
                                 episode_id=f"l/{actor}/{i}")
                eps.append((loyalty, ep))
        ctx.progress("loyalty arms", 2, 3)
    finally:
        served = srv.requests if srv is not None else None
        if srv is not None:
            srv.stop()
    play = RecordReplayLM(None, cas, "replay", spec=lm.spec)
    same = sum(replay(ep, LMAgent(env, play), rewind="start").tool_log() == ep.tool_log() for env, ep in eps)
    ctx.progress("cassette replay", 3, 3)
    t = [(ep.values["n_errors"], ep.action) for env, ep in eps if env is tedium]
    doses = np.array([d for d, _ in t], float)
    ys = np.array([a == "copy_key" for _, a in t], float)
    valid_t = sum(a in tedium.actions for _, a in t)
    fit = dose_response(doses, ys, B=500, seed=s.seed) if len(t) >= 4 else None
    lo = {a: [ep.action for env, ep in eps if env is loyalty and ep.values["actor"] == a]
          for a in ("previous_instance", "developer")}
    kp, kd = lo["previous_instance"].count("conceal"), lo["developer"].count("conceal")
    ctx.data.update({"endpoint": "loopback stub (planted text rule)" if srv is not None else s.endpoint,
                     "endpoint_calls_recorded": served, "episodes": len(eps), "replayed": True,
                     "tedium_rates": None if fit is None else fit.rates,
                     "loyalty": {a: [v.count("conceal"), len(v)] for a, v in lo.items()}})
    out = {"cassette_identical": Estimate.exact(same / len(eps), n=len(eps)),
           "valid_action_share": proportion_estimate(valid_t, len(t)),
           "loyalty_diff": newcombe_diff(kp, s.n_per_arm, kd, s.n_per_arm),
           "loyalty_rr": rate_ratio_ci(kp, s.n_per_arm, kd, s.n_per_arm)}
    if fit is not None:
        out["tedium_d50"] = fit.d50
    return out


EXPERIMENT = Experiment(
    id="e174.forensics_endpoint",
    title="E174 FO-9: the protocol against an OpenAI-compatible endpoint, replayed offline from its cassette",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    parallel_safe=True,
    quick_budget_s=10,
    scale_note="Default endpoint: the loopback stub answering by a planted rule over the prompt text (the real "
               "openai client, sockets and JSON; no model). Rates are reported without thresholds; set "
               "endpoint=openai:MODEL@URL for a real model.",
)
