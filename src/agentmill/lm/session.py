"""A multi-turn chat that keeps the KV cache between turns.

``generate`` is stateless: every call renders the whole conversation and prefills it again, so turn t of an
agent loop pays for all t − 1 earlier turns once more. Prefill is the expensive part of a long history (SmolLM2
prefills ~250–400 tok/s on two cores, so a 3k-token history costs ~8–12 s before the first new token), while the
new material of a turn is a few hundred tokens at most.

:class:`ChatSession` keeps one cache for the conversation. Each turn renders the conversation as ``generate``
would, keeps the longest prefix of tokens the cache already holds (the rendering of earlier turns is stable under
a chat template: appending messages does not re-tokenise what came before, except at the seam where the template
closes the assistant turn), crops the cache there, prefills only the rest and decodes with the same sampler as
``generate`` (``lm.decoding.sample_token``: float64 Gumbel-max, one seeded stream per turn). Because a causal
model's key/value at position i depends only on tokens ≤ i, the kept cache equals what a full re-prefill would
compute, so a turn's tokens equal ``generate``'s on the same rendered conversation (up to float differences between
a chunked and a one-shot prefill, which can flip a greedy argmax only between near-tied logits).

Works for any white-box model with ``render/forward/crop_cache/cache_length/decode/eos_token_ids`` (``hf:``,
``tiny:``). One session is one conversation; it is not thread-safe.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from agentmill.lm.base import Completion, GenerateConfig, LMError, Message, apply_stops, require_white_box
from agentmill.lm.decoding import repeated_ngram_bans, sample_token


@dataclass
class TurnStats:
    """What one turn cost: tokens taken from the cache, tokens prefilled, tokens generated."""

    reused: int
    prefilled: int
    generated: int


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token lists."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


@dataclass
class ChatSession:
    """One conversation on a white-box LM with its KV cache kept across turns (see the module docstring).

    ``messages`` is the conversation so far (system prompt first when given); :meth:`send` appends a user message
    and the assistant's reply. ``reuse=False`` re-prefills every turn (the stateless baseline, same sampler)."""

    lm: Any
    system: str | None = None
    reuse: bool = True
    messages: list[Message] = field(default_factory=list)
    turns: list[TurnStats] = field(default_factory=list)

    def __post_init__(self) -> None:
        require_white_box(self.lm, "ChatSession")
        if self.system is not None and not self.messages:
            self.messages.append(Message("system", self.system))
        self._cache: Any = None
        self._ids: list[int] = []  # the tokens whose keys/values the cache holds, in order

    def reset(self) -> None:
        """Forget the cache (the conversation stays); the next turn prefills everything."""
        self._cache, self._ids = None, []

    @property
    def cached_tokens(self) -> int:
        return len(self._ids)

    def send(self, text: str, config: GenerateConfig = GenerateConfig(temperature=0.0), *,
             role: str = "user") -> Completion:
        """Append a ``role`` message with ``text``, generate the assistant's reply, append it and return it."""
        if config.n != 1:
            raise ValueError(f"ChatSession.send generates one reply per turn; got n={config.n}")
        self.messages.append(Message(role, text))
        try:
            out = self._reply(list(self.lm.render(self.messages)), config)
        except BaseException:
            self.messages.pop()  # nothing half-done stays in the conversation
            self.reset()
            raise
        self.messages.append(Message("assistant", out.text))
        return out

    def _prefill(self, ids: list[int]) -> np.ndarray:
        """Bring the cache to ``ids`` and return the logits after the last token."""
        lm = self.lm
        keep = common_prefix(self._ids, ids) if (self.reuse and self._cache is not None) else 0
        keep = min(keep, len(ids) - 1)  # at least one token is fed: its logits start the reply
        if keep == 0:
            self._cache = None
        else:
            lm.crop_cache(self._cache, keep)
        fo = lm.forward([ids[keep:]], self._cache)
        self._cache, self._ids = fo.cache, list(ids)
        self.turns.append(TurnStats(reused=keep, prefilled=len(ids) - keep, generated=0))
        return fo.logits[0, -1].numpy()

    def _reply(self, ids: list[int], cfg: GenerateConfig) -> Completion:
        lm = self.lm
        if not ids:
            raise LMError(f"{getattr(lm, 'spec', lm)}: the conversation renders to no tokens")
        if len(ids) >= lm.max_positions:
            raise LMError(f"{getattr(lm, 'spec', lm)}: the conversation has {len(ids)} tokens, the model context is "
                          f"{lm.max_positions}; start a new session or summarise")
        seed = cfg.seed if cfg.seed is not None else int(np.random.SeedSequence().entropy % (2**63))
        rng = np.random.default_rng([seed, len(self.turns), 0])
        logits = self._prefill(ids)
        budget = min(cfg.max_new_tokens, lm.max_positions - len(ids))
        toks: list[int] = []
        lps: list[float] = []
        finish, text = "length", None
        while len(toks) < budget:
            banned = repeated_ngram_bans(toks, cfg.no_repeat_ngram_size)
            if banned:
                logits[banned] = -np.inf
            tok, lp = sample_token(logits, cfg.temperature, cfg.top_p, rng)
            if tok in lm.eos_token_ids:
                finish = "eos"
                break
            toks.append(tok)
            lps.append(lp)
            if cfg.stop or cfg.stop_regex:
                cut, hit = apply_stops(lm.decode(toks), cfg)
                if hit:
                    finish, text = "stop", cut
                    break
            if len(toks) >= budget:
                break
            fo = lm.forward([[tok]], self._cache)
            self._cache = fo.cache
            self._ids.append(tok)
            logits = fo.logits[0, -1].numpy()
        self.turns[-1].generated = len(toks)
        return Completion(text=lm.decode(toks) if text is None else text, finish_reason=finish,
                          token_ids=tuple(toks), logprobs=tuple(lps), prompt_tokens=len(ids),
                          meta={"reused_tokens": self.turns[-1].reused, "prefilled_tokens": self.turns[-1].prefilled})
