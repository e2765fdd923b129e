"""Episode logs, exposure, and single-variable counterfactual replay.

A ``decision``-mode episode is a header (episode id, env name + version + spec sha256, variable values, seed, agent
spec) and events ``{step, kind, payload, input_sha, exposed, snapshot_ref}``: one ``observation`` per document the
scripted exploration reads (its text; ``exposed`` = the variables whose slots occur in it), then the agent's
``model_call`` (the sha of the whole input), its ``cot``, ``action``, ``report`` and the ``outcome``. The *tool log*
is the events' canonical JSON; ``tool_log_sha`` hashes it.

First exposure of a variable is the first observation whose text holds one of its slots. :func:`replay` restores the
snapshot at the rewind step, keeps the events before it byte for byte, applies the one change, re-renders and lets
the agent act again with the episode's own seed. ``rewind="first_exposure"`` (default) and ``"start"`` are
on-policy; an integer rewind after the changed variable's first exposure raises :class:`OffPolicyRewindError`:
editing text the agent already reacted to is an off-policy edit. Every replay is checked twice for changing exactly
one thing: on the assignment and on the rendered text (:mod:`~agentmill.methods.forensics.variables`).
:func:`check_replay` re-checks a stored pair of logs and names the event line that broke.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentmill.core.seeding import rng_for
from agentmill.methods.forensics.envs import EnvSpec, load_env
from agentmill.methods.forensics.variables import (ConfoundedArmError, Intervention, Rendered, changed_variable,
                                                   check_span_locality)


class OffPolicyRewindError(ValueError):
    """A rewind to a step after the changed variable's first exposure (the agent already reacted to it)."""


class EpisodeFormatError(ValueError):
    """An episode file that cannot be read; the message names the file and the line."""


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _canon(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=repr)


@dataclass
class Episode:
    """One recorded episode: ``header`` and ``events`` (see the module docstring)."""

    header: dict[str, Any]
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def env(self) -> EnvSpec:
        return load_env(self.header["env"])

    @property
    def values(self) -> dict[str, Any]:
        return dict(self.header["values"])

    @property
    def action(self) -> str:
        return next(e["payload"] for e in self.events if e["kind"] == "action")

    @property
    def concerning(self) -> bool:
        return self.action == self.env.actions[0]

    @property
    def cot(self) -> str:
        return next(e["payload"] for e in self.events if e["kind"] == "cot")

    def first_exposure(self, variable: str) -> int | None:
        """The step of the first observation exposing ``variable``; None if it never appears."""
        return next((e["step"] for e in self.events if e["kind"] == "observation" and variable in e["exposed"]),
                    None)

    def tool_log(self) -> str:
        """Canonical JSON of the events: what "replay reproduces the log byte-identically" compares."""
        return "\n".join(_canon(e) for e in self.events)

    @property
    def tool_log_sha(self) -> str:
        return _sha(self.tool_log())

    def save(self, path: str | os.PathLike[str]) -> Path:
        from agentmill.core.records import write_text_atomic

        lines = [_canon({"header": self.header})] + [_canon(e) for e in self.events]
        return write_text_atomic(Path(path), "\n".join(lines) + "\n")

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Episode:
        p = Path(path)
        try:
            lines = p.read_text(encoding="utf-8").splitlines()
        except OSError as e:
            raise EpisodeFormatError(f"cannot read episode {p}: {e}") from e
        if not lines:
            raise EpisodeFormatError(f"{p}: empty episode file")
        rows = []
        for i, line in enumerate(lines, 1):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise EpisodeFormatError(f"{p}: line {i} is not JSON ({e.msg})") from e
        if "header" not in rows[0]:
            raise EpisodeFormatError(f"{p}: line 1 must be the header")
        return cls(rows[0]["header"], rows[1:])


def _values_json(values: Mapping[str, Any]) -> dict[str, Any]:
    return {k: values[k] for k in sorted(values)}


def run_episode(env: EnvSpec, values: Mapping[str, Any], agent: Any, *, seed: int, episode_id: str,
                rendered: Rendered | None = None, prefix: Sequence[dict[str, Any]] = ()) -> Episode:
    """Run one decision episode (or finish one whose first ``len(prefix)`` observation events are given)."""
    rendered = rendered or env.render(values)
    header = {"episode_id": episode_id, "env": env.name, "env_version": env.version, "env_sha256": env.sha256,
              "values": _values_json(values), "seed": seed, "agent": getattr(agent, "spec", type(agent).__name__),
              "mode": "decision"}
    events: list[dict[str, Any]] = [dict(e) for e in prefix]
    seen: list[str] = []
    for step, (doc, _) in enumerate(env.docs):
        text = rendered.docs[doc]
        seen.append(text)
        if step < len(events):
            continue
        events.append({"step": step, "kind": "observation", "payload": {"doc": doc, "text": text},
                       "input_sha": _sha(text), "exposed": rendered.exposed_in(doc),
                       "snapshot_ref": _sha("\x1e".join(seen))})
    k = len(env.docs)
    exposed = sorted({v for e in events if e["kind"] == "observation" for v in e["exposed"]})
    # one rng per (seed, episode id): a replay with the same seed draws the same numbers (coupled counterfactual)
    step_out = agent.act(seen, values, rng_for(seed, episode_id))
    events.append({"step": k, "kind": "model_call", "payload": {"agent": header["agent"]},
                   "input_sha": _sha("\n\n".join(seen)), "exposed": exposed, "snapshot_ref": _sha("\x1e".join(seen))})
    for kind, payload in (("cot", step_out.cot), ("action", step_out.action), ("report", step_out.report),
                          ("outcome", {env.outcome: step_out.action == env.actions[0]})):
        events.append({"step": k, "kind": kind, "payload": payload, "input_sha": None, "exposed": [],
                       "snapshot_ref": None})
    return Episode(header, events)



def checked_change(episode: Episode, env: EnvSpec, change: Intervention | None
                   ) -> tuple[dict[str, Any], dict[str, Any], int | None]:
    """``(base values, arm values, first exposure of the changed variable)`` for replaying ``episode`` with
    ``change`` on ``env``, after the checks every replay makes: the episode was recorded on this version of the
    environment, the new value is in the variable's domain, exactly one variable changes and only inside its spans
    (``first`` is None without a change)."""
    if episode.header.get("env_sha256") != env.sha256:
        raise ValueError(f"episode {episode.header.get('episode_id')} was recorded on another version of env "
                         f"{env.name} (spec sha {str(episode.header.get('env_sha256'))[:12]} vs {env.sha256[:12]})")
    base = episode.values
    if change is None:
        return base, dict(base), None
    if change.value not in env.variable(change.variable).domain:
        raise ValueError(f"{change.variable}={change.value!r} is not in the domain of env {env.name}")
    values = {**base, change.variable: change.value}
    var = changed_variable(base, values)
    check_span_locality(env.render(base), env.render(values), var)
    return base, values, episode.first_exposure(var)

def replay(episode: Episode, agent: Any, *, change: Intervention | None = None,
           rewind: str | int = "first_exposure", seed: int | None = None, env: EnvSpec | None = None) -> Episode:
    """Replay ``episode`` with at most one ``change``, from ``rewind`` (``"first_exposure"``, ``"start"`` or a
    step index not after the changed variable's first exposure). Without a change the result's tool log equals the
    original's byte for byte (for a deterministic agent given the same seed). Raises
    :class:`~agentmill.methods.forensics.variables.MultiVariableArmError`,
    :class:`~agentmill.methods.forensics.variables.ConfoundedArmError` or :class:`OffPolicyRewindError`. ``env``
    is for an environment built outside :data:`~agentmill.methods.forensics.envs.ENVS` (its sha256 must match)."""
    env = env if env is not None else episode.env
    base, values, first = checked_change(episode, env, change)
    if rewind == "start":
        start = 0
    elif rewind == "first_exposure":
        start = first if first is not None else len(env.docs)
    elif isinstance(rewind, int) and not isinstance(rewind, bool):
        if first is not None and rewind > first:
            raise OffPolicyRewindError(
                f"rewind to step {rewind} is after {change.variable!r} was first exposed at step {first}: the agent "
                f"already reacted to it; rewind to step <= {first} (or 'first_exposure')")
        start = rewind
    else:
        raise ValueError(f"rewind must be 'start', 'first_exposure' or a step index, got {rewind!r}")
    prefix = [e for e in episode.events if e["kind"] == "observation" and e["step"] < start]
    new = run_episode(env, values, agent, seed=episode.header["seed"] if seed is None else seed,
                      episode_id=episode.header["episode_id"], prefix=prefix)
    new.header["replay_of"] = episode.tool_log_sha
    new.header["change"] = None if change is None else {"variable": change.variable, "value": change.value}
    new.header["rewind"] = start
    return new


def check_replay(original: Episode, replayed: Episode) -> str | None:
    """Re-check a stored replay against its original: the headers differ in at most the declared variable, and every
    observation's text differs only inside that variable's slots. Returns the changed variable (None: no change);
    raises ``ConfoundedArmError`` naming the event line (1-based, the header is line 1) and the document line."""
    env = original.env
    ch = replayed.header.get("change")
    a, b = original.values, replayed.values
    undeclared = sorted(k for k in a if a[k] != b.get(k) and (ch is None or k != ch["variable"]))
    if undeclared:
        raise ConfoundedArmError(f"replay header changes {undeclared} but declares "
                                 f"{None if ch is None else ch['variable']!r}", [])
    var = None if ch is None else ch["variable"]
    ra, rb = env.render(a), env.render(b)
    obs_a = [e for e in original.events if e["kind"] == "observation"]
    obs_b = [(i, e) for i, e in enumerate(replayed.events, 2) if e["kind"] == "observation"]
    for ea, (line, eb) in zip(obs_a, obs_b):
        doc = ea["payload"]["doc"]
        ta, tb = ea["payload"]["text"], eb["payload"]["text"]
        if ta == tb:
            continue
        if var is None:
            raise ConfoundedArmError(f"event line {line} (document {doc!r}): text differs but the replay declares "
                                     f"no change", [(doc, 0, ta[:60], tb[:60])])
        ctl = Rendered({doc: ta}, {var: [s for s in ra.spans.get(var, []) if s[0] == doc]})
        arm = Rendered({doc: tb}, {var: [s for s in rb.spans.get(var, []) if s[0] == doc]})
        if tb != rb.docs[doc]:
            # the stored text is not what the env renders for the declared values: an edited log
            arm = Rendered({doc: tb}, {var: []})
        try:
            check_span_locality(ctl, arm, var)
        except ConfoundedArmError as e:
            raise ConfoundedArmError(f"event line {line}: {e}", e.diff_outside_slots) from None
    return var


__all__ = ["Episode", "EpisodeFormatError", "OffPolicyRewindError", "check_replay", "replay", "run_episode"]
