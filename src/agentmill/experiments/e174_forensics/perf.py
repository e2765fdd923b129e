"""E174 PF-6 and PF-7: recording, replaying and running decision episodes cost little (performance targets [R]).

PF-6: a ``RecordReplayLM`` call answered from its cassette (request hashing and JSON; the wrapped model is never
asked) takes ≤ 1 ms (p50 per window); replaying a 30-step decision episode (30 documents re-rendered from scratch,
the agent's turn, the log rebuilt) takes ≤ 50 ms (p50 per window). PF-7: a planted agent runs ≥ 1,000 fully logged
decision episodes per second on one core. Each figure is measured in ``windows`` independent windows and judged on
the Student-t interval of the window values (``repeats_estimate``). Timings: run alone (not ``parallel_safe``).
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentmill.core.stats import Estimate, repeats_estimate
from agentmill.experiments.e174_forensics import PAPER
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, Experiment, RunContext


@dataclass(frozen=True)
class Setup:
    windows: int = 5
    calls_per_window: int = 200
    replays_per_window: int = 20
    episodes_per_window: int = 1000


SETUPS = {"smoke": Setup(windows=2, calls_per_window=20, replays_per_window=3, episodes_per_window=100),
          "quick": Setup(windows=3), "full": Setup()}

CLAIMS = (
    Claim("PF-6-call", "A cassette-served LM call costs ≤ 1 ms (p50).", "[R] target", "—", "pf6_call_ms", "<=", 1.0),
    Claim("PF-6-episode", "Replaying a 30-step decision episode takes ≤ 50 ms (p50).", "[R] target", "—",
          "pf6_replay_30_ms", "<=", 50.0),
    Claim("PF-7", "A planted agent runs ≥ 1,000 logged decision episodes per second on one core.", "[R] target", "—",
          "pf7_episodes_per_s", ">=", 1000.0),
)


def _long_env() -> Any:
    from agentmill.methods.forensics.envs import TEDIUM

    extra = tuple((f"log{i}", f"$ tail -n 1 build{i}.log\nbuild {i}: ok") for i in range(27))
    return dataclasses.replace(TEDIUM, name="tedium_long", docs=TEDIUM.docs + extra)


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    from agentmill.lm.replay import RecordReplayLM
    from agentmill.lm.scripted import ScriptedLM
    from agentmill.methods.forensics import LMAgent, PlantedAgent, load_env, replay, run_episode
    from agentmill.methods.forensics.agents import planted_responder
    from agentmill.methods.forensics.agents import decision_prompt

    env = load_env("loyalty")
    lm = ScriptedLM(planted_responder(env), spec="scripted:planted-loyalty")
    cas = ctx.work_dir / "pf6-cassette.jsonl"
    cas.unlink(missing_ok=True)
    rec_agent = LMAgent(env, RecordReplayLM(lm, cas, "record"))
    run_episode(env, env.values(), rec_agent, seed=0, episode_id="pf6")
    prompt = decision_prompt(env, [env.render(env.values()).docs[d] for d, _ in env.docs])
    from agentmill.lm.base import GenerateConfig

    seed_cfg = None
    for line in cas.read_text().splitlines():
        import json

        seed_cfg = json.loads(line)["request"]["config"]
    cfg = GenerateConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in seed_cfg.items()})
    play = RecordReplayLM(None, cas, "replay", spec=lm.spec)
    call_ms, replay_ms, eps_s = [], [], []
    long_env = _long_env()
    agent = PlantedAgent(long_env, "tedium")
    ep30 = run_episode(long_env, long_env.values(), agent, seed=0, episode_id="long")
    assert sum(e["kind"] == "observation" for e in ep30.events) == 30
    ag = PlantedAgent(env, "self_consistency")
    vals = env.values()
    for w in range(s.windows):
        t = []
        for _ in range(s.calls_per_window):
            t0 = time.perf_counter()
            play.generate([prompt], cfg)
            t.append((time.perf_counter() - t0) * 1e3)
        call_ms.append(statistics.median(t))
        t = []
        for _ in range(s.replays_per_window):
            long_env._renders.clear()  # re-render from scratch: no cached text
            t0 = time.perf_counter()
            r = replay(ep30, agent, rewind="start", env=long_env)
            t.append((time.perf_counter() - t0) * 1e3)
        assert r.tool_log() == ep30.tool_log()
        replay_ms.append(statistics.median(t))
        t0 = time.perf_counter()
        for i in range(s.episodes_per_window):
            run_episode(env, vals, ag, seed=w, episode_id=f"pf7/{i}")
        eps_s.append(s.episodes_per_window / (time.perf_counter() - t0))
        ctx.progress("windows", w + 1, s.windows)
    import platform

    ctx.data.update({"call_ms": call_ms, "replay_30_ms": replay_ms, "episodes_per_s": eps_s,
                     "hardware": f"{platform.processor() or platform.machine()}, python {platform.python_version()}"})
    return {"pf6_call_ms": repeats_estimate(call_ms), "pf6_replay_30_ms": repeats_estimate(replay_ms),
            "pf7_episodes_per_s": repeats_estimate(eps_s, log=True)}


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(9, 3))
    for ax, key, label, target in ((axes[0], "call_ms", "cassette call p50 (ms)", 1.0),
                                   (axes[1], "replay_30_ms", "30-step replay p50 (ms)", 50.0),
                                   (axes[2], "episodes_per_s", "episodes / s", 1000.0)):
        ax.plot(range(1, len(data[key]) + 1), data[key], "o-")
        ax.axhline(target, color="k", ls=":", lw=1)
        ax.set_xlabel("window")
        ax.set_title(label, fontsize=9)
    fig.tight_layout()
    p = out / "pf_forensics.png"
    save(fig, p)
    return [p]


EXPERIMENT = Experiment(
    id="e174.forensics_perf",
    title="E174 PF-6/PF-7: cassette calls, episode replay and planted decision episodes are cheap",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    parallel_safe=False,
    quick_budget_s=5,
    scale_note="One CPU core, LLM-free (scripted LM behind RecordReplayLM; planted agents); timings depend on the "
               "host and its load.",
)
