"""``SpecEngine``: the one continuous-batching decode loop (dspark spec §2.9, §6.3). Plain autoregressive decoding
is this loop with no proposer (or verify length 0), so the baseline and the speculative arms share every line.

One ``step()``:
1. admit waiting requests first-come-first-served within ``max_num_seqs`` and ``max_step_tokens`` of prefill;
2. draft for every decoding request and pick its verify length ℓ;
3. one ragged target forward over each decoding request's ``[anchor, x_1..x_ℓ]`` plus the new prompts;
4. exact verification (``rejection.verify``) on the warped target rows;
5. roll each request's KV back to ``anchor + accepted`` (O(1)), commit the accepted drafts and the
   replacement/bonus token, which becomes the next anchor;
6. stop conditions (EOS, stop ids, stop strings, max_tokens), text deltas, statistics.

Only committed text is ever emitted; drafts never are.
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agentmill.lm.engine import KVBudgetError, LlamaEngine, RaggedBatch, SamplingParams
from agentmill.lm.engine.sampling import warp
from agentmill.methods.dspark.rejection import Proposal, verify


@dataclass
class RequestOutput:
    rid: int
    text: str = ""                       # newly committed text (held-back tails excluded)
    token_ids: list[int] = field(default_factory=list)
    finish_reason: str | None = None     # "stop" | "length" | None while running
    error: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    ttft: float = 0.0


@dataclass
class SpecStats:
    """vLLM-style speculative metrics; acceptance length τ includes the replacement/bonus token."""

    steps: int = 0
    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    committed: int = 0
    verify_tokens: int = 0
    prompt_tokens: int = 0

    @property
    def tau_mean(self) -> float:
        return self.committed / self.rounds if self.rounds else 0.0

    def as_dict(self) -> dict[str, float]:
        return {"steps": self.steps, "rounds": self.rounds, "drafted": self.drafted, "accepted": self.accepted,
                "committed": self.committed, "verify_tokens": self.verify_tokens, "tau_mean": self.tau_mean,
                "prompt_tokens": self.prompt_tokens}


@dataclass
class _Req:
    rid: int
    prompt: list[int]
    params: SamplingParams
    seq: int | None = None
    out: list[int] = field(default_factory=list)
    sent: int = 0
    generator: Any = None
    t_submit: float = 0.0
    t_first: float | None = None


def safe_text_end(text: str, stops: tuple[str, ...]) -> int:
    """Length of ``text`` that can be emitted now: a trailing partial UTF-8 sequence (U+FFFD) and any tail that
    could still become a stop string are held back."""
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


class SpecEngine:
    """Continuous batching over a ``LlamaEngine`` with an optional proposer and a fixed verify length."""

    def __init__(self, target: LlamaEngine, proposer: Any | None = None, *, verify_len: int = 0,
                 max_num_seqs: int = 16, max_step_tokens: int = 512):
        if max_num_seqs < 1 or max_step_tokens < 1 or verify_len < 0:
            raise ValueError("max_num_seqs and max_step_tokens must be positive, verify_len >= 0")
        if verify_len and proposer is None:
            raise ValueError("a verify length needs a proposer")
        self.target, self.tok = target, target.tokenizer
        self.proposer, self.verify_len = proposer, verify_len
        self.max_num_seqs, self.max_step_tokens = max_num_seqs, max_step_tokens
        self.policy = f"ngram:fixed:{verify_len}" if verify_len else "off"
        self.stats = SpecStats()
        self._waiting: deque[_Req] = deque()
        self._running: list[_Req] = []
        self._ids = itertools.count()

    # ------------------------------------------------------------------ API
    def add_request(self, prompt_ids: Sequence[int], params: SamplingParams) -> int:
        prompt = [int(t) for t in prompt_ids]
        if not prompt:
            raise ValueError("empty prompt")
        if any(t < 0 or t >= self.target.vocab_size for t in prompt):
            raise ValueError(f"token ids must be in [0, {self.target.vocab_size})")
        if len(prompt) >= self.target.kv.max_len:
            raise ValueError(f"prompt has {len(prompt)} tokens; the model's limit is {self.target.kv.max_len}")
        rid = next(self._ids)
        self._waiting.append(_Req(rid, prompt, params, t_submit=time.perf_counter()))
        return rid

    def abort(self, rid: int) -> None:
        for r in list(self._waiting):
            if r.rid == rid:
                self._waiting.remove(r)
        for r in list(self._running):
            if r.rid == rid:
                self._release(r)

    def has_work(self) -> bool:
        return bool(self._running or self._waiting)

    @property
    def n_running(self) -> int:
        return len(self._running)

    @property
    def n_waiting(self) -> int:
        return len(self._waiting)

    # ------------------------------------------------------------------ step
    def step(self) -> list[RequestOutput]:
        import torch

        outputs: list[RequestOutput] = []
        batch, members, drafts, starts = RaggedBatch(), [], [], []
        for r in self._running:
            d = self._draft(r)
            starts.append(self.target.seq_len(r.seq))
            batch.add(r.seq, [r.out[-1]] + d, "all")
            members.append(r)
            drafts.append(d)
        budget = self.max_step_tokens
        while self._waiting and len(members) < self.max_num_seqs and (len(self._waiting[0].prompt) <= budget
                                                                      or not batch.items):
            r = self._waiting.popleft()
            try:
                r.seq = self.target.new_sequence()
                # reserve the whole generation now: admission control instead of running out mid-stream
                self.target.kv.reserve(r.seq, min(len(r.prompt) + r.params.max_tokens + self.verify_len,
                                                  self.target.kv.max_len))
            except KVBudgetError as e:
                self.target.free(r.seq)
                r.seq = None
                if self._running:
                    self._waiting.appendleft(r)     # wait for memory to free up
                    break
                outputs.append(self._fail(r, str(e)))
                continue
            if r.params.seed is not None:
                r.generator = torch.Generator().manual_seed(r.params.seed)
            starts.append(0)
            batch.add(r.seq, r.prompt, "last")
            members.append(r)
            drafts.append(None)
            self._running.append(r)
            budget -= len(r.prompt)
            self.stats.prompt_tokens += len(r.prompt)
        if not batch.items:
            return outputs
        try:
            fo = self.target.forward(batch)
        except Exception as e:  # noqa: BLE001 - a failed forward fails its requests, never the engine
            return outputs + [self._fail(r, f"engine error: {e}") for r in members]
        row = 0
        for r, d, start in zip(members, drafts, starts):
            n_rows = 1 if d is None else 1 + len(d)
            p = r.params
            probs = warp(fo.logits[row: row + n_rows], p.temperature, p.top_k, p.top_p)
            row += n_rows
            ell = 0 if d is None else len(d)
            prop = Proposal(tokens=torch.tensor([(d or []) + [-1]]), q=None, avail=np.array([ell]))
            m, committed = verify([probs], prop, np.array([ell]), [r.generator])
            if d is not None:
                # keep the anchor and the accepted drafts; the last committed token is the next anchor
                self.target.truncate(r.seq, start + 1 + int(m[0]))
                self.stats.rounds += 1
                self.stats.drafted += ell
                self.stats.accepted += int(m[0])
                self.stats.committed += len(committed[0])
                self.stats.verify_tokens += 1 + ell
            if r.t_first is None:
                r.t_first = time.perf_counter()
            outputs.append(self._commit(r, committed[0]))
        self.stats.steps += 1
        return outputs

    def _draft(self, r: _Req) -> list[int]:
        if not self.verify_len or self.proposer is None:
            return []
        room = min(r.params.max_tokens - len(r.out) - 1, self.target.kv.max_len - self.target.seq_len(r.seq) - 2,
                   self.verify_len)
        return self.proposer.propose_one(r.prompt + r.out, room) if room > 0 else []

    def _commit(self, r: _Req, tokens: list[int]) -> RequestOutput:
        p = r.params
        eos = set(p.stop_token_ids) | (set() if p.ignore_eos else set(self.target.eos_token_ids))
        n0, finish = len(r.out), None
        for t in tokens:
            if t in eos:
                finish = "stop"
                break
            r.out.append(t)
            if len(r.out) >= p.max_tokens:
                finish = "length"
                break
        text = self.tok.decode(r.out)
        if p.stop:
            hit = min((i for i in (text.find(s) for s in p.stop) if i >= 0), default=-1)
            if hit >= 0:
                text, finish = text[:hit], "stop"
        if finish is None and self.target.seq_len(r.seq) + 1 + self.verify_len >= self.target.kv.max_len:
            finish = "length"
        end = len(text) if finish else safe_text_end(text, p.stop)
        out = RequestOutput(r.rid, text[r.sent: end] if end > r.sent else "", r.out[n0:], finish)
        r.sent = max(r.sent, end)
        if finish:
            out.prompt_tokens, out.completion_tokens = len(r.prompt), len(r.out)
            out.seconds = time.perf_counter() - r.t_submit
            out.ttft = (r.t_first or time.perf_counter()) - r.t_submit
            self._release(r)
        return out

    def _fail(self, r: _Req, msg: str) -> RequestOutput:
        self._release(r)
        return RequestOutput(r.rid, error=msg)

    def _release(self, r: _Req) -> None:
        if r in self._running:
            self._running.remove(r)
        if r.seq is not None:
            self.target.free(r.seq)
            r.seq = None
