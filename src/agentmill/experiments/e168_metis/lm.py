"""E168 MT-10: the LLM-driven path works offline and replays (an engineering claim [R]).

A 20-task stream runs with ``LMPolicy``, ``LMDistiller`` and ``LMCodifier`` against the real ``openai:`` client and a
loopback stub server (``lm.loopback.LoopbackServer``) whose scripted responder plays a competent model: it reads the
task from the prompt, replays the reference steps against the observations so far and answers the next
``CALL app__endpoint {json}`` line; it writes plans as JSON and tools by compiling the rendered request. Three faults
are injected: one malformed JSON reply (re-asked), one non-compiling tool and one hostile tool (``import os``), both
of which validation must reject. Every LM call goes through ``lm.replay.RecordReplayLM``; the rerun in ``replay``
mode, with the server gone, must reproduce the stream byte for byte.

The embedded-SmolLM2 five-task run (accuracy, re-asks and fallbacks reported, no threshold) is full only; its LM
policy answers one line of at most 60 new tokens per step.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentmill.core.stats import Estimate
from agentmill.experiments.e168_metis import PAPER
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, Experiment, RunContext

NON_COMPILING = "def run(api, **slots):\n    return (\n"
HOSTILE = "import os\ndef run(api, **slots):\n    return os.listdir('/')\n"


@dataclass(frozen=True)
class Setup:
    n_tasks: int = 20
    shift_at: int = 10
    k: int = 2
    """Gate threshold for this short stream (so that at least three tools are built)."""
    malformed_at: int = 5
    """The policy request (1-based) answered with malformed JSON."""
    seed: int = 0
    embedded: str = ""
    """An embedded model for the short LLM-driven run (full: hf:smollm2); empty = not run. Accuracy and fallbacks
    are reported, with no threshold (a 135M model rarely emits a valid call)."""
    embedded_tasks: int = 5
    embedded_max_steps: int = 8
    """Step cap of the embedded run (a SmolLM2 step on this CPU costs ≈ 10 s; the spec's 30 steps × 5 tasks would
    take ≈ 25 min)."""


SETUPS = {"smoke": Setup(n_tasks=12, shift_at=6, embedded="scripted:echo", embedded_tasks=2), "quick": Setup(),
          "full": Setup(embedded="hf:smollm2")}

CLAIMS = (
    Claim("E168-MT10", "The LLM-driven path runs offline on the loopback stub: the stream completes, the malformed "
          "reply is re-asked, the non-compiling and the hostile tool are rejected, and the RecordReplay rerun is "
          "byte-identical (share of checks passed).", "[R] engineering claim", "—", "mt10_checks_passed", ">=",
          1.0, judge_on="exact", exact_why="a fixed battery of pass/fail checks on one scripted run"),
)


class Responder:
    """The scripted 'model' behind the loopback server (module docstring)."""

    def __init__(self, contacts: list[str], products: list[str], malformed_at: int) -> None:
        from agentmill.envs.appsim import PATTERNS
        from agentmill.methods.metis.canonical import PatternCanonicaliser

        self.canon = PatternCanonicaliser(contacts, products)
        self.by_key = {PatternCanonicaliser.normalise(p.key): p for p in PATTERNS}
        self.malformed_at = malformed_at
        self.policy_requests = 0
        self.codifier_requests = 0
        self.faults: list[str] = []

    def __call__(self, req) -> str:
        text = req.prompt
        if text.startswith("ROLE: policy"):
            return self.policy(text)
        if text.startswith("ROLE: distiller"):
            key = re.search(r"^PATTERN: (.*)$", text, flags=re.M).group(1)
            p = self.by_key.get(key)
            return json.dumps([s.to_dict() for s in p.steps]) if p else "[]"
        if text.startswith("ROLE: codifier"):
            return self.codifier(text)
        return "REPLY I do not know this role"

    def policy(self, text: str) -> str:
        from agentmill.envs.appsim import ApiError, Knobs, Runner, StepFailure

        self.policy_requests += 1
        if self.policy_requests == self.malformed_at and "ERROR in your last reply" not in text:
            self.faults.append("malformed")
            return 'CALL payments__list {"direction": "sent",'
        query = re.search(r"^TASK: (.*)$", text, flags=re.M).group(1)
        pat = self.canon.canonicalise(query)
        p = self.by_key.get(pat.key)
        blocks = re.findall(r"^CALL (\S+) (.*)\nOBSERVATION: (.*)$", text, flags=re.M)
        tool = re.search(r"^- (tool__\S+)\(", text, flags=re.M)
        if tool and not any(b[0].startswith("tool__") for b in blocks):
            return f"CALL {tool.group(1)} {{}}"
        if p is None:
            return 'CALL answer {"value": null}'
        obs = [json.loads(b[2]) for b in blocks if not b[0].startswith("tool__")]
        cents = any("amount_cents" in it for o in obs if isinstance(o, dict) for it in o.get("items", []))

        class Need(Exception):
            pass

        it = iter(obs)

        def api(app: str, endpoint: str, /, **args: Any) -> Any:
            o = next(it, None)
            if o is None:
                raise Need(f"CALL {app}__{endpoint} {json.dumps(args, sort_keys=True)}")
            if isinstance(o, dict) and "error" in o:
                raise ApiError(o["error"]["code"], o["error"]["message"])
            return o

        knobs = Knobs(lambda ep: True, lambda ep: None,
                      lambda ep, f: ("amount_cents", 0.01) if (f == "amount" and cents) else
                      (("amount", 1.0) if f == "amount" else (f, 1.0)))
        runner = Runner(api, knobs)
        try:
            for i, s in enumerate(p.steps):
                runner.run_step(i, s, pat.values)
        except Need as n:
            return str(n)
        except StepFailure:
            return 'CALL answer {"value": null}'
        return "CALL answer " + json.dumps({"value": runner.answer})

    def codifier(self, text: str) -> str:
        from agentmill.envs.appsim import Step
        from agentmill.methods.metis.codify import CompileCodifier
        from agentmill.methods.metis.records import CodifyRequest, Fact

        self.codifier_requests += 1
        if self.codifier_requests == 1:
            self.faults.append("non-compiling tool")
            return "```python\n" + NON_COMPILING + "```"
        if self.codifier_requests == 2:
            self.faults.append("hostile tool")
            return "```python\n" + HOSTILE + "```"
        body = json.loads(text.split("REQUEST: ", 1)[1])
        req = CodifyRequest(body["pattern_key"], tuple(tuple(x) for x in body["signature"]),
                            tuple(Step.from_dict(d) for d in body["plan_steps"]), (),
                            tuple(Fact(f["subject"], f["key"], f["value"]) for f in body["facts"]))
        return "```python\n" + CompileCodifier().codify(req).source + "```"


def _rows_digest(rows: list[dict]) -> str:
    import hashlib

    return hashlib.sha256(json.dumps(rows, sort_keys=True, default=str).encode()).hexdigest()


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    from agentmill.envs.appsim import TaskStream
    from agentmill.lm import load_lm
    from agentmill.lm.loopback import LoopbackServer
    from agentmill.lm.replay import RecordReplayLM
    from agentmill.methods.metis import MetisConfig, run_stream

    stream = TaskStream(n_tasks=s.n_tasks, shift_at=s.shift_at, seed=s.seed)
    world = stream.world()
    cfg = MetisConfig(mode="metis", k=s.k, codifier="lm")
    path = Path(ctx.work_dir) / "metis_lm_replay.jsonl"
    if path.exists():
        path.unlink()
    responder = Responder(world.contact_names(), world.product_names(), s.malformed_at)
    with LoopbackServer(responder, model="metis-stub") as srv:
        lm = RecordReplayLM(load_lm(srv.lm_spec), path, mode="record")
        first = run_stream(cfg, stream, lm=lm, seed=s.seed)
        served = srv.requests
    ctx.progress("record run", 1, 2)
    replay = RecordReplayLM(None, path, mode="replay", spec=lm.spec)
    second = run_stream(cfg, stream, lm=replay, seed=s.seed)
    ctx.progress("replay run", 2, 2)
    roles = first.roles  # type: ignore[attr-defined]
    tools = first.store.tools(status=None)  # type: ignore[attr-defined]
    rejected = [t for t in tools if t.status == "rejected"]
    reasons = [" ".join(t.validation.reasons) for t in rejected if t.validation]
    checks = {
        "stream completed": len(first.rows) == s.n_tasks,
        "malformed reply re-asked": roles["policy"].reasks >= 1 and "malformed" in responder.faults,
        "non-compiling tool rejected": any("compile" in r or "syntax" in r for r in reasons),
        "hostile tool rejected": any("import of 'os'" in r or "rejected" in r for r in reasons),
        "a valid LM-written tool admitted": any(t.status in ("active", "demoted") for t in tools),
        "replay byte-identical": _rows_digest(first.rows) == _rows_digest(second.rows)
        and [t.source for t in tools] == [t.source for t in second.store.tools(status=None)],  # type: ignore
        "replay made no LM request": replay.recorded == 0 and replay.replayed == lm.recorded,
    }
    if s.embedded:
        emb = RecordReplayLM(ctx.load_lm(s.embedded), Path(ctx.work_dir) / "metis_embedded.jsonl", mode="record")
        r = run_stream(MetisConfig(mode="metis"), TaskStream(n_tasks=s.embedded_tasks, shift_at=None, seed=s.seed),
                       lm=emb, seed=s.seed, lm_max_steps=s.embedded_max_steps)
        pol = r.roles["policy"]  # type: ignore[attr-defined]
        ctx.data["embedded"] = {"model": s.embedded, "tasks": s.embedded_tasks, "accuracy": r.accuracy(),
                                "lm_calls": emb.recorded, "reasks": pol.reasks, "fallbacks": pol.fallbacks,
                                "sources": [row["source"] for row in r.rows]}
        ctx.progress("embedded run", 3, 3)
    ctx.data.update({"checks": checks, "faults": responder.faults, "rejected_reasons": reasons,
                     "lm_requests_served": served, "replayed": replay.replayed, "recorded": lm.recorded,
                     "accuracy": first.accuracy(), "fallbacks": roles["policy"].fallbacks,
                     "tools": [{"tool_id": t.tool_id, "status": t.status} for t in tools],
                     "mode": "LLM-driven (loopback stub, scripted responder)"})
    out = {"mt10_checks_passed": Estimate.exact(sum(checks.values()) / len(checks), n=len(checks)),
           "mt10_stub_accuracy": Estimate.exact(first.accuracy(), n=len(first.rows))}
    if s.embedded:
        out["mt10_embedded_accuracy"] = Estimate.exact(ctx.data["embedded"]["accuracy"], n=s.embedded_tasks)
    return out


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    plt = pyplot()
    checks = data["checks"]
    fig, ax = plt.subplots(figsize=(6, 0.35 * len(checks) + 1))
    ax.barh(range(len(checks)), [1] * len(checks), color=["tab:green" if v else "tab:red" for v in checks.values()])
    ax.set_yticks(range(len(checks)))
    ax.set_yticklabels(list(checks), fontsize=8)
    ax.set_xticks([])
    ax.invert_yaxis()
    ax.set_title(f"MT-10 LLM-driven path on the loopback stub ({data['recorded']} LM calls recorded)", fontsize=9)
    fig.tight_layout()
    p = out / "mt10_checks.png"
    save(fig, p, dpi=110)
    return [p]


EXPERIMENT = Experiment(
    id="e168.lm",
    quick_budget_s=20,
    parallel_safe=False,
    title="E168 Metis: the LLM-driven path runs offline and replays",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    scale_note="A scripted responder behind a loopback OpenAI-compatible server stands in for the LM (it replays "
               "reference steps); it tests plumbing, fault containment and record/replay, not an LM's competence. "
               "Full adds a 5-task run with the embedded SmolLM2 (reported, no threshold).",
)
