"""C-pinned-serving: Constraint Pinning (E164) in a LangGraph agent and an OpenAI Agents SDK agent talking over HTTP to
``agentmill serve`` with speculative decoding on (E179's DSpark), through compaction rounds of ConstraintRot episodes.

How one episode runs (``agents.py`` has the mechanics and says exactly what goes through the server): E164's
generator makes the episode (``test_iid``, seed 12, the five in-context locations), the office sandbox replays its
history up to the trigger, and each framework runs the trigger twice — **pinned** (LangGraph: LangChain's
``SummarizationMiddleware`` + the existing ``ConstraintPinningMiddleware``; Agents SDK: ``CompactingSession`` +
the existing ``PinnedSession`` with ``call_model_input_filter``) and **unpinned** (the same compaction, no pin). Every
agent-model request and every summary is the served model's, over HTTP, captured on the framework's own client; the
decision is ``RuleReader("semantic")``'s on the request as it reached the server. A second server with speculation
off (``--drafter none``) receives every captured request again (concurrently, on the second core).

Claims (pre-registered in docs/LOG.md, 2026-11-29, before any run), per framework; all exact — greedy serving, a
scripted reader and a seeded battery make every number a deterministic count, and one counterexample refutes:

- **PS-1** (i): the rule card is in every agent-model request of the pinned arm that reached the server (share 1.0).
- **PS-2** (ii): the pinned arm's violation rate over the server is 0, as E164's pinned arm with the scripted
  rule-reader; **PS-2/e164**: no episode where it differs from E164's pinned arm recomputed in-process on the same
  episodes (``create_agent`` + E164's scripted rule-dropping summary + ``ConstraintPinningMiddleware`` +
  ``RuleReader``, no server); **PS-2/control**: the unpinned arm violates in ≥ 50 % of episodes after compaction,
  which shows the check can fail.
- **PS-3** (iii): every captured request (agent and summary, both arms) replayed on the plain server returns the
  identical message (content; tool calls' names and arguments).
- **H-1**: the grader and the sandbox state agree on every episode.

Profiles. ``smoke`` (never judged; what CI runs): ``agentmill serve --model tiny`` with the n-gram drafter
(``--policy ngram:4``; the DSpark drafter is trained for SmolLM2 only, so this is the smallest servable
configuration with a drafter), 1 episode with short distractors (the tiny model's context is 2,048 bytes).
``quick``: SmolLM2-135M with its default DSpark drafter and ``dspark-async`` policy, 1 episode with 40–80-token
distractors. ``full``: the same server, 4 episodes with 150–300-token distractors (E164's smoke battery). Measured
wall times are in docs/LOG.md.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate
from agentmill.experiments.compose_pinned_serving import PAPER
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, Experiment, RunContext

FRAMEWORKS = ("langgraph", "openai_agents")
ARMS = ("pinned", "unpinned")
LABEL = {"langgraph": "LangGraph (langchain.agents.create_agent + SummarizationMiddleware)",
         "openai_agents": "OpenAI Agents SDK (Runner + CompactingSession)"}


@dataclass(frozen=True)
class Setup:
    model: str = "hf:smollm2"
    """``agentmill serve --model``: ``hf:smollm2`` (SmolLM2-135M-Instruct) or ``tiny`` (a random 2-layer test model)."""
    drafter: str = "auto"
    """``--drafter`` of the speculative server: ``auto`` = DSpark's shipped drafter for SmolLM2."""
    policy: str = "auto"
    """``--policy`` of the speculative server: ``auto`` = ``dspark-async`` for SmolLM2; ``ngram:4`` = the n-gram
    drafter verified 4 at a time."""
    n_episodes: int = 8
    """``test_iid`` trigger episodes (soft and hard in turn, the five in-context locations)."""
    distractor_tokens: tuple[int, ...] = (150, 300)
    """Distractor length range (whitespace tokens) of E164's generator; (150, 300) is E164's smoke battery."""
    seed: int = 12
    """E164's episode seed (its framework experiment's)."""
    lc_trigger: int = 4
    """LangGraph ``SummarizationMiddleware`` trigger, in messages (E164's)."""
    lc_keep: int = 2
    """LangGraph ``SummarizationMiddleware`` messages kept after a summary (E164's)."""
    sdk_trigger_tokens: int = 200
    """Agents SDK ``CompactingSession`` trigger, in whitespace tokens of the stored history."""
    sdk_keep_last: int = 2
    """Agents SDK ``CompactingSession`` messages kept after a summary."""
    agent_max_tokens: int = 8
    """Served generation per agent-model request (the decision is the scripted reader's; the text is checked)."""
    summary_max_tokens: int = 24
    """Served generation per compaction summary."""
    max_model_len: int = 4096
    """``--max-model-len`` of both servers (prompt + generation)."""
    pin: bool = True
    """False removes the pin from the pinned arm: the negative control of PS-1 (tests), never a published run."""


SETUPS = {
    "smoke": Setup(model="tiny", drafter="ngram", policy="ngram:4", n_episodes=1, distractor_tokens=(40, 80),
                   sdk_trigger_tokens=100, agent_max_tokens=4, summary_max_tokens=8),
    # quick: E164's smoke battery cut to 40-80-token distractors (as smoke), so the compaction trigger is lowered too
    "quick": Setup(n_episodes=1, distractor_tokens=(40, 80), sdk_trigger_tokens=100),
    "full": Setup(n_episodes=4),
}

WHY = ("greedy decoding on both servers, a scripted rule-reader and a fixed seeded battery of episodes: the number "
       "is a deterministic count over the captured requests, and one counterexample refutes the claim")
SRC = "docs/methods/constraint_rot.md \"Use it\" 5; docs/methods/dspark.md \"Use it\"; issue 23"


def _claims() -> tuple[Claim, ...]:
    out = []
    for f in FRAMEWORKS:
        name = LABEL[f]
        out += [
            Claim(f"PS-1/{f}", f"{name}, pinned, over agentmill serve with speculation on: the rule card is in every "
                               f"agent-model request that reached the server.", SRC, "100% (E164 CR-12d)",
                  f"card_share_{f}", "in", 1.0, upper=1.0, judge_on="exact", exact_why=WHY),
            Claim(f"PS-2/{f}", f"{name}, pinned, over the server: the scripted rule-reader never violates after "
                               f"compaction (E164's pinned arm: 0).", SRC, "0 (E164 pinned arm, RuleReader)",
                  f"v_pinned_{f}", "in", 0.0, upper=0.0, judge_on="exact", exact_why=WHY),
            Claim(f"PS-2/e164/{f}", f"{name}, pinned, over the server: no episode whose violation differs from E164's "
                                    f"pinned arm recomputed in-process on the same episodes.", SRC, "0 episodes",
                  f"mismatch_e164_{f}", "in", 0.0, upper=0.0, judge_on="exact", exact_why=WHY),
            Claim(f"PS-2/control/{f}", f"{name}, unpinned (same server, same compaction): the rule-reader violates "
                                       f"after compaction in at least half of the episodes (the check can fail).",
                  SRC, "100% (E164 CR-12b, scripted summary)", f"v_unpinned_{f}", ">=", 0.5, judge_on="exact",
                  exact_why=WHY),
            Claim(f"PS-3/{f}", f"{name}: every request it sent (agent and summary, both arms) replayed on the server "
                               f"with speculation off (--drafter none) returns the identical message.", SRC,
                  "exact verification: identical under greedy (E179)", f"served_equals_plain_{f}", "in", 1.0,
                  upper=1.0, judge_on="exact", exact_why=WHY),
        ]
    out.append(Claim("H-1", "The grader and the sandbox state agree on every episode of every arm.",
                     "docs/methods/constraint_rot.md, health checks", "—", "health_grader_mismatch", "in", 0.0,
                     upper=0.0, judge_on="exact",
                     exact_why="a count of grader/sandbox disagreements in this run: any one is a bug, not noise"))
    return tuple(out)


CLAIMS = _claims()


def _share(xs: list[bool]) -> float:
    return float(np.mean(xs)) if xs else float("nan")


def _check(s: Setup) -> None:
    if s.n_episodes < 1 or len(s.distractor_tokens) != 2 or s.lc_keep < 1 or s.lc_trigger <= s.lc_keep:
        raise ValueError(f"bad sizes: n_episodes={s.n_episodes}, distractor_tokens={s.distractor_tokens}, "
                         f"lc_trigger={s.lc_trigger}, lc_keep={s.lc_keep} (need >= 1, two bounds, trigger > keep)")
    if s.sdk_trigger_tokens < 1 or s.sdk_keep_last < 1 or s.agent_max_tokens < 1 or s.summary_max_tokens < 1:
        raise ValueError("sdk_trigger_tokens, sdk_keep_last, agent_max_tokens and summary_max_tokens must be >= 1")


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    from agentmill.envs.office import OfficeSandbox
    from agentmill.experiments.compose_pinned_serving.agents import (Replayer, WireLog, answer_of, body_digest,
                                                                     run_agents_sdk_episode, run_langgraph_episode,
                                                                     served_langchain_models, servers)
    from agentmill.methods.constraint_rot.catalogue import load_catalogue
    from agentmill.methods.constraint_rot.generate import DEFAULT_LOCATIONS, generate_episodes
    from agentmill.methods.constraint_rot.messages import WhitespaceCounter

    _check(s)
    counter = WhitespaceCounter()
    log = WireLog()
    rows: list[Any] = []
    refs: dict[str, bool] = {}
    timing: dict[str, float] = {}
    t0 = time.perf_counter()
    ctx.progress(f"C-pinned-serving: starting agentmill serve ({s.model}, drafter {s.drafter}, policy {s.policy}) "
                 f"and its --drafter none twin", 0, None)
    with servers(s.model, s.drafter, s.policy, max_model_len=s.max_model_len) as sv, \
            OfficeSandbox(0, smtp=False, http=False) as sb:
        # while the two servers load: the episodes, and E164's pinned arm in-process on them (PS-2/e164's reference)
        lo, hi = (int(x) for x in s.distractor_tokens)
        eps = generate_episodes(load_catalogue(), split="test_iid", n=s.n_episodes, seed=s.seed, counter=counter,
                                locations=DEFAULT_LOCATIONS, distractor_tokens=(lo, hi), sandbox=sb)
        for ep in eps:
            refs[ep.episode_id] = run_langgraph_episode(ep, sb, pinned=True, counter=counter, trigger=s.lc_trigger,
                                                        keep=s.lc_keep).violation
        with Replayer(sv.ready().plain_url) as rp:
            ctx.data["servers"] = {"spec_args": list(sv.spec_args), "plain_args": list(sv.plain_args),
                                   "pids": list(sv.pids), "policies": list(sv.policies)}
            served_policy = sv.policies[0] if sv.policies else s.policy
            timing["servers_up_s"] = time.perf_counter() - t0
            total = len(eps) * len(FRAMEWORKS) * len(ARMS)
            done = 0
            for ep in eps:
                lc = served_langchain_models(sv.spec_url, log, agent_max_tokens=s.agent_max_tokens,
                                             summary_max_tokens=s.summary_max_tokens)
                summaries: dict[str, str] = {}
                for arm in ARMS:
                    pinned = arm == "pinned" and s.pin
                    for f in FRAMEWORKS:
                        log.where = {"episode": ep.episode_id, "framework": f, "arm": arm}
                        since = len(log.entries)
                        if f == "langgraph":
                            row = run_langgraph_episode(ep, sb, pinned=pinned, counter=counter, trigger=s.lc_trigger,
                                                        keep=s.lc_keep, served=lc, log=log)
                        else:
                            row = run_agents_sdk_episode(ep, sb, pinned=pinned, counter=counter, url=sv.spec_url,
                                                         log=log, trigger_tokens=s.sdk_trigger_tokens,
                                                         keep_last=s.sdk_keep_last,
                                                         summary_max_tokens=s.summary_max_tokens,
                                                         agent_max_tokens=s.agent_max_tokens, summary_cache=summaries)
                        row.arm = arm
                        rows.append(row)
                        rp.submit(log.entries[since:])
                        done += 1
                        ctx.progress(f"C-pinned-serving {f}/{arm}", done, total)
            timing["episodes_s"] = time.perf_counter() - t0 - timing["servers_up_s"]
            ctx.progress("C-pinned-serving: waiting for the --drafter none replay", done, total)
            plain = rp.answers()
        timing["total_s"] = time.perf_counter() - t0

    served = [answer_of(e["response"]) for e in log.entries]
    same = [a is not None and a == b for a, b in zip(served, plain)]
    errors = [i for i, e in enumerate(log.entries) if e["status"] != 200]
    out: dict[str, Estimate] = {}
    table: dict[str, dict[str, Any]] = {}
    ex = Estimate.exact
    for f in FRAMEWORKS:
        pin_rows = [r for r in rows if r.framework == f and r.arm == "pinned"]
        un_rows = [r for r in rows if r.framework == f and r.arm == "unpinned"]
        cards = [c for r in pin_rows for c in r.cards]
        idx = [i for i, e in enumerate(log.entries) if e["framework"] == f]
        out[f"card_share_{f}"] = ex(_share(cards), len(cards))
        out[f"v_pinned_{f}"] = ex(_share([r.violation for r in pin_rows]), len(pin_rows))
        out[f"mismatch_e164_{f}"] = ex(float(sum(r.violation != refs[r.episode_id] for r in pin_rows)), len(pin_rows))
        out[f"v_unpinned_{f}"] = ex(_share([r.violation for r in un_rows]), len(un_rows))
        out[f"served_equals_plain_{f}"] = ex(_share([same[i] for i in idx]), len(idx))
        out[f"card_share_unpinned_{f}"] = ex(_share([c for r in un_rows for c in r.cards]),
                                             sum(len(r.cards) for r in un_rows))
        out[f"compacted_share_{f}"] = ex(_share([r.compacted for r in pin_rows + un_rows]), len(pin_rows + un_rows))
        summ = [i for i in idx if log.entries[i]["tag"] == "summary"]
        out[f"card_in_summary_requests_{f}"] = ex(_share([
            "[POLICY" in str(log.entries[i]["request"].get("messages")) for i in summ]), len(summ))
        table[f] = {"pinned": {"card_share": out[f"card_share_{f}"].value, "violation": out[f"v_pinned_{f}"].value,
                               "agent_requests": len(cards)},
                    "unpinned": {"card_share": out[f"card_share_unpinned_{f}"].value,
                                 "violation": out[f"v_unpinned_{f}"].value,
                                 "agent_requests": sum(len(r.cards) for r in un_rows)},
                    "requests": len(idx), "summary_requests": len(summ),
                    "compacted": out[f"compacted_share_{f}"].value,
                    "served_equals_plain": out[f"served_equals_plain_{f}"].value}
    out["health_grader_mismatch"] = ex(float(sum(r.grader_mismatch for r in rows)), len(rows))
    out["http_errors"] = ex(float(len(errors)), len(log.entries))
    out["v_e164_reference"] = ex(_share(list(refs.values())), len(refs))
    ctx.data.update({
        "table": table, "timing": timing, "episodes": [ep.episode_id for ep in eps],
        "e164_reference": refs, "rows": [r.as_dict() for r in rows],
        "requests": [{"i": i, "tag": e["tag"], "framework": e["framework"], "arm": e["arm"], "episode": e["episode"],
                      "status": e["status"], "prompt_tokens": (e["response"].get("usage") or {}).get("prompt_tokens"),
                      "body_sha256": body_digest(e["request"]),
                      "served": served[i], "plain": plain[i], "same": same[i]} for i, e in enumerate(log.entries)],
        "setting": {"model": s.model, "drafter": s.drafter, "policy": served_policy,
                    "frameworks": {f: LABEL[f] for f in FRAMEWORKS}, "pin": s.pin},
    })
    return out


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    table = data.get("table")
    if not table:
        return []
    plt = pyplot()
    bars = [(f"{f}\n{arm}", table[f][arm]["card_share"], table[f][arm]["violation"]) for f in FRAMEWORKS
            if f in table for arm in ARMS]
    x = np.arange(len(bars))
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    ax.bar(x - 0.2, [b[1] for b in bars], 0.4, label="card in agent requests at the server")
    ax.bar(x + 0.2, [b[2] for b in bars], 0.4, label="violation rate (RuleReader)")
    ax.set_xticks(x, [b[0] for b in bars])
    ax.set_ylim(0, 1.3)
    ax.set_ylabel("rate")
    s = data.get("setting", {})
    same = {f: table[f]["served_equals_plain"] for f in FRAMEWORKS if f in table}
    ax.set_title(f"Pinned agents over agentmill serve ({s.get('model')}, policy {s.get('policy')}); served = plain: "
                 + ", ".join(f"{f} {v:.0%}" for f, v in same.items()), fontsize=8)
    ax.legend(fontsize=7, loc="upper center", ncol=2)
    fig.tight_layout()
    p = out / "compose_pinned_serving.png"
    save(fig, p, dpi=110)
    return [p]


def _reads(s: Setup, model: str | None) -> list[Path]:
    """The served model's files (``tiny`` has none: it is built from a seed)."""
    from agentmill.lm import model_files

    return model_files(s.model) if s.model.startswith("hf:") else []


EXPERIMENT = Experiment(
    id="compose_pinned_serving.served",
    title="Pinned LangGraph and Agents SDK agents over agentmill serve (DSpark on): card in every request, E164's "
          "violations, served = plain",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    reads=_reads,
    requires=frozenset({"constraint-rot", "langchain", "openai-agents", "serve", "hf"}),
    quick_budget_s=60,
    scale_note="Two agentmill serve processes on loopback (speculative: SmolLM2-135M + DSpark's shipped drafter, "
               "dspark-async; plain twin: --drafter none), one thread each; LangGraph (langchain.agents.create_agent "
               "+ SummarizationMiddleware) and OpenAI Agents SDK 0.24 (Runner + CompactingSession) agents; agent "
               "requests and summaries served (greedy, 8 / 24 new tokens), decisions by the scripted RuleReader "
               "reading the request as it reached the server; E164's test_iid episodes (seed 12): quick 1 episode "
               "with 40-80-token distractors, full 4 with 150-300; smoke serves the tiny test model with the n-gram "
               "drafter. Quick takes ~60 s (two SmolLM2 server starts, ~20 s, then ~4k prompt tokens served twice).",
)
