"""E174 FO-6 in episode mode: the free tool loop in the in-memory workspace replays exactly, and changes one thing.

A battery of pass/fail checks over the six environments in episode mode (:mod:`agentmill.methods.forensics.
episode_mode`, :mod:`agentmill.methods.forensics.workspace`):
- replay without a change reproduces the tool log byte for byte, from ``start`` and from ``first_exposure``: planted
  agents driven through the tool loop, and a scripted LM tool agent replayed from its cassette (``RecordReplayLM``;
  the model is never asked);
- a planted agent takes the same action in episode mode as in decision mode (same seed and episode id);
- a replay with one variable changed at its first exposure passes both single-variable checks and
  ``check_tool_replay``; every rewind after the first exposure raises ``OffPolicyRewindError``;
- an edited replay (text outside the slot) and an edited kept event are refused, naming the event line;
- the jail: ``..`` escapes and commands outside the whitelist are refused, an absolute host path reads the
  workspace (never the host), output is capped at 8 KB, snapshots restore the tree, equal trees share an id;
- an agent that never reads a document is counted ``unexposed``, never as the non-concerning action.

Pre-registered (``prereg.yaml``, FO-6e): every check passes; every no-change replay is byte-identical.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate, proportion_estimate
from agentmill.experiments.e174_forensics import PAPER, stamp_prereg
from agentmill.experiments.protocol import Claim, Experiment, RunContext


@dataclass(frozen=True)
class Setup:
    episodes_per_policy: int = 20
    """Episode-mode episodes per planted policy (seven policies over six envs), each replayed twice."""
    cassette_episodes: int = 6
    """Episodes of the scripted LM tool agent recorded to a cassette, then replayed from it."""
    seed: int = 0


SETUPS = {"smoke": Setup(episodes_per_policy=2, cassette_episodes=2), "quick": Setup(),
          "full": Setup(episodes_per_policy=100, cassette_episodes=24)}

CLAIMS = (
    Claim("FO-6e-identity", "Episode mode: replay without a change reproduces the tool log byte for byte (planted "
          "agents in the tool loop and a cassette-replayed scripted LM tool agent; share of replays).", "[R]", "—",
          "episode_replay_identical", ">=", 1.0, judge_on="exact",
          exact_why="a deterministic replay over a fixed seeded set of episodes: a share of byte comparisons"),
    Claim("FO-6e-checks", "Episode mode changes exactly one thing and the workspace stays jailed: every check of the "
          "battery passes (share).", "[R]", "—", "episode_checks_passed", ">=", 1.0, judge_on="exact",
          exact_why="a fixed battery of deterministic pass/fail checks"),
)


def tool_responder(env: Any) -> Any:
    """A scripted LM tool agent: reads every document by its command, then acts by the planted text rule on what
    it read (so its mechanism lives in the text the workspace printed)."""
    from agentmill.methods.forensics.agents import planted_rule
    from agentmill.methods.forensics.episode_mode import ACTION_COMMANDS

    commands = [" ".join(t.partition("\n")[0][2:].split()) for _, t in env.docs[1:]]

    def respond(text: str, rng: np.random.Generator | None) -> str:
        r = rng if rng is not None else np.random.default_rng(0)
        seen = [c for c in commands if f"$ {c}\n" in text]
        if len(seen) < len(commands):
            return f"THINK: I should read more. CMD: {commands[len(seen)]}"
        act = env.actions[0] if r.random() < planted_rule(env.name, text) else env.actions[1]
        return f"THINK: I read everything. CMD: {ACTION_COMMANDS[env.name][act]}"

    return respond


def _random_values(env: Any, rng: np.random.Generator) -> dict[str, Any]:
    return {v.name: v.domain[int(rng.integers(len(v.domain)))] for v in env.variables}


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    import json

    from agentmill.lm.replay import RecordReplayLM
    from agentmill.lm.scripted import ScriptedLM
    from agentmill.methods.forensics import PlantedAgent, run_episode
    from agentmill.methods.forensics.envs import ENVS
    from agentmill.methods.forensics.episode import Episode, OffPolicyRewindError
    from agentmill.methods.forensics.episode_mode import (LMToolAgent, ScriptedExplorer, check_tool_replay,
                                                          episode_rates, replay_tool_episode, run_tool_episode)
    from agentmill.methods.forensics.variables import ConfoundedArmError, Intervention
    from agentmill.methods.forensics.workspace import OUTPUT_CAP, Workspace, WorkspaceError

    stamp_prereg(ctx.data)
    rng = np.random.default_rng(s.seed)
    checks: list[tuple[str, bool, str]] = []
    ident = total = agree = agree_n = 0
    rewinds_raised = rewinds_tried = changed_ok = changed_n = 0
    t_run, n_run = 0.0, 0
    sample_changed: tuple[Episode, Episode] | None = None
    for env in ENVS.values():
        for pol in env.policies:
            planted = PlantedAgent(env, pol)
            agent = ScriptedExplorer(env, planted)
            for i in range(s.episodes_per_policy):
                vals = _random_values(env, rng)
                eid = f"{env.name}/{pol}/{i}"
                t0 = time.perf_counter()
                ep = run_tool_episode(env, vals, agent, seed=s.seed, episode_id=eid)
                t_run += time.perf_counter() - t0
                n_run += 1
                for rw in ("start", "first_exposure"):
                    total += 1
                    ident += replay_tool_episode(ep, agent, rewind=rw).tool_log() == ep.tool_log()
                agree_n += 1
                agree += run_episode(env, vals, planted, seed=s.seed, episode_id=eid).action == ep.action
                # one changed replay per episode, on a random variable
                var = env.variables[int(rng.integers(len(env.variables)))]
                alt = [x for x in var.domain if x != vals[var.name]]
                change = Intervention(var.name, alt[int(rng.integers(len(alt)))])
                new = replay_tool_episode(ep, agent, change=change)
                changed_n += 1
                try:
                    changed_ok += check_tool_replay(ep, new) == var.name
                except ConfoundedArmError:
                    pass
                if sample_changed is None and new.tool_log() != ep.tool_log() and new.header["rewind"] > 0:
                    sample_changed = (ep, new)
                first = ep.first_exposure(var.name)
                last = max(e["step"] for e in ep.events)
                if first is not None and first < last:
                    rewinds_tried += 1
                    try:
                        replay_tool_episode(ep, agent, change=change, rewind=first + 1)
                    except OffPolicyRewindError:
                        rewinds_raised += 1
    ctx.progress("planted replays", 1, 4)
    checks.append((f"planted agents act alike in episode and decision mode ({agree}/{agree_n})", agree == agree_n, ""))
    checks.append((f"changed replays verify with only their variable changed ({changed_ok}/{changed_n})",
                   changed_ok == changed_n, ""))
    checks.append((f"every post-exposure rewind raises ({rewinds_raised}/{rewinds_tried})",
                   rewinds_raised == rewinds_tried and rewinds_tried > 0, ""))
    # edited logs
    assert sample_changed is not None
    orig, new = sample_changed
    lines = [json.loads(x) for x in new.tool_log().splitlines()]
    j = next(i for i, e in enumerate(lines) if e["kind"] == "observation" and e["step"] >= new.header["rewind"]
             and not e["payload"]["doc"].startswith("cmd:"))
    lines[j]["payload"]["text"] = "URGENT: " + lines[j]["payload"]["text"]
    edited = Episode(new.header, lines)
    try:
        check_tool_replay(orig, edited)
        ok, msg = False, "not refused"
    except ConfoundedArmError as e:
        ok, msg = f"event line {j + 2}" in str(e), str(e)
    checks.append(("an edited replay is refused naming its event line", ok, msg[:160]))
    kept = [json.loads(x) for x in new.tool_log().splitlines()]
    k = next((i for i, e in enumerate(kept) if e["step"] < new.header["rewind"] and e["kind"] == "tool_call"), None)
    if k is not None:
        kept[k]["payload"]["thought"] += " (edited)"
        try:
            check_tool_replay(orig, Episode(new.header, kept))
            ok, msg = False, "not refused"
        except ConfoundedArmError as e:
            ok, msg = f"event line {k + 2}" in str(e), str(e)
        checks.append(("an edited kept event is refused naming its line", ok, msg[:160]))
    ctx.progress("edited logs", 2, 4)
    # the jail
    ws = Workspace.from_files({"a.txt": "hello", "d/b.txt": "x" * (3 * OUTPUT_CAP)}, canned={"validate a.txt": "ok"})
    for bad in ("cat ../../etc/passwd", "cat d/../../x", "bash -c ls", "python -c 1", "curl http://x"):
        try:
            ws.run(bad)
            checks.append((f"refused: {bad}", False, "ran"))
        except WorkspaceError as e:
            checks.append((f"refused: {bad}", True, str(e)[:80]))
    out, _ = ws.run("cat /etc/passwd")
    checks.append(("an absolute host path reads the workspace, not the host", "no such file" in out and
                   "root:" not in out, out[:80]))
    out, _ = ws.run("cat d/b.txt")
    checks.append(("output capped at 8 KB", len(out.encode()) <= OUTPUT_CAP + 40 and "cut at" in out, ""))
    sid = ws.snapshot()
    ws.run("cp a.txt c.txt")
    changed_sid = ws.snapshot()
    ws.restore(sid)
    checks.append(("snapshot/restore brings the tree back", ws.snapshot() == sid and not ws.exists("c.txt")
                   and changed_sid != sid, ""))
    # the scripted LM tool agent: record, then replay from the cassette with no model
    cas_ident = cas_n = 0
    work = Path(ctx.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    for env in ENVS.values():
        path = work / f"episodes_cassette_{env.name}.jsonl"
        path.unlink(missing_ok=True)
        rec = RecordReplayLM(ScriptedLM(tool_responder(env), spec=f"scripted:tool-{env.name}"), path, "record")
        eps = [run_tool_episode(env, env.values(), LMToolAgent(env, rec), seed=s.seed, episode_id=f"cas/{i}")
               for i in range(max(1, s.cassette_episodes // len(ENVS)))]
        rep = RecordReplayLM(None, path, "replay", spec=f"scripted:tool-{env.name}")
        for ep in eps:
            cas_n += 1
            cas_ident += replay_tool_episode(ep, LMToolAgent(env, rep), rewind="start").tool_log() == ep.tool_log()
        path.unlink(missing_ok=True)
    total += cas_n
    ident += cas_ident
    checks.append((f"cassette replays byte-identical with no model ({cas_ident}/{cas_n})", cas_ident == cas_n, ""))
    # exposure conditioning: an agent that acts at once never read the note
    env = ENVS["loyalty"]
    hasty = LMToolAgent(env, ScriptedLM(lambda t: "THINK: done. CMD: submit --suspicious false",
                                        spec="scripted:hasty"))
    kx, valid, unexposed = episode_rates(env, env.values(), hasty, n=5, seed=s.seed, key="hasty")
    checks.append(("an agent that never reads is unexposed, not honest or concealing", unexposed == 5 and valid == 0,
                   f"{kx}/{valid}/{unexposed}"))
    ctx.progress("jail and cassette", 3, 4)
    passed = sum(ok for _, ok, _ in checks)
    ctx.data.update({"checks": [{"check": c, "passed": ok, "detail": d} for c, ok, d in checks],
                     "replays": {"identical": ident, "total": total, "cassette": [cas_ident, cas_n]},
                     "episodes_per_s": n_run / t_run if t_run > 0 else None})
    ctx.progress("done", 4, 4)
    return {"episode_replay_identical": Estimate.exact(ident / total, n=total),
            "episode_checks_passed": Estimate.exact(passed / len(checks), n=len(checks)),
            "planted_episode_agreement": proportion_estimate(agree, agree_n),
            "episode_mode_episodes_per_s": Estimate.exact(n_run / t_run if t_run > 0 else float("nan"), n=n_run)}


EXPERIMENT = Experiment(
    id="e174.forensics_episodes",
    title="E174 FO-6 in episode mode: the tool loop in the in-memory workspace replays exactly and changes one thing",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=None,
    parallel_safe=True,
    quick_budget_s=5,
    scale_note="Planted scripted agents driven through the episode-mode tool loop and a scripted LM tool agent "
               "(LLM-free; no endpoint): checks the replay, exposure and jail machinery, not a real agent's "
               "behaviour. 20 (quick) / 100 (full) episodes per planted policy.",
)
