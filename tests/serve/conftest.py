"""A scripted engine for the server's hostile-input and fuzz tests: the ``SpecEngine`` surface ``BatchingLoop`` uses,
with no model, so a request costs microseconds and every timing in a test is the server's own.

It validates what the real engine validates in ``add_request`` (empty prompt, prompt over the context) and seeds
torch generators the way the real engine and the DSpark drafter do, so a value the server forgot to check fails
here the way it would fail in production (as an engine error, i.e. a 503), not silently.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from agentmill.lm.engine import EngineConfig
from agentmill.lm.engine.tiny import ByteTokenizer
from agentmill.methods.dspark.spec_engine import RequestOutput, SpecStats
from agentmill.serve import BatchingLoop, create_app
from tests.helpers.openai_app import serve


class SlowTokenizer(ByteTokenizer):
    """``ByteTokenizer`` whose ``encode`` of a text longer than ``threshold`` takes ``seconds`` (sleeping, so it
    releases the GIL as SmolLM2's Rust tokenizer does); counts the calls and characters it was given."""

    def __init__(self, threshold: int = 10_000, seconds: float = 1.0):
        self.threshold, self.seconds = threshold, seconds
        self.calls: list[int] = []

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        self.calls.append(len(text))
        if len(text) > self.threshold:
            time.sleep(self.seconds)
        return super().encode(text, add_special_tokens)


class ScriptedEngine:
    """Answers every prompt with ``reply`` (a string or ``f(prompt_text)``) in ``piece``-character deltas, one per
    step, each step taking ``step_delay`` seconds; ``fail_steps`` makes the next N steps raise. Records prompts,
    sampling params and aborted request ids."""

    def __init__(self, reply: str | Callable[[str], str] = "REPLY ok", *, piece: int = 3, step_delay: float = 0.0,
                 tokenizer: Any = None, max_model_len: int = 512, fail_steps: int = 0):
        self.reply, self.piece, self.step_delay, self.fail_steps = reply, piece, step_delay, fail_steps
        self.tok = tokenizer or ByteTokenizer()
        self.policy, self.stats = "scripted", SpecStats()
        self.target = SimpleNamespace(engine_config=EngineConfig(threads=1, max_model_len=max_model_len),
                                      vocab_size=ByteTokenizer.vocab_size, kv={})
        self.prompts: list[str] = []
        self.params: list[Any] = []
        self.aborted: list[int] = []
        self._live: dict[int, list] = {}
        self._next = 0
        self._lock = threading.Lock()

    def add_request(self, prompt_ids, params) -> int:
        prompt = [int(t) for t in prompt_ids]
        if not prompt:
            raise ValueError("empty prompt")
        if len(prompt) >= self.target.engine_config.max_model_len:
            raise ValueError(f"prompt has {len(prompt)} tokens; the model's limit is "
                             f"{self.target.engine_config.max_model_len}")
        self._next += 1
        text = self.tok.decode(prompt)
        self.prompts.append(text)
        self.params.append(params)
        reply = self.reply(text) if callable(self.reply) else self.reply
        self._live[self._next] = [reply, 0, len(prompt), params]
        return self._next

    def abort(self, rid: int) -> None:
        if self._live.pop(rid, None) is not None:
            self.aborted.append(rid)

    def has_work(self) -> bool:
        return bool(self._live)

    @property
    def n_running(self) -> int:
        return len(self._live)

    n_waiting = 0

    def step(self) -> list[RequestOutput]:
        import torch

        if self.step_delay:
            time.sleep(self.step_delay)
        if self.fail_steps:
            self.fail_steps -= 1
            raise RuntimeError("scripted engine failure")
        outs = []
        for rid, st in list(self._live.items()):
            reply, pos, n_prompt, params = st
            if pos == 0 and params.seed is not None:     # as SpecEngine.step and DSparkProposer.start seed them
                torch.Generator().manual_seed(params.seed)
                torch.Generator().manual_seed(params.seed * 7919 + 104729)
            piece, st[1] = reply[pos:pos + self.piece], pos + self.piece
            n_out = (pos + self.piece) // self.piece
            done = st[1] >= len(reply) or n_out >= params.max_tokens
            outs.append(RequestOutput(rid, text=piece, finish_reason=("stop" if st[1] >= len(reply) else "length")
                                      if done else None, prompt_tokens=n_prompt, completion_tokens=n_out))
            if done:
                del self._live[rid]
        return outs


@contextlib.contextmanager
def scripted_server(engine: ScriptedEngine | None = None, **app_kw: Any) -> Iterator[tuple[str, ScriptedEngine,
                                                                                           BatchingLoop]]:
    """uvicorn on 127.0.0.1 serving ``create_app(**app_kw)`` over ``engine`` (model name ``scripted``); yields
    (base URL ending in ``/v1``, engine, loop)."""
    engine = engine or ScriptedEngine()
    loop = BatchingLoop(engine).start()
    try:
        with serve(create_app(loop, served_model_name="scripted", **app_kw)) as url:
            yield url, engine, loop
    finally:
        loop.stop()


@pytest.fixture(scope="session")
def scripted():
    """The ``scripted_server`` context manager, and the classes to build its engine with."""
    return SimpleNamespace(server=scripted_server, Engine=ScriptedEngine, SlowTokenizer=SlowTokenizer)
