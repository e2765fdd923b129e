"""``SpecEngine``: the one continuous-batching decode loop ([R] design: the AR baseline must share the speculative
path). Plain autoregressive decoding is this loop with no proposer (or verify length 0), so the baseline and the
speculative arms share every line. It schedules and verifies; the forward pass and KV memory it drives are
``agentmill.lm.engine`` (``LlamaEngine``).

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
from collections import OrderedDict, deque
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
    cached_prompt_tokens: int = 0
    draft_seconds: float = 0.0
    target_seconds: float = 0.0
    position_reached: list[int] = field(default_factory=list)
    position_accepted: list[int] = field(default_factory=list)

    @property
    def alpha_by_position(self) -> list[float]:
        """Conditional acceptance α_k = accepted_k / reached_k (vLLM's per-position convention)."""
        return [a / n if n else float("nan") for a, n in zip(self.position_accepted, self.position_reached)]

    @property
    def tau_mean(self) -> float:
        return self.committed / self.rounds if self.rounds else 0.0

    def as_dict(self) -> dict[str, float]:
        return {"steps": self.steps, "rounds": self.rounds, "drafted": self.drafted, "accepted": self.accepted,
                "committed": self.committed, "verify_tokens": self.verify_tokens, "tau_mean": self.tau_mean,
                "prompt_tokens": self.prompt_tokens, "cached_prompt_tokens": self.cached_prompt_tokens,
                "draft_seconds": self.draft_seconds,
                "target_seconds": self.target_seconds, "alpha_by_position": self.alpha_by_position}


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


class _FixedLength:
    """``fixed:k``: verify every drafted token up to k (the policy of ``verify_len``)."""

    def __init__(self, k: int):
        self.k, self.name = k, (f"fixed:{k}" if k else "off")

    def lengths(self, conf: Any, avail: np.ndarray, req_ids: np.ndarray, extra_tokens: int) -> np.ndarray:
        return np.minimum(avail, self.k)

    def observe(self, req_ids: np.ndarray, survival: np.ndarray) -> None:
        pass


@dataclass
class _PrefixEntry:
    """What a prompt's prefill produced: the target's K/V of every prompt position, the raw logits of the last one
    (warped per request, so requests with other sampling settings share it) and the layer taps the drafter starts
    from."""

    kv: list[Any]
    logits: Any
    taps: Any


@dataclass
class RoundRecord:
    """One speculative round of one request (for calibration and traces): raw confidence logits of the drafted
    positions, how many were verified, how many accepted."""

    rid: int
    conf_logits: list[float]
    verified: int
    accepted: int
    temperature: float


class SpecEngine:
    """Continuous batching over a ``LlamaEngine`` with an optional proposer and a verify-length policy.

    ``proposer``: None (plain decoding), an ``NgramProposer`` (deterministic drafts from the history) or a
    ``DSparkProposer`` (drafts from the target's layer taps; the target engine must tap its layers).
    ``policy``: a ``VerifyPolicy`` (``lengths``/``observe``), a policy spec string for ``make_policy`` (with
    ``sps``), or None with ``verify_len`` = k meaning ``fixed:k``.
    ``prefix_cache``: how many distinct prompts to remember (least recently used first out; 0 = off). A request
    whose whole prompt was prefilled before, or is being prefilled in the same step, copies that prefill's K/V,
    last-position logits and taps instead of running the prompt again, and costs no prefill budget. Each entry
    holds its prompt's K/V (prompt length x the KV pool's bytes per position). Many samples of one prompt (a
    sampling test, best-of-n) then pay for one prefill instead of n.
    """

    def __init__(self, target: LlamaEngine, proposer: Any | None = None, *, verify_len: int = 0,
                 policy: Any = None, sps: Any = None, max_num_seqs: int = 16, max_step_tokens: int = 512,
                 record_rounds: bool = False, prefix_cache: int = 0):
        if max_num_seqs < 1 or max_step_tokens < 1 or verify_len < 0 or prefix_cache < 0:
            raise ValueError("max_num_seqs and max_step_tokens must be positive, verify_len and prefix_cache >= 0")
        if isinstance(policy, str) and (policy == "off" or policy.startswith("fixed:") and policy[6:].isdigit()):
            policy = _FixedLength(0 if policy == "off" else int(policy[6:]))
        elif isinstance(policy, str):
            from agentmill.methods.dspark.policies import make_policy

            policy = make_policy(policy, sps)
        if policy is None:
            policy = _FixedLength(verify_len)
        if proposer is None and getattr(policy, "name", "off") not in ("off", "fixed:0"):
            raise ValueError("a verify length needs a proposer")
        self.target, self.tok = target, target.tokenizer
        self.proposer, self.policy_obj = proposer, policy
        self._dspark = hasattr(proposer, "propose") and hasattr(proposer, "start")
        if self._dspark:
            want = tuple(proposer.layer_ids)
            if tuple(target.engine_config.tap_layers) != want:
                raise ValueError(f"the DSpark proposer needs the target to tap layers {want}, it taps "
                                 f"{tuple(target.engine_config.tap_layers)}")
        self.max_len = int(getattr(proposer, "max_len", 0) or verify_len) if proposer is not None else 0
        self.max_num_seqs, self.max_step_tokens = max_num_seqs, max_step_tokens
        self.policy = getattr(policy, "name", str(policy))
        self.stats = SpecStats(position_reached=[0] * max(self.max_len, 1),
                               position_accepted=[0] * max(self.max_len, 1))
        self.record_rounds = record_rounds
        self.rounds: list[RoundRecord] = []
        self._waiting: deque[_Req] = deque()
        self._running: list[_Req] = []
        self._ids = itertools.count()
        self.prefix_cache = prefix_cache
        self._prefix: OrderedDict[tuple[int, ...], _PrefixEntry] = OrderedDict()

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
        decoding = list(self._running)
        # 1. admission (first come, first served) within the sequence and prefill-token budgets; a prompt the
        # prefix cache holds, or one prefilled by an earlier request of this step, costs no budget
        prefill: list[_Req] = []
        cached: list[_Req] = []
        followers: list[_Req] = []
        leading: set[tuple[int, ...]] = set()
        budget = self.max_step_tokens
        while self._waiting and len(decoding) + len(prefill) + len(cached) + len(followers) < self.max_num_seqs and (
                self._prefill_cost(self._waiting[0], leading) <= budget or not (decoding or prefill or cached)):
            r = self._waiting.popleft()
            try:
                r.seq = self.target.new_sequence()
                # reserve the whole generation now: admission control instead of running out mid-stream
                self.target.kv.reserve(r.seq, min(len(r.prompt) + r.params.max_tokens + self.max_len,
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
            self._running.append(r)
            self.stats.prompt_tokens += len(r.prompt)
            key = tuple(r.prompt)
            if self.prefix_cache and key in self._prefix:
                cached.append(r)
            elif self.prefix_cache and key in leading:
                followers.append(r)
            else:
                prefill.append(r)
                leading.add(key)
                budget -= len(r.prompt)
        outputs += [self._start_cached(r) for r in cached]
        # 2. drafts and verify lengths for the decoding requests
        t0 = time.perf_counter()
        drafts, lengths, blocks = self._drafts(decoding, sum(len(r.prompt) for r in prefill))
        self.stats.draft_seconds += time.perf_counter() - t0
        # 3. one ragged target forward
        batch, starts = RaggedBatch(), []
        for r, d, ell in zip(decoding, drafts, lengths):
            starts.append(self.target.seq_len(r.seq))
            batch.add(r.seq, [r.out[-1]] + d[:ell], "all")
        for r in prefill:
            starts.append(0)
            batch.add(r.seq, r.prompt, "last")
        if not batch.items:
            return outputs
        members = decoding + prefill
        t1 = time.perf_counter()
        try:
            fo = self.target.forward(batch)
        except Exception as e:  # noqa: BLE001 - a failed forward fails its requests, never the engine
            return outputs + [self._fail(r, f"engine error: {e}") for r in members + followers]
        self.stats.target_seconds += time.perf_counter() - t1
        # 4-6. verification, KV rollback, drafter context, commit
        row, tok_off = 0, 0
        survivals = []
        for i, (r, start) in enumerate(zip(members, starts)):
            is_dec = i < len(decoding)
            ell = int(lengths[i]) if is_dec else 0
            n_rows = 1 + ell if is_dec else 1
            n_tok = len(batch.items[i].tokens)
            p = r.params
            probs = warp(fo.logits[row: row + n_rows], p.temperature, p.top_k, p.top_p)
            row += n_rows
            if is_dec:
                d, blk = drafts[i], blocks[i] if blocks else None
                q = None
                if blk is not None and blk.q is not None and ell:
                    q = blk.q[:ell][None]
                prop = Proposal(tokens=torch.tensor([d[:ell] + [-1]]), q=q, avail=np.array([ell]))
            else:
                prop = Proposal(tokens=torch.tensor([[-1]]), q=None, avail=np.array([0]))
            m, committed = verify([probs], prop, np.array([ell]), [r.generator])
            if not is_dec and self.prefix_cache:
                self._remember(r, fo.logits[row - 1: row], fo.taps[tok_off: tok_off + n_tok]
                               if self._dspark and fo.taps is not None else None)
            if self._dspark and fo.taps is not None:
                taps = fo.taps[tok_off: tok_off + n_tok]
                if is_dec:
                    self.proposer.commit(r.rid, taps[: 1 + int(m[0])])
                else:
                    self.proposer.start(r.rid, taps, seed=p.seed)
            tok_off += n_tok
            if is_dec:
                # keep the anchor and the accepted drafts; the last committed token is the next anchor
                self.target.truncate(r.seq, start + 1 + int(m[0]))
                self._round_stats(r, ell, int(m[0]), len(committed[0]), blocks[i] if blocks else None)
                if blocks and blocks[i].conf is not None:
                    survivals.append((r.rid, np.cumprod(np.clip(blocks[i].conf, 0, 1))))
            if r.t_first is None:
                r.t_first = time.perf_counter()
            outputs.append(self._commit(r, committed[0]))
        outputs += [self._start_cached(r) for r in followers]
        self._trim_prefix()
        if survivals:
            g = self.max_len
            surv = np.zeros((len(survivals), g))
            for j, (_, a) in enumerate(survivals):
                surv[j, : len(a)] = a
            self.policy_obj.observe(np.array([rid for rid, _ in survivals]), surv)
        self.stats.steps += 1
        return outputs

    # ------------------------------------------------------------------ prefix cache
    def _prefill_cost(self, r: _Req, leading: set[tuple[int, ...]]) -> int:
        """Prefill tokens ``r`` would add to this step: none when its prompt is cached or led by another request."""
        if self.prefix_cache and ((key := tuple(r.prompt)) in self._prefix or key in leading):
            return 0
        return len(r.prompt)

    def _remember(self, r: _Req, logits: Any, taps: Any) -> None:
        """Keep what ``r``'s prefill produced (copies, so the entry outlives the request and the forward's
        outputs)."""
        key = tuple(r.prompt)
        self._prefix[key] = _PrefixEntry(self.target.kv.snapshot(r.seq, len(r.prompt)), logits.clone(),
                                         None if taps is None else taps.clone())
        self._prefix.move_to_end(key)

    def _trim_prefix(self) -> None:
        """Drop the least recently used entries beyond ``prefix_cache`` (after a step: its followers read theirs)."""
        while len(self._prefix) > self.prefix_cache:
            self._prefix.popitem(last=False)

    def _start_cached(self, r: _Req) -> RequestOutput:
        """Start ``r`` from its prompt's cached prefill: the same K/V, the first token sampled from the same
        logits with ``r``'s own settings and generator, and the drafter started on the same taps."""
        import torch

        key = tuple(r.prompt)
        e = self._prefix[key]
        self._prefix.move_to_end(key)
        self.target.kv.restore(r.seq, e.kv)
        probs = warp(e.logits, r.params.temperature, r.params.top_k, r.params.top_p)
        _, committed = verify([probs], Proposal(tokens=torch.tensor([[-1]]), q=None, avail=np.array([0])),
                              np.array([0]), [r.generator])
        if self._dspark and e.taps is not None:
            self.proposer.start(r.rid, e.taps, seed=r.params.seed)
        self.stats.cached_prompt_tokens += len(r.prompt)
        r.t_first = time.perf_counter()
        return self._commit(r, committed[0])

    def _drafts(self, decoding: list[_Req], extra_tokens: int) -> tuple[list[list[int]], np.ndarray, list | None]:
        """Draft for every decoding request and ask the policy how many drafted tokens to verify."""
        R = len(decoding)
        if R == 0:
            return [], np.zeros(0, dtype=np.int64), None
        room = np.array([max(0, min(r.params.max_tokens - len(r.out) - 1,
                                    self.target.kv.max_len - self.target.seq_len(r.seq) - 2, self.max_len))
                         for r in decoding], dtype=np.int64)
        if self.proposer is None or self.max_len == 0 or self.policy == "off":
            return [[] for _ in decoding], np.zeros(R, dtype=np.int64), None
        blocks = None
        conf = None
        if self._dspark:
            blocks = self.proposer.propose([r.rid for r in decoding], [r.out[-1] for r in decoding],
                                           [r.params.temperature for r in decoding], room)
            drafts = [b.tokens for b in blocks]
            if all(b.conf is not None for b in blocks):
                conf = np.zeros((R, self.max_len))
                for j, b in enumerate(blocks):
                    conf[j, : len(b.conf)] = b.conf
        else:
            drafts = [self.proposer.propose_one(r.prompt + r.out, int(k)) if k > 0 else [] for r, k in
                      zip(decoding, room)]
        avail = np.array([len(d) for d in drafts], dtype=np.int64)
        lengths = np.asarray(self.policy_obj.lengths(conf, avail, np.array([r.rid for r in decoding]),
                                                     extra_tokens), dtype=np.int64)
        if lengths.shape != (R,) or (lengths < 0).any() or (lengths > avail).any():
            raise RuntimeError(f"policy {self.policy} returned invalid verify lengths {lengths} for avail {avail}")
        return drafts, lengths, blocks

    def _round_stats(self, r: _Req, ell: int, m: int, n_committed: int, blk: Any) -> None:
        st = self.stats
        st.rounds += 1
        st.drafted += ell
        st.accepted += m
        st.committed += n_committed
        st.verify_tokens += 1 + ell
        for k in range(ell):
            st.position_reached[k] += 1
            if k < m:
                st.position_accepted[k] += 1
        if self.record_rounds and blk is not None and blk.conf_logits is not None:
            self.rounds.append(RoundRecord(r.rid, [float(z) for z in blk.conf_logits], ell, m,
                                           r.params.temperature))

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
        if finish is None and self.target.seq_len(r.seq) + 1 + self.max_len >= self.target.kv.max_len:
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
        if self._dspark:
            self.proposer.release(r.rid)
