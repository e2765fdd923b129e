"""E176 AC-12: the LLM roles work end to end through ``agentmill.lm``, offline (an engineering claim [R]).

For each ground truth in the setup, a full 2-round run (+ validation round) with LLM advocates, arbiter and reviser
whose model is ``openai:autocog-scripted@http://127.0.0.1:PORT/v1`` — the official ``openai`` SDK talking real HTTP
to :func:`~agentmill.methods.autocog.agents.loopback.scripted_server` in a thread. The stub stands in for a capable
chat model at an OpenAI-compatible endpoint; its replies are scripted (a pure function of the prompt), so this
measures the plumbing — prompt building, JSON extraction, retries with the error fed back, the sandbox check of
LLM code, fallbacks, ledgering and replay — not any model's judgement. The script injects two planned faults [R]: one
malformed JSON reply (first advocate call) and one theory that does not compile (the reviser's first round-1 try).
It also exercises the reviser's critic (one LLM critic call per revision, answered ``continue``, which ends the inner
loop) and LLM-written metric code: in round 2 (the validation round in smoke) advocate 1 sends a ``metric(data)``
source that passes the sandbox check and is used, and advocate 2 one that the AST policy rejects, so its named
template is used instead (``fallback: true`` in the proposal's ``metric_code`` record).

Per run: (a) it completes, the malformed reply was retried, the non-compiling theory is recorded as a failed
candidate, the critic's verdict is in the candidate records, one observation used sandboxed metric code and one
logged the template fallback, the audit is clean — including one ``lm_call`` ledger event before every LM-driven step —
and every HTTP request the server saw is one ``lm_call`` event (nothing asked twice, nothing unrecorded); (b) a
RecordReplay rerun in a fresh directory that has only ``lm_calls.jsonl`` ends at a byte-identical ledger head while a
fresh server counts 0 requests; (c) no prompt — from the ledger's ``lm_call`` events and from the server's own log —
contains the ground truth's name, prose or code tokens (``methods.autocog.leakage``). The scanner's
sensitivity is checked in the same run by planting the GT's code in a copy of a prompt (a positive control).

A real small LM is not run: SmolLM2-135M and Gemma-3-270M cannot write theory code (docs/papers.md E176), so at
most a prompt-format smoke test would fit them [R], and AC-12's setup is the stub at quick and full alike. The optional
endpoint profile (a user's capable model, AC-7 cells) is separate and not CI.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentmill.core.stats import Estimate, proportion_estimate
from agentmill.experiments.e176_autocog import PAPER
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, Experiment, RunContext


@dataclass(frozen=True)
class Setup:
    gts: tuple[str, ...] = ("ttb", "tallying", "wadd", "dial3", "drwadd")
    """Ground truths, one run each (every GT's tokens are scanned against that run's prompts)."""
    rounds: int = 2
    """Rounds (+ validation round); 2 rounds as pre-registered [R]."""
    n_designs: int = 4
    """Fallback advocate's designs (used only if the LLM advocate fails three times)."""
    max_candidates: int = 12
    """Fallback reviser's budget; also its n_sim-based loss scores the LLM's candidates."""
    reviser_iters: int = 10
    """LLM reviser inner-loop iterations (MAX_CRITIQUE_ITERS = 10 [C]); the stub's critic says ``continue``
    on the first accepted candidate, so each revision stops after one iteration."""
    eps: float = 0.1
    """Ground-truth action noise."""
    seed: int = 0


SETUPS = {"smoke": Setup(gts=("wadd",), rounds=1), "quick": Setup(gts=("wadd", "dial3")), "full": Setup()}

CLAIMS = (
    Claim("E176-AC12a", "A 2-round run with LLM roles against a loopback OpenAI-compatible stub completes; the "
          "malformed reply is retried, the non-compiling theory is logged as a failed candidate, the critic's "
          "verdicts and the sandboxed metric code (used once, rejected once with the template fallback logged) "
          "are recorded, the audit (with one lm_call per LM-driven step) is clean and every HTTP request is "
          "exactly one lm_call event (share of runs).",
          "[R] engineering claim, rule pre-registered", "—", "ac12_runs_ok", ">=", 1.0,
          judge_on="exact",
          exact_why="the model is a scripted stub (replies a pure function of the prompt): each run is a "
                    "deterministic pass/fail check of the plumbing"),
    Claim("E176-AC12b", "A RecordReplay rerun ends at a byte-identical ledger head without calling the model "
          "(share of runs).", "[R] engineering claim, rule pre-registered", "—", "ac12_replay_identical", ">=",
          1.0, judge_on="exact",
          exact_why="the model is a scripted stub (replies a pure function of the prompt): each replay is a "
                    "deterministic byte comparison"),
    Claim("E176-AC12c", "No prompt the loop sends contains the ground truth's name, prose or code tokens (count of "
          "hits over all prompts).", "[R] engineering claim: no GT leak", "—", "ac12_leaked_tokens", "<=", 0.0,
          judge_on="exact",
          exact_why="a count of ground-truth tokens found in every prompt sent, with a planted positive control: any "
                    "hit is a leak"),
)


def build_loop(lm, gt_key: str, s: Setup, run_dir: Path):
    """The loop with LLM roles over ``lm`` and programmatic fallbacks, as ``agentmill autocog run --roles llm``
    builds it (the CLI is a face; experiments do not import it)."""
    from agentmill.methods.autocog.agents.llm import LLMAdvocate, LLMArbiter, LLMReviser
    from agentmill.methods.autocog.agents.search import ProgramSpaceReviser, RuleArbiter, SearchAdvocate
    from agentmill.methods.autocog.cohorts import SimulatedCohort
    from agentmill.methods.autocog.loop import AutoCogLoop, LoopConfig
    from agentmill.methods.autocog.recovery import GROUND_TRUTHS, battery_exclusions, load_batteries

    gt = GROUND_TRUTHS[gt_key]
    adv = tuple(LLMAdvocate(lm, fallback=SearchAdvocate(n_designs=s.n_designs, rating_max=gt.rating_max),
                            run_dir=run_dir, name=f"advocate{k}") for k in (1, 2))
    arb = LLMArbiter(lm, fallback=RuleArbiter(), run_dir=run_dir)
    rev = LLMReviser(lm, fallback=ProgramSpaceReviser(max_candidates=s.max_candidates), run_dir=run_dir,
                     max_iters=s.reviser_iters)
    return AutoCogLoop(LoopConfig(n_rounds=s.rounds, seed=s.seed, validation_round=True),
                       seeds=gt.seed_theories(), advocates=adv, arbiter=arb, reviser=rev,
                       cohort=SimulatedCohort(gt.theory(), action_noise=s.eps, seed=s.seed), run_dir=run_dir,
                       exclude_pairs=battery_exclusions(load_batteries()[gt.rating_max]))


def run_one(gt_key: str, s: Setup, base: Path) -> dict:
    """One LLM-role run over the loopback stub, its audit, leak scan and RecordReplay rerun."""
    from agentmill.core.ledger import Ledger
    from agentmill.lm import load_lm
    from agentmill.methods.autocog.agents.loopback import scripted_server
    from agentmill.methods.autocog.audit import audit
    from agentmill.methods.autocog.leakage import find_leaks, gt_tokens
    from agentmill.methods.autocog.recovery import GROUND_TRUTHS

    run_dir, replay_dir = base / gt_key / "run", base / gt_key / "replay"
    for d in (run_dir, replay_dir):
        if d.exists():
            shutil.rmtree(d)
    t0 = time.monotonic()
    with scripted_server() as srv:
        res = build_loop(load_lm(srv.lm_spec), gt_key, s, run_dir).run()
        served = list(srv.prompts)
    run_s = time.monotonic() - t0
    led = Ledger(run_dir)
    calls = [led.payload(e) for e in led.events if e["kind"] == "lm_call"]
    props = [led.payload(e) for e in led.events if e["kind"] == "proposal"]
    cands = [led.payload(e) for e in led.events if e["kind"] == "candidate"]
    retried = any(any("JSON" in x for x in p["extra"].get("llm_errors", [])) for p in props)
    failed_cand = any(c.get("errors") for x in cands for c in x["candidates"] if isinstance(c, dict))
    critic_verdicts = [c["critic"] for x in cands for c in x["candidates"] if isinstance(c, dict) and "critic" in c]
    critic_ok = bool(critic_verdicts) and not any(c.get("fallback") for c in critic_verdicts)
    metric_code_used = sum("source" in p["metric"] for p in props)
    metric_fallbacks = sum(bool((p["extra"].get("metric_code") or {}).get("fallback")) for p in props)
    problems = audit(run_dir)
    fallbacks = sum(bool(p["extra"].get("fallback")) for p in props)
    gt = GROUND_TRUTHS[gt_key]
    tokens = gt_tokens(gt.theory(), extra_names=[gt_key])
    prompts = [c["prompt"] for c in calls] + served
    leaks = find_leaks(prompts, tokens)
    planted = find_leaks([prompts[0] + "\n" + tokens.lines[-1]], tokens) if prompts and tokens.lines else []
    ok = (res.status == "done" and retried and failed_cand and critic_ok and metric_code_used >= 1
          and metric_fallbacks >= 1 and not problems and len(calls) == len(served))
    shutil.copytree(run_dir, replay_dir, ignore=shutil.ignore_patterns("ledger.jsonl", "state.json", "blobs"))
    with scripted_server() as srv2:
        res2 = build_loop(load_lm(srv2.lm_spec), gt_key, s, replay_dir).run()
        replay_requests = srv2.requests
    return {"gt": gt_key, "status": res.status, "run_s": round(run_s, 2), "lm_calls": len(calls),
            "http_requests": len(served), "prompt_tokens": sum(c["prompt_tokens"] for c in calls),
            "completion_tokens": sum(c["completion_tokens"] for c in calls),
            "by_role": {r: sum(c["role"] == r for c in calls) for r in sorted({c["role"] for c in calls})},
            "retried_malformed": retried, "failed_candidate_logged": failed_cand, "advocate_fallbacks": fallbacks,
            "critic_verdicts": [c["verdict"] for c in critic_verdicts], "critic_ok": critic_ok,
            "metric_code_used": metric_code_used, "metric_code_fallbacks": metric_fallbacks,
            "audit_problems": problems, "ok": ok, "surfaced": res.surfaced,
            "llm_theory_admitted": any((x.get("theory") or {}).get("factory") == "code" for x in cands),
            "leaks": [(i, t[:80]) for i, t in leaks][:20], "n_leaks": len(leaks), "n_prompts": len(prompts),
            "planted_leak_found": bool(planted), "replay_identical": res2.ledger_head == res.ledger_head,
            "replay_requests": replay_requests, "head": res.ledger_head}


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    from agentmill.methods.autocog.theory import sha256

    base = Path(ctx.work_dir) / sha256(repr(s))[:10]
    rows = []
    for i, g in enumerate(s.gts):
        rows.append(run_one(g, s, base))
        ctx.progress("AC-12 runs", i + 1, len(s.gts))
    ctx.data.update({"runs": rows})
    n = len(rows)
    sensitive = all(r["planted_leak_found"] for r in rows)
    return {"ac12_runs_ok": proportion_estimate(sum(r["ok"] for r in rows), n),
            "ac12_replay_identical": proportion_estimate(sum(r["replay_identical"] and r["replay_requests"] == 0
                                                             for r in rows), n),
            # an insensitive scanner proves nothing: report a hit so the claim cannot pass on a broken check
            "ac12_leaked_tokens": Estimate.exact(sum(r["n_leaks"] for r in rows) + (0 if sensitive else 1), n=n),
            "ac12_scanner_sensitive": Estimate.exact(float(sensitive), n=n),
            "ac12_lm_calls_per_run": Estimate.exact(sum(r["lm_calls"] for r in rows) / n, n=n),
            "ac12_tokens_per_run": Estimate.exact(sum(r["prompt_tokens"] + r["completion_tokens"] for r in rows) / n,
                                                  n=n),
            "ac12_run_s_mean": Estimate.exact(sum(r["run_s"] for r in rows) / n, n=n)}


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    plt = pyplot()

    runs = data["runs"]
    roles = sorted({r for x in runs for r in x["by_role"]})
    fig, ax = plt.subplots(figsize=(6, 3))
    bottom = [0] * len(runs)
    for role in roles:
        vals = [x["by_role"].get(role, 0) for x in runs]
        ax.bar([x["gt"] for x in runs], vals, bottom=bottom, label=role)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_ylabel("lm_call events (incl. retries)")
    ax.set_title("AC-12: LM calls per run by role (loopback stub)", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    p = out / "lm_calls_by_role.png"
    save(fig, p, dpi=110)
    return [p]


EXPERIMENT = Experiment(
    id="e176.llm",
    quick_budget_s=70,
    parallel_safe=True,
    title="E176 AutoCog: LLM roles end to end over a loopback OpenAI-compatible stub",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    requires=frozenset({"openai"}),
    plots=plots,
    scale_note="Engineering claim, no real model: the LLM roles' model is a scripted stub served over real HTTP on "
               "127.0.0.1 (openai SDK client), standing in for a capable chat model; replies exercise the plumbing "
               "(one malformed JSON, one non-compiling theory), not judgement. 2 rounds + validation per GT "
               "(quick: WADD, dial3; full: all 5 GTs).",
)
