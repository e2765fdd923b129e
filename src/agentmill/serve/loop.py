"""The engine's owner thread [R]: ``BatchingLoop`` runs ``SpecEngine.step()`` while any request is
live and hands each request's outputs to the callback it was submitted with. Submissions and aborts arrive from
any thread through a queue and take effect at step boundaries; no algorithm lives here.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from agentmill.core.machine import capped_threads
from agentmill.lm.engine import SamplingParams
from agentmill.methods.dspark.spec_engine import SpecEngine

log = logging.getLogger("agentmill.serve")

Event = dict[str, Any]
"""{"type": "delta", "text": str} | {"type": "done", "finish_reason": "stop"|"length", "prompt_tokens": int,
"completion_tokens": int, "seconds": float, "ttft": float} | {"type": "error", "message": str}"""


class BatchingLoop:
    """``start()`` it, ``submit()`` requests from any thread, ``stop()`` it."""

    def __init__(self, engine: SpecEngine, *, on_step: Callable[[dict[str, float]], None] | None = None):
        self.engine, self.tok = engine, engine.tok
        self.target = engine.target
        self.on_step = on_step
        self._inbox: queue.Queue[Any] = queue.Queue()
        self._emit: dict[int, Callable[[Event], None]] = {}
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.alive = False

    @property
    def stats(self) -> dict[str, float]:
        return self.engine.stats.as_dict()

    @property
    def policy(self) -> str:
        return self.engine.policy

    @property
    def context_len(self) -> int:
        """Most tokens (prompt + completion) one request may hold: the KV pool's ``max_len``, or the engine config's
        ``max_model_len`` for engines without a pool (scripted fakes)."""
        kv_max = getattr(getattr(self.target, "kv", None), "max_len", None)
        return int(kv_max if kv_max is not None else self.target.engine_config.max_model_len)

    # ------------------------------------------------------------------ API (any thread)
    def start(self) -> BatchingLoop:
        self._thread = threading.Thread(target=self._run, name="agentmill-engine", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self.alive and time.monotonic() < deadline:
            time.sleep(0.005)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self._inbox.put(None)
        if self._thread:
            self._thread.join(timeout)

    def submit(self, prompt: list[int], params: SamplingParams, emit: Callable[[Event], None]) -> int:
        """Queue a request; bad prompts raise ``ValueError`` here, in the caller's thread."""
        done = threading.Event()
        box: dict[str, Any] = {}
        self._inbox.put(("submit", prompt, params, emit, box, done))
        if not done.wait(30):
            raise RuntimeError("engine thread did not accept the request")
        if "error" in box:
            raise ValueError(box["error"])
        return box["rid"]

    def abort(self, rid: int) -> None:
        self._inbox.put(("abort", rid))

    @property
    def n_running(self) -> int:
        return self.engine.n_running

    @property
    def n_waiting(self) -> int:
        return self.engine.n_waiting + self._inbox.qsize()

    # ------------------------------------------------------------------ worker
    def _run(self) -> None:
        import torch

        torch.set_num_threads(capped_threads(self.target.engine_config.threads))  # as the engine itself does
        self.alive = True
        try:
            while not self._stop.is_set():
                self._drain(block=not self.engine.has_work())
                if self.engine.has_work():
                    t0 = time.perf_counter()
                    try:
                        outs = self.engine.step()
                    except Exception as e:  # noqa: BLE001 - fail the requests in flight, keep serving
                        log.exception("engine step failed; failing the %d request(s) in flight", len(self._emit))
                        self._fail_all(f"engine error: {type(e).__name__}: {e}")
                        continue
                    for out in outs:
                        self._deliver(out)
                    if self.on_step:
                        self.on_step({"seconds": time.perf_counter() - t0, "running": self.engine.n_running,
                                      "waiting": self.engine.n_waiting})
        finally:
            self.alive = False
            self._fail_all("server shutting down")

    def _fail_all(self, message: str) -> None:
        """Abort every live request and tell its handler why. A step that raised (a bug, or an input the server's
        validation missed) would otherwise end this thread and leave the server up but unable to answer."""
        for rid, emit in list(self._emit.items()):
            try:
                self.engine.abort(rid)
            except Exception:  # noqa: BLE001 - a broken engine must not keep the others from hearing back
                log.exception("abort of request %d failed", rid)
            emit({"type": "error", "message": message})
        self._emit.clear()

    def _drain(self, block: bool) -> None:
        try:
            item = self._inbox.get(timeout=0.5) if block else self._inbox.get_nowait()
        except queue.Empty:
            return
        while item is not None:
            if item[0] == "submit":
                _, prompt, params, emit, box, done = item
                try:
                    rid = self.engine.add_request(prompt, params)
                    self._emit[rid] = emit
                    box["rid"] = rid
                except ValueError as e:
                    box["error"] = str(e)
                done.set()
            elif item[0] == "abort":
                self.engine.abort(item[1])
                self._emit.pop(item[1], None)
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                break

    def _deliver(self, out: Any) -> None:
        emit = self._emit.get(out.rid)
        if emit is None:
            return
        if out.error is not None:
            emit({"type": "error", "message": out.error})
            self._emit.pop(out.rid, None)
            return
        if out.text:
            emit({"type": "delta", "text": out.text})
        if out.finish_reason:
            emit({"type": "done", "finish_reason": out.finish_reason, "prompt_tokens": out.prompt_tokens,
                  "completion_tokens": out.completion_tokens, "seconds": out.seconds, "ttft": out.ttft})
            self._emit.pop(out.rid, None)
