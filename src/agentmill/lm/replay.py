"""Record/replay of LM calls: run a method once against a real model, then let CI answer the same calls offline.

:class:`RecordReplayLM` wraps any :class:`~agentmill.lm.base.LM`. In ``record`` mode every call goes to the wrapped
model and is appended to a JSONL file; in ``replay`` mode the file answers and the wrapped model is never asked
(it may even be absent); ``record-missing`` answers what the file has and records the rest. A replay that meets a
request the file does not hold raises :class:`ReplayMiss` naming the request hash and the file: a silent call
through to a model would make a "replayed" CI run quietly depend on a network or a 30-second model load.

A call is keyed by the sha256 of its canonical request (:func:`request_sha256`): operation, model, prompts (chat
messages as their OpenAI dicts) and every ``GenerateConfig`` field. The model enters as :func:`model_key` of its
spec, which drops an ``openai:`` endpoint address: the address is transport (a loopback stub gets a fresh port
every run) and must not turn a recording into a miss. Every config field is hashed, so adding a field to
``GenerateConfig`` makes old recordings miss loudly rather than answer a request they never saw.

:class:`CallLog` is the file underneath, shared with callers that keep their own record schema (AutoCog's
``lm_calls.jsonl``): one JSON object per line, each appended with a single write and fsynced before the reply is
used. A crash mid-append can only leave a torn last line (JSON has no raw newline, so the terminating newline is the
commit mark); loading ignores it and the next append cuts it off first. A bad line *before* the last one is not a
crash artefact but damage, and loading refuses it unless the caller opted to skip such lines.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.lm.base import LM, Completion, GenerateConfig, Prompt, as_messages

MODES = ("record", "replay", "record-missing")
"""``record``: always ask the wrapped LM and append; ``replay``: answer from the file, a miss raises;
``record-missing``: answer from the file, ask and append on a miss."""

KEY = "request_sha256"
"""The field of a record that holds its request hash."""


class ReplayMiss(RuntimeError):
    """A replayed call that the recording does not hold.

    Deliberately not an ``LMError``: code that degrades gracefully when a model fails must not mistake a missing
    recording for a flaky endpoint and carry on."""


class CallLogError(RuntimeError):
    """A call log that is damaged (a bad line before the last one) or unusable; the message names file and line."""


def canonical_json(obj: Any) -> str:
    """The one JSON text hashed for a request: sorted keys, ASCII escapes, the standard separators. A list of
    strings and numbers serialises exactly as plain ``json.dumps`` does, which keeps AutoCog's request hashes."""
    return json.dumps(obj, sort_keys=True, ensure_ascii=True)


def request_sha256(request: Any) -> str:
    """Hex sha256 of ``canonical_json(request)``."""
    return hashlib.sha256(canonical_json(request).encode()).hexdigest()


def model_key(spec: str) -> str:
    """The model part of a spec without an endpoint address (``openai:m@http://127.0.0.1:PORT/v1`` -> ``openai:m``);
    other specs are returned unchanged."""
    spec = str(spec)
    return spec.rsplit("@", 1)[0] if spec.startswith("openai:") and "@" in spec else spec


def canonical_prompt(prompt: Prompt) -> str | list[dict[str, Any]]:
    """A prompt as hashable JSON: text as is, a conversation as its OpenAI message dicts (``Message.meta`` is
    harness bookkeeping the model never sees, so it is left out)."""
    return prompt if isinstance(prompt, str) else [m.to_dict() for m in as_messages(prompt)]


def generate_request(spec: str, prompts: Sequence[Prompt], config: GenerateConfig) -> dict[str, Any]:
    """The canonical request of ``generate(prompts, config)`` on the model ``spec``."""
    cfg = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(config).items()}
    return {"op": "generate", "model": model_key(spec), "prompts": [canonical_prompt(p) for p in prompts],
            "config": cfg}


def logprobs_request(spec: str, prompt: Prompt, continuation: str) -> dict[str, Any]:
    """The canonical request of ``logprobs(prompt, continuation)`` on the model ``spec``."""
    return {"op": "logprobs", "model": model_key(spec), "prompt": canonical_prompt(prompt),
            "continuation": continuation}


class CallLog:
    """An append-only JSONL file of call records, indexed by the ``key`` field of each record.

    ``skip_bad_lines=True`` ignores damaged lines anywhere (AutoCog's historical tolerance) instead of raising
    :class:`CallLogError`. Appends from threads of one process are serialised by a lock."""

    def __init__(self, path: str | os.PathLike[str], *, key: str = KEY, skip_bad_lines: bool = False) -> None:
        self.path, self.key, self.skip_bad_lines = Path(path), key, skip_bad_lines
        self._lock = threading.Lock()

    def load(self) -> dict[str, list[dict[str, Any]]]:
        """Records by key, each key's records in file order; {} when the file does not exist."""
        out: dict[str, list[dict[str, Any]]] = {}
        if not self.path.exists():
            return out
        *lines, tail = self.path.read_bytes().split(b"\n")
        for i, line in enumerate(lines + [tail], 1):
            if not line.strip():
                continue
            rec = _parse(line)
            if rec is None or not isinstance(rec.get(self.key), str):
                if i == len(lines) + 1 or self.skip_bad_lines:
                    continue  # the torn last line of a crashed append: that call was never used
                why = "is not a JSON object" if rec is None else f"has no {self.key!r} field"
                raise CallLogError(f"{self.path}: line {i} {why}; the log is damaged (only the last line can be "
                                   "torn by a crash). Remove the line, or re-record the file")
            out.setdefault(rec[self.key], []).append(rec)
        return out

    def append(self, record: dict[str, Any]) -> None:
        """Append ``record`` as one line and fsync it; a torn last line left by a crash is cut off first."""
        if not isinstance(record.get(self.key), str):
            raise ValueError(f"a call record needs a string {self.key!r} field")
        try:
            line = (json.dumps(record, sort_keys=True) + "\n").encode()
        except (TypeError, ValueError) as e:
            raise TypeError(f"call record for {record[self.key][:12]} is not JSON-serialisable: {e}") from e
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "ab+") as f:
                _repair_tail(f)
                f.write(line)
                f.flush()
                os.fsync(f.fileno())


def _parse(line: bytes) -> dict[str, Any] | None:
    try:
        rec = json.loads(line)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return rec if isinstance(rec, dict) else None


def _repair_tail(f: Any) -> None:
    """Make the open file end at a line boundary: a complete record missing its newline gets one, a torn write is
    truncated away (so the next record does not fuse with it into one unreadable line)."""
    size = f.seek(0, os.SEEK_END)
    if size == 0:
        return
    f.seek(size - 1)
    if f.read(1) == b"\n":
        return
    start = size
    while start > 0:  # find the last newline, reading backwards in blocks
        block = min(1 << 16, start)
        f.seek(start - block)
        j = f.read(block).rfind(b"\n")
        if j >= 0:
            start = start - block + j + 1
            break
        start -= block
    f.seek(start)
    if _parse(f.read()) is not None:
        f.write(b"\n")
    else:
        f.truncate(start)


def completion_to_json(c: Completion) -> dict[str, Any]:
    return {"text": c.text, "finish_reason": c.finish_reason, "token_ids": [int(t) for t in c.token_ids],
            "logprobs": [float(x) for x in c.logprobs], "prompt_tokens": int(c.prompt_tokens), "meta": c.meta}


def completion_from_json(d: dict[str, Any]) -> Completion:
    return Completion(text=d["text"], finish_reason=d["finish_reason"], token_ids=tuple(d["token_ids"]),
                      logprobs=tuple(d["logprobs"]), prompt_tokens=d["prompt_tokens"], meta=dict(d["meta"]))


class RecordReplayLM:
    """``RecordReplayLM(inner, path, mode)``: an ``LM`` whose calls are recorded to, or answered from, ``path``.

    ``inner`` may be None in ``replay`` mode when ``spec`` names the recorded model (CI need not load it). A
    request recorded several times (sampling without a seed) is answered with its recordings in order, the last
    one repeated once they run out. Only the black-box ``LM`` protocol is wrapped: a white box's internals are not
    recordable, so ``require_white_box`` rejects this wrapper on purpose. ``replayed``/``recorded`` count calls."""

    def __init__(self, inner: LM | None, path: str | os.PathLike[str], mode: str = "replay", *,
                 spec: str | None = None) -> None:
        if mode not in MODES:
            raise ValueError(f"RecordReplayLM mode must be one of {MODES}, got {mode!r}")
        if inner is None and mode != "replay":
            raise ValueError(f"mode {mode!r} calls the wrapped LM, so it needs one (inner=None only for 'replay')")
        spec = spec if spec is not None else getattr(inner, "spec", None)
        if not spec:
            raise ValueError("RecordReplayLM needs the model's spec: pass spec=... or an inner LM with .spec")
        self.inner, self.mode, self.spec = inner, mode, str(spec)
        self.log = CallLog(path)
        if mode == "replay" and not self.log.path.exists():
            raise FileNotFoundError(f"replay file {self.log.path} does not exist; record it first with "
                                    "mode='record' (or use mode='record-missing')")
        self._records = {} if mode == "record" else self.log.load()
        self._served: dict[str, int] = {}
        self._lock = threading.Lock()
        self.replayed = 0
        self.recorded = 0

    @property
    def path(self) -> Path:
        return self.log.path

    def generate(self, prompts: Sequence[Prompt], config: GenerateConfig = GenerateConfig()) -> list[Completion]:
        prompts = list(prompts)
        rec = self._answer(generate_request(self.spec, prompts, config),
                           lambda: {"completions": [completion_to_json(c)
                                                    for c in self.inner.generate(prompts, config)]})
        return [completion_from_json(d) for d in rec["completions"]]

    def logprobs(self, prompt: Prompt, continuation: str) -> np.ndarray:
        rec = self._answer(logprobs_request(self.spec, prompt, continuation),
                           lambda: {"logprobs": [float(x) for x in self.inner.logprobs(prompt, continuation)]})
        return np.asarray(rec["logprobs"], dtype=np.float64)

    def _answer(self, request: dict[str, Any], call: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        key = request_sha256(request)
        if self.mode != "record":
            with self._lock:
                recs = self._records.get(key)
                if recs:
                    i = self._served.get(key, 0)
                    self._served[key] = i + 1
                    self.replayed += 1
                    return recs[min(i, len(recs) - 1)]
            if self.mode == "replay":
                raise ReplayMiss(self._miss_message(key, request))
        rec = {KEY: key, "op": request["op"], "request": request, **call()}
        self.log.append(rec)
        with self._lock:
            if self.mode == "record-missing":
                recs = self._records.setdefault(key, [])
                recs.append(rec)
                self._served[key] = len(recs)
            self.recorded += 1
        return rec

    def _miss_message(self, key: str, request: dict[str, Any]) -> str:
        first = request.get("prompts", [request.get("prompt")])[:1]
        shown = json.dumps(first[0] if first else None)[:120]
        n = sum(len(v) for v in self._records.values())
        return (f"replay miss: request {key} ({request['op']} on {request['model']}, prompt {shown}) is not among "
                f"the {n} recorded call(s) in {self.log.path}; re-record with mode='record' or "
                "mode='record-missing'")

    def __repr__(self) -> str:
        return f"RecordReplayLM({self.spec!r}, {str(self.log.path)!r}, mode={self.mode!r})"
