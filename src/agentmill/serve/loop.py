"""Continuous batching: one worker thread owns the engine and steps every live request together (dspark spec §2.9,
§6.4).

Each step admits waiting requests first-come-first-served (up to ``max_num_seqs`` and ``max_step_tokens`` of
prefill), runs one ragged forward over the new prompts' tokens and every decoding request's last token, samples,
applies stop conditions and emits text deltas. Requests join and leave at step boundaries, so a long generation
never blocks a short one. Callers (the asyncio server) submit from any thread and receive events through a
callback; ``abort`` frees a request's KV at the next step boundary.

This loop decodes autoregressively (policy ``off``), the baseline every speculative policy is compared with.
"""

from __future__ import annotations

import itertools
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from agentmill.lm.engine import KVBudgetError, LlamaEngine, RaggedBatch, SamplingParams

Event = dict[str, Any]
"""{"type": "delta", "text": str} | {"type": "done", "finish_reason": "stop"|"length", "prompt_tokens": int,
"completion_tokens": int} | {"type": "error", "message": str}"""


@dataclass
class _Req:
    rid: int
    prompt: list[int]
    params: SamplingParams
    emit: Callable[[Event], None]
    seq: int | None = None
    out: list[int] = field(default_factory=list)
    sent: int = 0                      # characters of the decoded text already emitted
    generator: Any = None
    t_submit: float = 0.0
    t_first: float | None = None


class IncrementalText:
    """Decoded text of a growing token list, emitting only what can no longer change: text ending in U+FFFD (a
    partial UTF-8 sequence) and any tail that could still begin a stop string are held back."""

    @staticmethod
    def safe_prefix(text: str, stops: tuple[str, ...]) -> int:
        end = len(text)
        while end and text[end - 1] == "\ufffd":
            end -= 1
        hold = 0
        for s in stops:
            for k in range(min(len(s) - 1, end), 0, -1):
                if text[end - k: end] == s[:k]:
                    hold = max(hold, k)
                    break
        return end - hold


class BatchingLoop:
    """The engine's owner thread. ``start()`` it, ``submit()`` requests, ``stop()`` it."""

    def __init__(self, engine: LlamaEngine, *, max_num_seqs: int = 16, max_step_tokens: int = 512,
                 on_step: Callable[[dict[str, float]], None] | None = None):
        if max_num_seqs < 1 or max_step_tokens < 1:
            raise ValueError("max_num_seqs and max_step_tokens must be positive")
        self.engine, self.tok = engine, engine.tokenizer
        self.max_num_seqs, self.max_step_tokens = max_num_seqs, max_step_tokens
        self.on_step = on_step
        self._inbox: queue.Queue[Any] = queue.Queue()
        self._waiting: deque[_Req] = deque()
        self._running: list[_Req] = []
        self._aborted: set[int] = set()
        self._ids = itertools.count()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.alive = False
        self.stats = {"steps": 0, "prompt_tokens": 0, "generation_tokens": 0}

    # ------------------------------------------------------------------ API (any thread)
    def start(self) -> BatchingLoop:
        self._thread = threading.Thread(target=self._run, name="agentmill-engine", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._inbox.put(None)
        if self._thread:
            self._thread.join(timeout)

    def submit(self, prompt: list[int], params: SamplingParams, emit: Callable[[Event], None]) -> int:
        if not prompt:
            raise ValueError("empty prompt")
        limit = self.engine.kv.max_len
        if len(prompt) >= limit:
            raise ValueError(f"prompt has {len(prompt)} tokens; the model's limit is {limit}")
        rid = next(self._ids)
        self._inbox.put(_Req(rid, list(prompt), params, emit, t_submit=time.perf_counter()))
        return rid

    def abort(self, rid: int) -> None:
        self._inbox.put(("abort", rid))

    @property
    def n_running(self) -> int:
        return len(self._running)

    @property
    def n_waiting(self) -> int:
        return len(self._waiting) + self._inbox.qsize()

    # ------------------------------------------------------------------ worker
    def _run(self) -> None:
        import torch

        torch.set_num_threads(self.engine.engine_config.threads)
        self.alive = True
        try:
            while not self._stop.is_set():
                self._drain(block=not (self._running or self._waiting))
                if self._running or self._waiting:
                    self._step()
        finally:
            self.alive = False
            for r in list(self._running) + list(self._waiting):
                self._finish(r, None, error="server shutting down")

    def _drain(self, block: bool) -> None:
        try:
            item = self._inbox.get(timeout=0.5) if block else self._inbox.get_nowait()
        except queue.Empty:
            return
        while True:
            if isinstance(item, _Req):
                self._waiting.append(item)
            elif isinstance(item, tuple) and item[0] == "abort":
                self._aborted.add(item[1])
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                break
        for r in [r for r in self._waiting if r.rid in self._aborted]:
            self._waiting.remove(r)
            self._aborted.discard(r.rid)
        for r in [r for r in self._running if r.rid in self._aborted]:
            self._finish(r, None, error=None)
            self._aborted.discard(r.rid)

    def _step(self) -> None:
        import torch

        t0 = time.perf_counter()
        batch, members = RaggedBatch(), []
        for r in self._running:
            batch.add(r.seq, [r.out[-1]], "last")
            members.append(r)
        budget = self.max_step_tokens
        while self._waiting and len(members) < self.max_num_seqs and (len(self._waiting[0].prompt) <= budget
                                                                      or not batch.items):
            r = self._waiting.popleft()
            try:
                r.seq = self.engine.new_sequence()
                # reserve the whole generation now: admission control instead of running out mid-stream
                self.engine.kv.reserve(r.seq, min(len(r.prompt) + r.params.max_tokens, self.engine.kv.max_len))
            except (KVBudgetError, ValueError) as e:
                if r.seq is not None:
                    self.engine.free(r.seq)
                if isinstance(e, KVBudgetError) and self._running:
                    self._waiting.appendleft(r)     # wait for memory to free up
                    r.seq = None
                    break
                r.seq = None
                self._finish(r, None, error=str(e))
                continue
            if r.params.seed is not None:
                r.generator = torch.Generator().manual_seed(r.params.seed)
            batch.add(r.seq, r.prompt, "last")
            members.append(r)
            self._running.append(r)
            budget -= len(r.prompt)
            self.stats["prompt_tokens"] += len(r.prompt)
        if not batch.items:
            return
        try:
            fo = self.engine.forward(batch)
        except Exception as e:  # noqa: BLE001 - a failed forward must fail its requests, never the server
            for r in members:
                self._finish(r, None, error=f"engine error: {e}")
            return
        from agentmill.lm.engine.sampling import warp

        eos = set(self.engine.eos_token_ids)
        for k, r in enumerate(members):
            p = r.params
            probs = warp(fo.logits[k: k + 1], p.temperature, p.top_k, p.top_p)
            tok = int(probs.argmax()) if p.temperature == 0 else int(torch.multinomial(probs[0], 1,
                                                                                         generator=r.generator))
            if r.t_first is None:
                r.t_first = time.perf_counter()
            if tok in p.stop_token_ids or (tok in eos and not p.ignore_eos):
                self._emit_text(r, self.tok.decode(r.out), final=True)
                self._finish(r, "stop")
                continue
            r.out.append(tok)
            self.stats["generation_tokens"] += 1
            text = self.tok.decode(r.out)
            hit = min((i for i in (text.find(s) for s in p.stop) if i >= 0), default=-1)
            if hit >= 0:
                self._emit_text(r, text[:hit], final=True)
                self._finish(r, "stop")
            elif len(r.out) >= p.max_tokens or self.engine.seq_len(r.seq) + 1 >= self.engine.kv.max_len:
                self._emit_text(r, text, final=True)
                self._finish(r, "length")
            else:
                self._emit_text(r, text, final=False, stops=p.stop)
        self.stats["steps"] += 1
        if self.on_step:
            self.on_step({"seconds": time.perf_counter() - t0, "running": len(self._running),
                          "waiting": len(self._waiting)})

    def _emit_text(self, r: _Req, text: str, *, final: bool, stops: tuple[str, ...] = ()) -> None:
        end = len(text) if final else IncrementalText.safe_prefix(text, stops)
        if end > r.sent:
            r.emit({"type": "delta", "text": text[r.sent: end]})
            r.sent = end

    def _finish(self, r: _Req, reason: str | None, error: str | None = None) -> None:
        if r in self._running:
            self._running.remove(r)
        if r.seq is not None:
            self.engine.free(r.seq)
            r.seq = None
        if error is not None:
            r.emit({"type": "error", "message": error})
        elif reason is not None:
            r.emit({"type": "done", "finish_reason": reason, "prompt_tokens": len(r.prompt),
                    "completion_tokens": len(r.out), "seconds": time.perf_counter() - r.t_submit,
                    "ttft": (r.t_first or time.perf_counter()) - r.t_submit})
