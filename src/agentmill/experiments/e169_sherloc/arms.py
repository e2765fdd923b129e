"""LM arms of the SHERLOC experiments: which setup value means which model, and the no-endpoint precondition.

An empty ``lm`` field means no endpoint and no recording: the run records ``precondition not met: no endpoint``
and no claim metric (never a verdict from a stand-in). ``openai:MODEL@URL`` calls an endpoint; with a
``replay`` file the same spec is answered from that recording (``lm/replay.py``) and never called; with
``replay_mode="record-missing"`` the endpoint answers what the file lacks and every reply is appended before it is
used (an interrupted recording resumes where it stopped); ``scripted:sherloc-localizer`` runs the scripted arm, whose
numbers are kept as observed only."""

from __future__ import annotations

from typing import Any

from agentmill.experiments.protocol import PRECONDITION_NOT_MET

SCRIPTED = "scripted:sherloc-localizer"
NO_ENDPOINT = (f"{PRECONDITION_NOT_MET}: no endpoint (set lm=openai:MODEL@URL, and replay=FILE for a "
               "recording)")


REPLAY_MODES = ("replay", "record-missing")


def endpoint_lm(spec: str, ctx: Any, replay: str = "", mode: str = "replay") -> Any | None:
    """The LM for ``spec``, or None (and the precondition noted in ``ctx.data``) when there is none."""
    if not spec:
        ctx.data["precondition"] = NO_ENDPOINT
        return None
    if spec == SCRIPTED:
        from agentmill.methods.sherloc import ScriptedLocalizer

        return ScriptedLocalizer()
    if mode not in REPLAY_MODES:
        raise ValueError(f"replay_mode must be one of {REPLAY_MODES}, got {mode!r}")
    if not replay:
        return ctx.load_lm(spec)
    from agentmill.lm.replay import RecordReplayLM

    inner = None if mode == "replay" else ctx.load_lm(spec)  # a replay never loads (or reaches) the model
    return RecordReplayLM(inner, replay, mode=mode, spec=spec)

