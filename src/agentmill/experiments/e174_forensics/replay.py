"""E174 FO-6: counterfactual replay changes exactly one thing, and refuses when it would not.

A battery of pass/fail checks over the six environments:
- 1,000 random planner arms (random base assignment, one variable set to another value): both single-variable
  checks pass with zero span-locality violations;
- the confounded fixture (a deadline that also writes "URGENT: " outside its slot) is refused on every arm, with the
  document and the line named;
- replay without a change reproduces the tool log byte for byte: planted agents, a scripted LM subject replayed from
  its cassette (``RecordReplayLM``; the model is never asked), and, at full, greedy ``hf:smollm2``;
- a changed replay served from a cassette misses loudly (``ReplayMiss``) rather than inventing an answer;
- every rewind after the changed variable's first exposure raises ``OffPolicyRewindError``;
- a stored replay whose text was edited outside the declared slot is refused by ``check_replay`` naming the line;
- a tampered registry line and a hypothesis revised after its data were seen are refused, naming the line.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate
from agentmill.experiments.e174_forensics import PAPER, stamp_prereg
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, Experiment, RunContext, models_read, withhold


@dataclass(frozen=True)
class Setup:
    n_arms: int = 1000
    """Random planner arms checked for span locality (1,000)."""
    episodes_per_env: int = 20
    """Episodes per planted policy replayed without a change."""
    cassette_episodes: int = 12
    """Episodes of the scripted LM subject recorded, then replayed from the cassette."""
    lm: str = ""
    """A real model replayed greedily, live and from a cassette (full: hf:smollm2; empty = not run)."""
    lm_episodes: int = 6
    """Episodes of that model (tedium, 24 new tokens each)."""
    seed: int = 0


SETUPS = {"smoke": Setup(n_arms=60, episodes_per_env=3, cassette_episodes=3), "quick": Setup(),
          "full": Setup(lm="hf:smollm2")}

CLAIMS = (
    Claim("FO-6-span", "Zero span-locality violations over 1,000 random single-variable planner arms on the six "
          "envs.", "[R]", "—", "span_violations", "<=", 0.0, judge_on="exact",
          exact_why="a count over a fixed seeded battery of arms checked by a deterministic function"),
    Claim("FO-6-checks", "Replay changes exactly one thing: every check of the battery passes (share).", "[R]",
          "—", "checks_passed", ">=", 1.0, judge_on="exact",
          exact_why="a fixed battery of deterministic pass/fail checks"),
    Claim("FO-6-smollm2", "Replay without a change reproduces greedy hf:smollm2 episodes byte for byte, live and "
          "from the cassette (share of episodes).", "[R]", "—", "smollm2_identical", ">=", 1.0, judge_on="exact",
          exact_why="greedy decoding is deterministic on one machine; the share is over a fixed set of episodes"),
)


def _random_values(env: Any, rng: np.random.Generator) -> dict[str, Any]:
    return {v.name: v.domain[int(rng.integers(len(v.domain)))] for v in env.variables}


def span_battery(n: int, seed: int) -> tuple[int, list[str]]:
    from agentmill.methods.forensics.envs import ENVS
    from agentmill.methods.forensics.planner import check_arm
    from agentmill.methods.forensics.variables import Arm, Intervention

    rng = np.random.default_rng(seed)
    envs = list(ENVS.values())
    bad = []
    for i in range(n):
        env = envs[i % len(envs)]
        base = _random_values(env, rng)
        var = env.variables[int(rng.integers(len(env.variables)))]
        alts = [x for x in var.domain if x != base[var.name]]
        val = alts[int(rng.integers(len(alts)))]
        arm = Arm(f"a{i}", tuple(sorted(base.items())), Intervention(var.name, val))
        try:
            check_arm(env, base, arm)
        except ValueError as e:
            bad.append(f"{env.name} {var.name}={val!r}: {e}")
    return len(bad), bad[:5]


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    from agentmill.lm.replay import RecordReplayLM, ReplayMiss
    from agentmill.lm.scripted import ScriptedLM
    from agentmill.methods.forensics import (Hypothesis, HypothesisRegistry, LMAgent, PlantedAgent, RegistryError,
                                             check_replay, replay, run_episode)
    from agentmill.methods.forensics.agents import planted_responder
    from agentmill.methods.forensics.hypotheses import Prediction, PostDataEditError
    from agentmill.methods.forensics.envs import ENVS, confounded_fixture
    from agentmill.methods.forensics.episode import Episode, OffPolicyRewindError
    from agentmill.methods.forensics.planner import check_arm
    from agentmill.methods.forensics.variables import Arm, ConfoundedArmError, Intervention

    stamp_prereg(ctx.data)
    checks: list[tuple[str, bool, str]] = []
    n_bad, examples = span_battery(s.n_arms, s.seed)
    ctx.progress("span locality", 1, 6)
    # the confounded fixture
    fx = confounded_fixture()
    rng = np.random.default_rng(s.seed + 1)
    refused, msg = 0, ""
    for i in range(20):
        base = {**_random_values(fx, rng), "deadline": "tight"}
        try:
            check_arm(fx, base, Arm("x", tuple(sorted(base.items())), Intervention("deadline", "none")))
        except ConfoundedArmError as e:
            refused += 1
            msg = str(e)
    checks.append(("confounded fixture refused on all 20 deadline arms", refused == 20, msg[:160]))
    checks.append(("the refusal names the document and line", "document 'task' line 1" in msg, msg[:160]))
    # planted replay identity, rewinds
    ident = total = rewinds_raised = rewinds_tried = 0
    for env in ENVS.values():
        for pol in env.policies:
            agent = PlantedAgent(env, pol)
            for i in range(s.episodes_per_env):
                vals = _random_values(env, rng)
                ep = run_episode(env, vals, agent, seed=s.seed, episode_id=f"{env.name}/{pol}/{i}")
                for rw in ("start", "first_exposure"):
                    total += 1
                    ident += replay(ep, agent, rewind=rw).tool_log() == ep.tool_log()
                var = env.variables[int(rng.integers(len(env.variables)))]
                alt = next(x for x in var.domain if x != vals[var.name])
                first = ep.first_exposure(var.name)
                for k in range(first + 1, len(env.docs) + 1):
                    rewinds_tried += 1
                    try:
                        replay(ep, agent, change=Intervention(var.name, alt), rewind=k)
                    except OffPolicyRewindError:
                        rewinds_raised += 1
                r = replay(ep, agent, change=Intervention(var.name, alt), rewind=first)
                if check_replay(ep, r) != var.name:
                    checks.append((f"check_replay accepts an honest replay ({env.name})", False, var.name))
    checks.append((f"planted replay without change is byte-identical ({ident}/{total})", ident == total, ""))
    checks.append((f"every post-exposure rewind raises ({rewinds_raised}/{rewinds_tried})",
                   rewinds_raised == rewinds_tried and rewinds_tried > 0, ""))
    ctx.progress("planted replay", 2, 6)
    # a stored replay edited outside the slot
    env = ENVS["loyalty"]
    ag = PlantedAgent(env, "self_consistency")
    ep = run_episode(env, env.values(), ag, seed=s.seed, episode_id="edit")
    r = replay(ep, ag, change=Intervention("actor", "developer"))
    path = ctx.work_dir / "edited_replay.jsonl"
    r.save(path)
    lines = path.read_text().splitlines()
    j = next(i for i, x in enumerate(lines) if '"doc":"notes"' in x)
    lines[j] = lines[j].replace("replaced the hard questions", "replaced some questions")
    path.write_text("\n".join(lines) + "\n")
    try:
        check_replay(ep, Episode.load(path))
        ok, why = False, "accepted"
    except ConfoundedArmError as e:
        ok, why = f"event line {j + 1}" in str(e), str(e)
    checks.append(("an edited replay log is refused naming its line", ok, why[:160]))
    # cassette: a scripted LM subject that reads the rendered text
    n_id = n_ep = 0
    miss_ok = True
    for env in ENVS.values():
        cas = ctx.work_dir / f"cassette-{env.name}.jsonl"
        cas.unlink(missing_ok=True)
        lm = ScriptedLM(planted_responder(env), spec=f"scripted:planted-{env.name}")
        rec_agent = LMAgent(env, RecordReplayLM(lm, cas, "record"))
        eps = []
        for i in range(max(1, s.cassette_episodes // len(ENVS))):
            vals = _random_values(env, rng)
            eps.append(run_episode(env, vals, rec_agent, seed=s.seed + i, episode_id=f"cas/{env.name}/{i}"))
        play_lm = RecordReplayLM(None, cas, "replay", spec=lm.spec)
        play_agent = LMAgent(env, play_lm)
        for ep in eps:
            n_ep += 1
            n_id += replay(ep, play_agent, rewind="start").tool_log() == ep.tool_log()
            var = next(v for v in env.variables if v.kind != "numeric")
            alt = next(x for x in var.domain if x != ep.values[var.name])
            try:
                replay(ep, play_agent, change=Intervention(var.name, alt))
                miss_ok = False
            except ReplayMiss:
                pass
        if play_lm.recorded != 0:
            miss_ok = False
    checks.append((f"cassette replay is byte-identical, model never asked ({n_id}/{n_ep})", n_id == n_ep, ""))
    checks.append(("a changed replay from a cassette raises ReplayMiss", miss_ok, ""))
    ctx.progress("cassette replay", 3, 6)
    # registry bad input
    reg_dir = ctx.work_dir / "registry-tamper"
    import shutil

    shutil.rmtree(reg_dir, ignore_errors=True)
    reg = HypothesisRegistry(reg_dir)
    h = Hypothesis("H1", "actor drives concealment", "malign", "self_consistency", ("actor",),
                   (Prediction("actor", "developer", -1),), Intervention("appeal", "asks_to_report"))
    reg.add(h)
    reg.freeze("H1")
    reg.record_rollouts("control", [], ["H1"])
    try:
        reg.revise("H1", statement="edited after the data")
        checks.append(("a revision after data is refused", False, ""))
    except PostDataEditError as e:
        checks.append(("a revision after data is refused", True, str(e)[:160]))
    led = reg_dir / "ledger.jsonl"
    rows = led.read_text().splitlines()
    ev = json.loads(rows[0])
    ev["payload"]["hypothesis"]["statement"] = "tampered"
    rows[0] = json.dumps(ev, sort_keys=True)
    led.write_text("\n".join(rows) + "\n")
    try:
        HypothesisRegistry(reg_dir)
        checks.append(("a tampered registry line is refused naming line 1", False, ""))
    except RegistryError as e:
        checks.append(("a tampered registry line is refused naming line 1", "line 1 " in str(e), str(e)[:160]))
    ctx.progress("registry", 4, 6)
    # greedy SmolLM2 (full)
    smol = None
    if s.lm:
        lm = ctx.load_lm(s.lm)
        env = ENVS["tedium"]
        cas = ctx.work_dir / "cassette-smollm2.jsonl"
        cas.unlink(missing_ok=True)
        live = LMAgent(env, RecordReplayLM(lm, cas, "record"), temperature=0.0, max_new_tokens=24)
        again = LMAgent(env, lm, temperature=0.0, max_new_tokens=24)
        eps, actions = [], []
        for i in range(s.lm_episodes):
            vals = env.values(n_errors=env.variable("n_errors").domain[i % 8])
            eps.append(run_episode(env, vals, live, seed=s.seed, episode_id=f"smol/{i}"))
            actions.append(eps[-1].action)
            ctx.progress("smollm2 record", i + 1, s.lm_episodes)
        play = LMAgent(env, RecordReplayLM(None, cas, "replay", spec=lm.spec), temperature=0.0, max_new_tokens=24)
        same = 0
        for i, ep in enumerate(eps):
            same += (replay(ep, again, rewind="start").tool_log() == ep.tool_log()
                     and replay(ep, play, rewind="start").tool_log() == ep.tool_log())
            ctx.progress("smollm2 replay", i + 1, s.lm_episodes)
        smol = same / s.lm_episodes
        ctx.data["smollm2_actions"] = actions
    ctx.progress("done", 6, 6)
    passed = sum(ok for _, ok, _ in checks)
    ctx.data.update({"checks": [{"check": n, "passed": ok, "detail": d} for n, ok, d in checks],
                     "span_violation_examples": examples})
    out = {"span_violations": Estimate.exact(n_bad, n=s.n_arms),
           "checks_passed": Estimate.exact(passed / len(checks), n=len(checks))}
    if smol is None:
        withhold(ctx.data, ["smollm2_identical"], "greedy hf:smollm2 replay runs at full only (model load)")
    else:
        out["smollm2_identical"] = Estimate.exact(smol, n=s.lm_episodes)
    return out


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    plt = pyplot()
    checks = data["checks"]
    fig, ax = plt.subplots(figsize=(7, 0.3 * len(checks) + 1))
    ax.barh(range(len(checks)), [1] * len(checks), color=["tab:green" if c["passed"] else "tab:red" for c in checks])
    ax.set_yticks(range(len(checks)))
    ax.set_yticklabels([c["check"][:70] for c in checks], fontsize=7)
    ax.set_xticks([])
    ax.invert_yaxis()
    ax.set_title("FO-6 replay checks (green = pass)")
    fig.tight_layout()
    p = out / "fo6_checks.png"
    save(fig, p)
    return [p]


EXPERIMENT = Experiment(
    id="e174.forensics_replay",
    title="E174 FO-6: counterfactual replay changes exactly one thing, and refuses when it would not",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    parallel_safe=True,
    quick_budget_s=10,
    reads=models_read("lm"),
    scale_note="Six envs; planted agents and a scripted LM subject that reads the rendered text (LLM-free at quick); "
               "full adds greedy hf:smollm2 on tedium (6 episodes, 24 new tokens each).",
)
