"""E167 M-1: agentmill parses and rebuilds exactly as the official AgentWorldBench pipeline.

Parser: 40 hand cases and seeded fuzzed strings (tags, think blocks, markers and filler in random order) are parsed by
``extract_observation`` and by an independent character-scanning reference written here from the documented rules;
in ``official`` mode they must agree on every string, and ``strict`` may differ from ``official`` only where the
opening tag is missing. Messages: KeyDoor episodes exported as AgentWorldBench records and rebuilt by the
``eval.py`` rule must equal the messages ``QwenFormat`` renders for the same step (all history kept), and a
project-written MCP-style record must rebuild to its hand-written expected list.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.stats import Estimate
from agentmill.experiments.e167_world_model import PAPER
from agentmill.experiments.plotting import pyplot, save
from agentmill.experiments.protocol import Claim, Experiment, RunContext

OPEN, CLOSE, TO, TC = "<predicted_observation>", "</predicted_observation>", "<think>", "</think>"
MARK = "**Environment Observation:**"


@dataclass(frozen=True)
class Setup:
    n_fuzz: int = 2000
    """Fuzzed strings (2,000 in every judged profile)."""
    n_layouts: int = 4
    """KeyDoor layouts exported for the message-equality check."""
    seed: int = 0


SETUPS = {"smoke": Setup(n_fuzz=200, n_layouts=1), "quick": Setup(), "full": Setup()}

CLAIMS = (
    Claim("E167-M1-parser", "agentmill's observation parser agrees with the documented official parsing rules on "
          "every hand and fuzzed case (official mode), and strict mode departs from it only on tag-missing inputs.",
          "[C] output_parser.py semantics; [R] fuzz battery", "— (the paper reports no parser test)",
          "m1_parser_agreement", ">=", 1.0, judge_on="exact",
          exact_why="a share of agreements over a fixed seeded battery of deterministic parses: one disagreement "
                    "refutes exactness"),
    Claim("E167-M1-messages", "Messages rebuilt from AgentWorldBench records equal agentmill's own rendering, and the "
          "hand-written fixture rebuilds to its expected list.", "[C] eval.py run_inference (after PR #8)",
          "— (history-drop bug fixed upstream in PR #8)", "m1_message_equality", ">=", 1.0, judge_on="exact",
          exact_why="a share of equal message lists over a fixed set of records"),
)


def reference_extract(text: str, official: bool) -> str | None:
    """An independent reading of the rules: scan once for tags, track think depth by position."""
    # 1. think removal, by repeated leftmost matched pairs
    while True:
        i = text.find(TO)
        j = text.find(TC, i + len(TO)) if i >= 0 else -1
        if i >= 0 and j >= 0:
            text = text[:i] + text[j + len(TC):]
            continue
        break
    if TC in text:
        text = text[text.rfind(TC) + len(TC):]
    if TO in text:
        i = text.find(TO)
        k = text.find(OPEN, i)
        text = text[:i] if k < 0 else text[:i] + text[k:]
    # 2. last opening tag
    pieces = text.split(OPEN)
    if len(pieces) == 1:
        body = text if official else None
    else:
        body = pieces[-1].split(CLOSE)[0]
    if body is None:
        return None
    body = body.strip()
    return body[len(MARK):].strip() if body.startswith(MARK) else body


HAND = [
    "<think>x</think><predicted_observation>A</predicted_observation>", "<predicted_observation>A",
    "plain text", "", "<think>unclosed <predicted_observation>B</predicted_observation>",
    "junk</think><predicted_observation>C</predicted_observation>",
    "<predicted_observation>1</predicted_observation><predicted_observation>2</predicted_observation>",
    f"<predicted_observation>{MARK}\nD</predicted_observation>", f"{MARK}\nE", "<think>a</think>",
    "<think>a</think>tail", "<think><think>n</think></think><predicted_observation>F</predicted_observation>",
    "<predicted_observation></predicted_observation>", "<predicted_observation>  \n </predicted_observation>",
    "</think></think><predicted_observation>G", "<think>", "</think>", "<predicted_observation>",
    "</predicted_observation>", "a<predicted_observation>b</predicted_observation>c",
    "<think>x<predicted_observation>y</predicted_observation></think>z",
    "<think>x</think><think>y</think><predicted_observation>H</predicted_observation>",
    "<predicted_observation>I</predicted_observation><think>late</think>",
    "<predicted_observation>J</predicted_observation></think>", "<think>p</think>\n\n<predicted_observation>\nK\n",
    "<predicted_observation>L</predicted_observation>trailing", "<PREDICTED_OBSERVATION>M</PREDICTED_OBSERVATION>",
    "<predicted_observation>N</predicted_observation>\n<predicted_observation>O",
    f"<think>r</think>{MARK} P", "<think>r\n</think>\n<predicted_observation>\nQ\nR\n</predicted_observation>",
    "```<predicted_observation>S</predicted_observation>```", "<think></think>", "<think>a</think>b</think>c",
    "x<think>y", "<predicted_observation>T</predicted_observation></predicted_observation>",
    "<predicted_observation><think>u</think>U</predicted_observation>", "\u00e9<predicted_observation>\u00fc",
    f"<predicted_observation>{MARK}{MARK}V</predicted_observation>", "<think>w</think>" * 3 + "W",
    "<predicted_observation>X</predicted_observation><think>open",
]

_PARTS = (OPEN, CLOSE, TO, TC, MARK, "a", "obs line\n", " ", "\n", "You see a key.", "{}", "<", ">", "/")


def fuzz(n: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    return ["".join(_PARTS[int(i)] for i in rng.integers(0, len(_PARTS), int(rng.integers(0, 12)))) for _ in range(n)]


def parser_checks(n_fuzz: int, seed: int) -> dict[str, Any]:
    from agentmill.methods.world_model.format import extract_observation

    cases = HAND + fuzz(n_fuzz, seed)
    agree = 0
    bad: list[str] = []
    for s in cases:
        oe = extract_observation(s, mode="official")
        off, ref = oe.observation, reference_extract(s, True)
        st = extract_observation(s, mode="strict")
        # strict departs from official exactly where official had to fall back (no opening tag)
        same = st.observation == off and not oe.flags["fallback_used"]
        refused = st.observation is None and st.flags["tag_missing"] and oe.flags["fallback_used"]
        ok = off == ref and (same or refused) and (reference_extract(s, False) is None) == refused
        agree += ok
        if not ok and len(bad) < 5:
            bad.append(s)
    return {"n": len(cases), "agree": agree, "n_hand": len(HAND), "examples_disagreeing": bad}


def message_checks(n_layouts: int, seed: int) -> dict[str, Any]:
    from agentmill.core.types import Message
    from agentmill.methods.world_model.bench import bench_messages, export_bench, load_bench
    from agentmill.methods.world_model.data import assign_splits, collect_keydoor
    from agentmill.methods.world_model.format import QwenFormat

    table = collect_keydoor(assign_splits(0, 0, 0, n_layouts, seed + 1), 2, seed=seed)
    eps = table.episodes()
    fmt = QwenFormat(history_k=None, system_prompt="short", card=True)
    equal = total = 0
    with tempfile.TemporaryDirectory() as d:
        export_bench(eps, fmt, d)
        recs = {r["id"]: r for r in load_bench(d)}
    for ep in eps:
        for x in ep:
            got = bench_messages(recs[f"{x.episode_id}/t{x.t}"])
            want = fmt.messages([r.turn() for r in ep if r.t < x.t], x.turn(), goal=x.goal, card=x.card)
            want = [Message(m.role, m.content) for m in want]
            equal += got == want
            total += 1
    fixture = {"task": "mcp", "id": "fx-1", "system_str": "SYS {tool_definitions}", "turn_idx": 2, "total_turns": 3,
               "prompt": ["P1", "P2", "P3"], "response": ["R1", "R2", "R3"], "current_prompt": ""}
    expect = [Message("system", "SYS {tool_definitions}"), Message("user", "P1"), Message("assistant", "R1"),
              Message("user", "P2")]
    equal += bench_messages(fixture) == expect
    total += 1
    return {"n": total, "equal": equal}


def measure(s: Setup, ctx: RunContext) -> dict[str, Estimate]:
    p = parser_checks(s.n_fuzz, s.seed)
    ctx.progress("M-1 parser", 1, 2)
    m = message_checks(s.n_layouts, s.seed)
    ctx.progress("M-1 messages", 2, 2)
    ctx.data.update({"parser": p, "messages": m})
    return {"m1_parser_agreement": Estimate.exact(p["agree"] / p["n"], n=p["n"]),
            "m1_message_equality": Estimate.exact(m["equal"] / m["n"], n=m["n"])}


def plots(data: dict[str, Any], out: Path) -> list[Path]:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 2.4))
    vals = [data["parser"]["agree"] / data["parser"]["n"], data["messages"]["equal"] / data["messages"]["n"]]
    ax.barh(["parser agreement", "message equality"], vals, color=["tab:green" if v == 1 else "tab:red" for v in vals])
    ax.set_xlim(0, 1.05)
    ax.set_title("M-1 conformance with the official pipeline")
    fig.tight_layout()
    p = out / "m1_conformance.png"
    save(fig, p)
    return [p]


EXPERIMENT = Experiment(
    id="e167.wm_format_conformance",
    quick_budget_s=3,
    parallel_safe=True,
    title="E167 M-1: the world-model format parses and rebuilds messages as the official AgentWorldBench pipeline",
    paper=PAPER,
    claims=CLAIMS,
    setups=SETUPS,
    measure=measure,
    plots=plots,
    scale_note="LLM-free conformance battery: 40 hand cases + 2,000 seeded fuzzed strings against an independent "
               "reference parser; KeyDoor episodes exported as AgentWorldBench records; one hand-written MCP-style "
               "record. Checks the plumbing that makes agentmill's scores comparable, not a paper number.",
)
