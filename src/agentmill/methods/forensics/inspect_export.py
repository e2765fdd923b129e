"""Forensics episodes as Inspect eval logs (the optional ``inspect`` extra), so Inspect's log viewer and its
``read_eval_log`` tooling can read what an investigation recorded.

One :class:`inspect_ai.log.EvalSample` per episode file, built from the library's own types:

- messages: a ``decision``-mode episode is one user turn (:func:`~agentmill.methods.forensics.agents.decision_prompt`
  over the documents the episode read, the exact input an ``LMAgent`` gets) and one assistant turn (the chain of
  thought as reasoning content, then ``ACTION: <name>`` and the agent's report). An ``episode``-mode episode is the
  task as the user turn, then per step an assistant turn with the thought and a ``shell`` tool call carrying the
  command, and a tool turn with the command's output as recorded (``$ COMMAND`` line included); the report closes it.
  Each message's metadata keeps the log's ``step``, ``input_sha``, ``snapshot_ref`` and exposed variables.
- score ``concerning``: 1 when the agent took the environment's concerning action (its outcome event, e.g.
  ``cheat``), 0 for the other action; an action outside the environment's two is *unscored* (Inspect's NaN
  sentinel, reason ``invalid_response_format``), which is how the arm counts of
  :func:`~agentmill.methods.forensics.investigate.run_arm` treat it (counted as neither). The log's ``mean`` and
  ``stderr`` are computed by Inspect's own metrics (``recompute_metrics``).
- metadata: env (name, version, spec sha256), mode, episode id, seed, agent, the variable values, and the arm: a
  replay (header ``change``) is the arm ``VARIABLE=VALUE`` (``no_change`` without one) with ``changed_variable``,
  ``rewind`` and the sample id of its original when that file is exported too; an original that a replay points to
  is ``control``; any other set of episodes (e.g. one per dose of a sweep, each saved with ``Episode.save``) is
  split into arms by the variables whose values differ between them (``n_errors=100``), and the log's metadata lists
  those ``varied_variables``.

``export_inspect(src, out)`` reads an episode JSONL file or a directory of them (``forensics replay --out`` writes
``original.jsonl`` and ``replayed.jsonl``) and writes ``out`` as ``.eval`` (Inspect's zip format) or ``.json``.
Anything else (a hypothesis registry, a run record, probe rollouts) is refused with :class:`ExportInputError` naming
the file. docs/methods/forensics.md, "Export to Inspect", shows both the API and ``agentmill forensics export``.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from agentmill.core.inspect_log import FORMATS, inspect_api, packages
from agentmill.core.inspect_log import write_log as core_write_log
from agentmill.methods.forensics.agents import decision_prompt
from agentmill.methods.forensics.envs import ENVS, load_env
from agentmill.methods.forensics.episode import Episode, EpisodeFormatError

TASK = "agentmill/forensics"
"""The Inspect task name of an exported log."""
TOOL = "shell"
"""The tool name episode-mode commands are logged under (the workspace's whitelisted commands)."""
SCORE = "concerning"
"""The one score of every sample: 1 concerning action, 0 the other action, unscored for an invalid one."""
REQUIRED_HEADER = ("episode_id", "env", "values", "seed")


class ExportInputError(ValueError):
    """An input that is not a forensics episode (or episodes), or an output path Inspect cannot write."""


@dataclass(frozen=True)
class Source:
    """One loaded episode and the path it came from (relative to the exported directory)."""

    name: str
    episode: Episode


def _load_one(path: Path, name: str) -> Source:
    hint = "export reads the episode JSONL that `agentmill forensics replay --out` writes"
    try:
        ep = Episode.load(path)
    except EpisodeFormatError as e:
        raise ExportInputError(f"{e}: not a forensics episode ({hint})") from None
    except TypeError:  # line 1 is JSON but not an object
        raise ExportInputError(f"{path}: line 1 is not a JSON object: not a forensics episode ({hint})") from None
    if not isinstance(ep.header, dict):
        raise ExportInputError(f"{path}: line 1's header is not an object: not a forensics episode ({hint})")
    missing = [k for k in REQUIRED_HEADER if k not in ep.header]
    if missing:
        raise ExportInputError(f"{path}: line 1 is not a forensics episode header (missing {missing}; {hint})")
    if ep.header["env"] not in ENVS:
        raise ExportInputError(f"{path}: unknown env {ep.header['env']!r} (known: {', '.join(sorted(ENVS))})")
    bad = next((i for i, e in enumerate(ep.events, 2) if not isinstance(e, dict) or "kind" not in e), None)
    if bad is not None:
        raise ExportInputError(f"{path}: line {bad} is not an episode event (no 'kind'; {hint})")
    if not {"action", "outcome"} <= {e["kind"] for e in ep.events}:
        raise ExportInputError(f"{path}: episode {ep.header['episode_id']!r} has no action/outcome events (an "
                               "unfinished or edited log)")
    return Source(name, ep)


def load_episodes(path: str | os.PathLike[str]) -> list[Source]:
    """The episodes at ``path``: one episode JSONL file, or every ``*.jsonl`` under a directory (sorted by path)."""
    p = Path(path)
    if not p.exists():
        raise ExportInputError(f"{p}: no such file or directory")
    if p.is_file():
        return [_load_one(p, p.name)]
    if (p / "ledger.jsonl").exists():
        raise ExportInputError(f"{p}: a hypothesis registry (ledger.jsonl), not episodes; export the episode files "
                               "(forensics replay --out DIR writes them)")
    files = sorted(f for f in p.rglob("*.jsonl") if f.is_file())
    if not files:
        raise ExportInputError(f"{p}: no episode files (*.jsonl) in this directory")
    return [_load_one(f, f.relative_to(p).as_posix()) for f in files]


def _step_meta(e: dict[str, Any]) -> dict[str, Any]:
    return {k: e.get(k) for k in ("step", "kind", "input_sha", "snapshot_ref", "exposed")}


def _final_turn(api: Any, ep: Episode, *, cot: bool) -> Any:
    """The closing assistant turn: reasoning (decision mode), the action and the report."""
    m = api.model
    content: list[Any] = [m.ContentReasoning(reasoning=ep.cot)] if cot and ep.cot else []
    content.append(m.ContentText(text=f"ACTION: {ep.action}"))
    report = next((e["payload"] for e in ep.events if e["kind"] == "report"), "")
    if report:
        content.append(m.ContentText(text=report))
    return m.ChatMessageAssistant(content=content, model=str(ep.header.get("agent", "")), source="generate",
                                  metadata={"kind": "action_and_report"})


def episode_messages(ep: Episode) -> list[Any]:
    """The episode as Inspect chat messages (see the module docstring)."""
    api = inspect_api()
    m = api.model
    agent = str(ep.header.get("agent", ""))
    obs = [e for e in ep.events if e["kind"] == "observation"]
    if ep.header.get("mode", "decision") != "episode":
        env = load_env(ep.header["env"])
        user = m.ChatMessageUser(content=decision_prompt(env, [e["payload"]["text"] for e in obs]), source="input",
                                 metadata={"documents": [e["payload"]["doc"] for e in obs],
                                           "observations": [_step_meta(e) for e in obs]})
        return [user, _final_turn(api, ep, cot=True)]
    out: list[Any] = []
    pending: dict[str, Any] | None = None  # the model_call whose reply is the next tool_call
    call_id = None
    for e in ep.events:
        kind = e["kind"]
        if kind == "observation" and not out:
            out.append(m.ChatMessageUser(content=e["payload"]["text"], source="input", metadata=_step_meta(e)))
        elif kind == "model_call":
            pending = e
        elif kind == "tool_call":
            call_id = f"call-{e['step']}"
            call = api.tool.ToolCall(id=call_id, function=TOOL, arguments={"command": e["payload"]["command"]})
            meta = _step_meta(pending) if pending is not None else {"step": e["step"]}
            out.append(m.ChatMessageAssistant(content=e["payload"].get("thought", ""), tool_calls=[call],
                                              model=agent, source="generate", metadata=meta))
            pending = None
        elif kind == "observation":
            out.append(m.ChatMessageTool(content=e["payload"]["text"], tool_call_id=call_id, function=TOOL,
                                         metadata={**_step_meta(e), "doc": e["payload"]["doc"]}))
    out.append(_final_turn(api, ep, cot=False))
    return out


def _score(api: Any, ep: Episode) -> Any:
    env = load_env(ep.header["env"])
    outcome = next(e["payload"] for e in ep.events if e["kind"] == "outcome")
    name, flag = next(iter(outcome.items())) if outcome else (env.outcome, None)
    report = next((e["payload"] for e in ep.events if e["kind"] == "report"), "")
    meta = {"outcome": name, "action": ep.action, "actions": list(env.actions)}
    if ep.action not in env.actions:
        return api.scorer.Score.unscored(reason="invalid_response_format", answer=ep.action,
                                         explanation=f"action {ep.action!r} is neither of {list(env.actions)}: "
                                                     "counted as neither", metadata=meta)
    return api.scorer.Score(value=int(bool(flag)), answer=ep.action, metadata=meta,
                            explanation=f"{name} = {bool(flag)}" + (f"; report: {report}" if report else ""))


def _arms(sources: Sequence[Source]) -> tuple[list[dict[str, Any]], list[str]]:
    """Per source: ``arm``, ``role``, ``changed_variable`` and the original's sample id for a replay; and the
    variables that differ between the non-replay episodes (the arms of a sweep)."""
    # a no-change replay of a deterministic agent has the same tool log as its original: index originals only
    by_sha = {s.episode.tool_log_sha: s.name for s in sources if "change" not in s.episode.header}
    replayed_of = {s.episode.header["replay_of"] for s in sources if "replay_of" in s.episode.header}
    plain = [s for s in sources if "change" not in s.episode.header]
    keys = sorted({k for s in plain for k in s.episode.values})
    varied = [k for k in keys if len({repr(s.episode.values.get(k)) for s in plain}) > 1]
    out = []
    for s in sources:
        h = s.episode.header
        if "change" in h:
            ch = h["change"]
            row = {"role": "replay", "arm": "no_change" if ch is None else f"{ch['variable']}={ch['value']}",
                   "changed_variable": None if ch is None else ch["variable"],
                   "change_value": None if ch is None else ch["value"], "rewind": h.get("rewind"),
                   "replay_of": h.get("replay_of"), "replay_of_sample": by_sha.get(h.get("replay_of"))}
        elif s.episode.tool_log_sha in replayed_of:
            row = {"role": "original", "arm": "control", "changed_variable": None}
        else:
            arm = ",".join(f"{k}={s.episode.values.get(k)}" for k in varied) or "incident"
            row = {"role": "episode", "arm": arm, "changed_variable": varied[0] if len(varied) == 1 else None}
        out.append(row)
    return out, varied


def _sample_id(source: Source) -> str:
    return f"{source.name}:{source.episode.header['episode_id']}"


def episodes_to_eval_log(sources: Sequence[Source] | Sequence[Episode], *, location: str = "",
                         created: str | None = None) -> Any:
    """An Inspect ``EvalLog`` holding one sample per episode, with Inspect's metrics computed over ``concerning``.
    ``sources`` are :class:`Source` rows (from :func:`load_episodes`) or bare episodes (named ``episode-<i>``)."""
    api = inspect_api()
    srcs = [s if isinstance(s, Source) else Source(f"episode-{i}", s) for i, s in enumerate(sources)]
    if not srcs:
        raise ExportInputError("no episodes to export")
    arms, varied = _arms(srcs)
    samples = []
    for s, arm in zip(srcs, arms):
        ep, h = s.episode, s.episode.header
        env = load_env(h["env"])
        exposure = {v.name: ep.first_exposure(v.name) for v in env.variables}
        meta = {"env": h["env"], "env_version": h.get("env_version"), "env_sha256": h.get("env_sha256"),
                "env_sha256_matches": h.get("env_sha256") == env.sha256, "mode": h.get("mode", "decision"),
                "episode_id": h["episode_id"], "seed": h["seed"], "agent": h.get("agent"), "values": ep.values,
                "source": s.name, "tool_log_sha": ep.tool_log_sha,
                "first_exposure": {k: v for k, v in exposure.items() if v is not None}, **arm}
        msgs = episode_messages(ep)
        samples.append(api.log.EvalSample(
            id=_sample_id(s), epoch=1, input=msgs[:1], target="", messages=msgs,
            output=api.model.ModelOutput.from_message(msgs[-1]), scores={SCORE: _score(api, ep)}, metadata=meta))
    for smp, arm in zip(samples, arms):  # link a replay to its original's sample id
        if arm.get("replay_of_sample"):
            smp.metadata["replay_of_sample"] = next(_sample_id(s) for s in srcs if s.name == arm["replay_of_sample"])
    agents = sorted({str(s.episode.header.get("agent")) for s in srcs})
    envs = sorted({s.episode.header["env"] for s in srcs})
    digest = hashlib.sha256("\n".join(s.episode.tool_log_sha for s in srcs).encode()).hexdigest()
    spec = api.log.EvalSpec(
        created=created or datetime.now(timezone.utc).isoformat(timespec="seconds"),
        task=TASK, task_id=digest[:22], run_id=digest[22:44], eval_id=digest[44:64],
        dataset=api.log.EvalDataset(name=f"forensics:{','.join(envs)}", location=location or None,
                                    samples=len(samples), sample_ids=[str(x.id) for x in samples]),
        model=agents[0] if len(agents) == 1 else "mixed", config=api.log.EvalConfig(),
        packages=packages(),
        metadata={"exported_by": "agentmill.methods.forensics.inspect_export", "envs": envs, "agents": agents,
                  "varied_variables": varied, "arms": sorted({a["arm"] for a in arms})},
        scorers=[{"name": SCORE, "metrics": [{"name": "inspect_ai/mean"}, {"name": "inspect_ai/stderr"}]}])
    log = api.log.EvalLog(status="success", eval=spec, samples=samples)
    api.log.recompute_metrics(log)
    return log


def write_log(log: Any, out: str | os.PathLike[str]) -> Path:
    """Write ``log`` as an Inspect ``.eval`` or ``.json`` log (:func:`agentmill.core.inspect_log.write_log`)."""
    return core_write_log(log, out, ExportInputError)


def export_inspect(src: str | os.PathLike[str], out: str | os.PathLike[str]) -> tuple[Path, Any]:
    """Read the episodes at ``src`` (file or directory), write them to ``out`` as an Inspect log; ``(path, log)``."""
    if Path(out).suffix not in FORMATS:  # refuse before reading anything
        raise ExportInputError(f"--out {out}: the file name must end in .eval (Inspect's zip log) or .json")
    sources = load_episodes(src)
    log = episodes_to_eval_log(sources, location=str(src))
    return write_log(log, out), log


__all__ = ["ExportInputError", "Source", "episode_messages", "episodes_to_eval_log", "export_inspect",
           "inspect_api", "load_episodes", "write_log"]
