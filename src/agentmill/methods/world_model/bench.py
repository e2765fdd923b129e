"""AgentWorldBench interop: read, rebuild messages, export agentmill transitions, aggregate scores.

Facts from the official ``eval/eval.py`` (Qwen-AgentWorld, after PR #8) [C]: records are JSON lines in
``<domain>_test.jsonl`` files with ``task, id, prompt[], response[], current_prompt, system_str, turn_idx,
total_turns``; ``turn_idx`` is 1-based; inference messages are the ``system_str`` (when non-empty), then
``prompt[j]``/``response[j]`` pairs for every earlier turn, then the current prompt (``current_prompt``, else
``prompt[turn_idx-1]``); the ground truth is ``response[turn_idx-1]``. Scores: a judged row with ``failed`` ≠ 0 is
left out; per dimension the mean of the nonzero values; overall = the mean of the rows' totals; every mean is
reported normalised as (x − 1)/4·100. The benchmark data is never downloaded here: a user passes a directory.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from statistics import mean
from typing import Any

from agentmill.core.types import Message
from agentmill.methods.world_model.data import Transition
from agentmill.methods.world_model.format import OBS_MARKER, QwenFormat
from agentmill.methods.world_model.judges import DIMS

REQUIRED = ("prompt", "response", "turn_idx")


def _as_list(v: Any) -> list[str]:
    return [v] if isinstance(v, str) else list(v or [])


def check_record(rec: dict[str, Any], where: str = "record") -> None:
    missing = [k for k in REQUIRED if k not in rec]
    if missing:
        raise ValueError(f"{where}: AgentWorldBench record lacks {missing}")
    n = len(_as_list(rec["prompt"]))
    if not isinstance(rec["turn_idx"], int) or not 1 <= rec["turn_idx"] <= max(1, n):
        raise ValueError(f"{where}: turn_idx {rec['turn_idx']!r} out of range 1..{n}")


def load_bench(directory: str | Path) -> list[dict[str, Any]]:
    """Every record of every ``*_test.jsonl`` file in ``directory`` (sorted by file name), checked."""
    out = []
    files = sorted(Path(directory).glob("*_test.jsonl"))
    if not files:
        raise FileNotFoundError(f"{directory}: no *_test.jsonl files (AgentWorldBench layout)")
    for f in files:
        for n, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
            if line.strip():
                rec = json.loads(line)
                check_record(rec, f"{f.name}:{n}")
                out.append(rec)
    return out


def subtask(rec: dict[str, Any]) -> str:
    task = str(rec.get("task", "mcp"))
    return task.split("/")[-1]


def bench_messages(rec: dict[str, Any]) -> list[Message]:
    """The inference messages of one record, rebuilt as the official script does (module docstring)."""
    prompts, responses = _as_list(rec.get("prompt")), _as_list(rec.get("response"))
    k = max(int(rec.get("turn_idx", 1)) - 1, 0)
    msgs = [Message("system", rec["system_str"])] if rec.get("system_str") else []
    for j in range(min(k, len(prompts), len(responses))):
        msgs += [Message("user", prompts[j]), Message("assistant", responses[j])]
    current = rec.get("current_prompt") or (prompts[k] if k < len(prompts) else "")
    return msgs + [Message("user", current)]


def ground_truth(rec: dict[str, Any]) -> str:
    responses = _as_list(rec.get("response"))
    k = max(int(rec.get("turn_idx", 1)) - 1, 0)
    return responses[k] if k < len(responses) else ""


def export_bench(episodes: Sequence[Sequence[Transition]], fmt: QwenFormat, out_dir: str | Path, *,
                 task: str = "textgame") -> Path:
    """Write agentmill episodes as AgentWorldBench records (one per step: ``turn_idx`` = t + 1), so that any world
    model can be scored with the official script. The history is every earlier turn (the Qwen eval's window)."""
    fmt_all = QwenFormat(history_k=None, system_prompt=fmt.system_prompt, card=fmt.card)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{task}_test.jsonl"
    with open(path, "w", encoding="utf-8") as fh:
        for ep in episodes:
            turns = [r.turn() for r in ep]
            first = ep[0]
            prompts = [fmt_all.user_turn(tr.t + 1, tr.action, goal=first.goal if i == 0 else None,
                                         state=tr.obs if i == 0 else None) for i, tr in enumerate(turns)]
            responses = [f"{OBS_MARKER}\n{tr.next_obs}" for tr in turns]
            for i, r in enumerate(ep):
                fh.write(json.dumps({"task": task, "id": f"{r.episode_id}/t{r.t}", "prompt": prompts,
                                     "response": responses, "current_prompt": prompts[i],
                                     "system_str": fmt_all.system(first.card), "turn_idx": i + 1,
                                     "total_turns": len(ep)}) + "\n")
    return path


def score(judged: Sequence[dict[str, Any]], aggregation: str = "official") -> dict[str, Any]:
    """Per-subtask normalised means per dimension and total, and the overall. ``official`` drops failed rows (as the
    release does); ``strict`` keeps them with 1 on every dimension. Failures are counted either way."""
    if aggregation not in ("official", "strict"):
        raise ValueError(f"aggregation must be 'official' or 'strict', got {aggregation!r}")

    def norm(x: float) -> float:
        return (x - 1) / 4 * 100

    by: dict[str, list[dict[str, Any]]] = {}
    for j in judged:
        by.setdefault(subtask(j), []).append(j)
    out: dict[str, Any] = {"subtasks": {}}
    totals: list[float] = []
    for name in sorted(by):
        rows = by[name]
        ok = [j for j in rows if j.get("failed", 1.0) == 0.0]
        failed = len(rows) - len(ok)
        use = ok + ([{**{d: 1 for d in DIMS}, "total_score": 1.0}] * failed if aggregation == "strict" else [])
        res: dict[str, float] = {}
        for d in (*DIMS, "total_score"):
            vals = [float(j.get(d, 0)) for j in use if j.get(d, 0) != 0]
            res[d] = norm(mean(vals)) if vals else float("nan")
            if d == "total_score":
                totals += vals
        out["subtasks"][name] = {"scores": res, "valid": len(ok), "failed": failed}
    out["overall"] = norm(mean(totals)) if totals else float("nan")
    out["n"], out["n_scored"] = len(judged), len(totals)
    return out
