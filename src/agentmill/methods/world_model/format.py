"""The Qwen-AgentWorld message layout, the SFT target, and the observation parser (docs/methods/world_model.md).

A world model sees: a system message (a domain prompt, then the task card), one user/assistant pair per earlier turn
in the kept window (the assistant turn is the ground-truth observation behind ``**Environment Observation:**``), and
the current user turn. A user turn is ``### Turn j``, then on the first kept turn the ``**Task Instruction:**`` and
``**Current State:**`` blocks, then ``**Action:**`` with the action as fenced JSON, then an optional
``**Simulation Instruction:**`` block. Layout from the Qwen-AgentWorld README data format and ``eval/eval.py``
(commit cd0aa83) [C]; the window rule for the first kept turn is ours [R].

The target is ``<think>\\n{reasoning}\\n</think>\\n<predicted_observation>\\n{obs}\\n</predicted_observation>`` [C].
:func:`extract_observation` follows the released ``output_parser.py`` semantics [C]: remove thinking, take the last
opening tag, fall back (official mode) to the whole cleaned text; strict mode (ours [R]) refuses the fallback.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from agentmill.core.types import Message

RENDERER_VERSION = "wm-format/1"
"""Bumped whenever the rendering changes: a checkpoint trained on one rendering refuses another."""

OBS_MARKER = "**Environment Observation:**"
OPEN_OBS, CLOSE_OBS = "<predicted_observation>", "</predicted_observation>"
OPEN_THINK, CLOSE_THINK = "<think>", "</think>"
MAX_ACTION_BYTES = 64 * 1024

SHORT_PROMPT = "Simulate the environment: reason, then write the next observation."
"""The ``short`` system prompt for tiny models [R] (well under 60 tokens)."""

PARAPHRASE_PROMPT = """You are a world model: you play the role of an environment an agent acts in.

Inputs: the interaction history, an optional task instruction, the current state, the agent's action, and an
optional simulation instruction that you must follow.

Rules: keep the observation format of the environment exactly; when an action changes nothing, return the unchanged
state; answer invalid actions the way the environment would; add no hidden metadata or commentary.

Output: first reason step by step about what the action does, then write exactly one closed
<predicted_observation> block holding the next observation and nothing else."""
"""Our paraphrase of the structure of the released domain prompts [C structure, R wording]."""


def action_json(action: str | dict[str, Any]) -> dict[str, Any]:
    """The action as ``{"name": str, "arguments": dict}``: a text-game string becomes
    ``{"name": "command", "arguments": {"text": ...}}`` [R]; a dict is checked and returned."""
    if isinstance(action, str):
        if len(action.encode()) > MAX_ACTION_BYTES:
            raise ValueError(f"action of {len(action.encode())} bytes exceeds {MAX_ACTION_BYTES}")
        return {"name": "command", "arguments": {"text": action}}
    if not isinstance(action, dict) or not isinstance(action.get("name"), str) or not isinstance(
            action.get("arguments"), dict) or set(action) - {"name", "arguments"}:
        raise ValueError(f"an action must be {{'name': str, 'arguments': dict}}, got {action!r}")
    if len(json.dumps(action).encode()) > MAX_ACTION_BYTES:
        raise ValueError(f"action JSON exceeds {MAX_ACTION_BYTES} bytes")
    return action


def action_text(action: dict[str, Any]) -> str:
    """Inverse of :func:`action_json` for text-game commands."""
    return str(action["arguments"].get("text", "")) if action.get("name") == "command" else json.dumps(action)


@dataclass(frozen=True)
class Turn:
    """One step as the format sees it: the observation before, the action, the observation after."""

    obs: str
    action: dict[str, Any]
    next_obs: str
    t: int


@dataclass(frozen=True)
class QwenFormat:
    """Renders messages and targets (one format for training, simulation, judging and benchmark export)."""

    history_k: int | None = 0
    """Earlier turns kept in the window (None = all, as the Qwen eval does)."""
    system_prompt: Literal["short", "paraphrase"] = "short"
    """Which built-in system prompt (a per-sample ``system_str`` overrides it when reading AgentWorldBench)."""
    card: bool = True
    """Append the task card to the system message."""

    def __post_init__(self) -> None:
        if self.history_k is not None and self.history_k < 0:
            raise ValueError(f"history_k must be >= 0 or None, got {self.history_k}")

    def system(self, card: str | None) -> str:
        base = SHORT_PROMPT if self.system_prompt == "short" else PARAPHRASE_PROMPT
        return base + (f"\n\n**World Card:**\n{card}" if self.card and card else "")

    def user_turn(self, j: int, action: dict[str, Any], *, goal: str | None = None, state: str | None = None,
                  control: str | None = None) -> str:
        parts = [f"### Turn {j}"]
        if state is not None:
            if goal:
                parts.append(f"**Task Instruction:**\n{goal}")
            parts.append(f"**Current State:**\n{state}")
        parts.append("**Action:**\n```json\n" + json.dumps(action_json(action), sort_keys=False) + "\n```")
        if control:
            parts.append(f"**Simulation Instruction:**\n{control}")
        return "\n\n".join(parts)

    def messages(self, history: Sequence[Turn], current: Turn, *, goal: str | None, card: str | None,
                 control: str | None = None, system_str: str | None = None) -> list[Message]:
        """Messages for predicting ``current.next_obs``; ``history`` holds the earlier turns of the episode."""
        window = list(history) if self.history_k is None else list(history)[len(history) - self.history_k:] \
            if self.history_k else []
        msgs = [Message("system", system_str if system_str is not None else self.system(card))]
        turns = window + [current]
        for i, tr in enumerate(turns):
            first = i == 0
            msgs.append(Message("user", self.user_turn(tr.t + 1, tr.action, goal=goal if first else None,
                                                       state=tr.obs if first else None,
                                                       control=control if tr is current else None)))
            if tr is not current:
                msgs.append(Message("assistant", f"{OBS_MARKER}\n{tr.next_obs}"))
        return msgs

    @staticmethod
    def target(next_obs: str, reasoning: str | None) -> str:
        think = f"{OPEN_THINK}\n{reasoning}\n{CLOSE_THINK}\n" if reasoning else ""
        return f"{think}{OPEN_OBS}\n{next_obs}\n{CLOSE_OBS}"

    def cpt_document(self, goal: str, episode: Sequence[Turn]) -> str:
        """One episode in the history layout, no system prompt and no reasoning (the continual-pretraining text)."""
        out = []
        for i, tr in enumerate(episode):
            out.append(self.user_turn(tr.t + 1, tr.action, goal=goal if i == 0 else None,
                                      state=tr.obs if i == 0 else None))
            out.append(f"{OBS_MARKER}\n{tr.next_obs}")
        return "\n\n".join(out)


def render_chatml(messages: Sequence[Message], *, generation_prompt: bool = True) -> str:
    """ChatML as text (the layout of ``lm/engine/tiny.py``), for byte-level tiny models that have no template."""
    text = "".join(f"<|im_start|>{m.role}\n{m.content}<|im_end|>\n" for m in messages)
    return text + ("<|im_start|>assistant\n" if generation_prompt else "")


# ---------------------------------------------------------------------------------------------------------------
# parsing

@dataclass(frozen=True)
class Extracted:
    """What :func:`extract_observation` found. ``observation`` is None only in strict mode (no opening tag)."""

    observation: str | None
    reasoning: str
    flags: dict[str, bool] = field(default_factory=dict)


_THINK_PAIR = re.compile(re.escape(OPEN_THINK) + r".*?" + re.escape(CLOSE_THINK), re.S)


def extract_observation(text: str, *, mode: Literal["strict", "official"] = "strict") -> Extracted:
    """The predicted observation in ``text`` (docs/methods/world_model.md, "parsing").

    1. Remove thinking: matched ``<think>…</think>`` pairs; an unmatched closing tag drops everything before it; an
       unmatched opening tag drops everything up to the next ``<predicted_observation>`` or to the end.
    2. Take the last ``<predicted_observation>``; its content runs to the next closing tag or to the end (``unclosed``).
    3. No opening tag: ``official`` returns the whole cleaned text (``fallback_used``); ``strict`` returns None
       (``tag_missing``).
    4. Strip, and drop a leading ``**Environment Observation:**`` marker.
    """
    if mode not in ("strict", "official"):
        raise ValueError(f"mode must be 'strict' or 'official', got {mode!r}")
    flags = {"tag_missing": False, "unclosed": False, "fallback_used": False, "multiple": False}
    reasoning = "\n".join(m.group(0)[len(OPEN_THINK):-len(CLOSE_THINK)].strip() for m in _THINK_PAIR.finditer(text))
    cleaned = _THINK_PAIR.sub("", text)
    if CLOSE_THINK in cleaned:
        cut = cleaned.rindex(CLOSE_THINK)
        reasoning = (reasoning + "\n" + cleaned[:cut].replace(OPEN_THINK, "").strip()).strip()
        cleaned = cleaned[cut + len(CLOSE_THINK):]
    if OPEN_THINK in cleaned:
        i = cleaned.index(OPEN_THINK)
        j = cleaned.find(OPEN_OBS, i)
        cleaned = cleaned[:i] + ("" if j < 0 else cleaned[j:])
    k = cleaned.rfind(OPEN_OBS)
    if k < 0:
        if mode == "strict":
            flags["tag_missing"] = True
            return Extracted(None, reasoning, flags)
        flags["fallback_used"] = True
        body = cleaned
    else:
        flags["multiple"] = cleaned.count(OPEN_OBS) > 1
        body = cleaned[k + len(OPEN_OBS):]
        end = body.find(CLOSE_OBS)
        if end < 0:
            flags["unclosed"] = True
        else:
            body = body[:end]
    body = body.strip()
    if body.startswith(OBS_MARKER):
        body = body[len(OBS_MARKER):].strip()
    return Extracted(body, reasoning, flags)
