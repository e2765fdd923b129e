"""Deterministic fakes of the ``LM`` protocol for unit tests (``scripted:<preset>``).

Every backend has a scripted twin so that tests of methods, experiments, servers and the CLI run in milliseconds
without a model (ARCHITECTURE.md §6.6):

* :class:`ScriptedLM` — a black box whose reply is a function of the prompt text; "tokens" are whitespace words.
* :class:`ScriptedWhiteBoxLM` — a white box over a fixed random bigram table with a real (trivial) cache, for
  methods that need logits, hidden states, cache fork/crop or hooks (torch, imported only when it is built).

Presets by spec: ``scripted:echo``, ``scripted:constant``, ``scripted:arith``, ``scripted:fail``,
``scripted:whitebox``.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from agentmill.lm.base import (Completion, ForwardOutput, GenerateConfig, HookHandle, LMError, MissingExtraError,
                               Prompt, apply_stops, plain_transcript)

Responder = Callable[[str, np.random.Generator | None], str]
"""``f(prompt_text, rng)``: ``rng`` is the (prompt, sample) stream when sampling, None when greedy."""


def _as_responder(fn: Callable[..., str]) -> Responder:
    """Accept one-argument callables ``f(prompt_text)`` too (they ignore the sampling stream)."""
    try:
        n_params = len(inspect.signature(fn).parameters)
    except (TypeError, ValueError):  # builtins without a signature: assume the full form
        n_params = 2
    return fn if n_params >= 2 else (lambda text, rng: fn(text))


def choice_responder(replies: Sequence[str], probs: Sequence[float] | None = None) -> Responder:
    """A responder that samples one of ``replies`` (with ``probs``, default uniform) from the row's stream, and
    answers ``replies[0]`` when greedy: a stochastic but reproducible fake for tests of samplers."""
    if not replies:
        raise ValueError("choice_responder needs at least one reply")
    p = None if probs is None else np.asarray(probs, dtype=float) / float(np.sum(probs))

    def respond(text: str, rng: np.random.Generator | None) -> str:
        return replies[0] if rng is None else replies[int(rng.choice(len(replies), p=p))]

    return respond


class ScriptedLM:
    """An LM whose reply is a function of the prompt text (and, when sampling, of a seeded RNG).

    ``responses`` may be a mapping from prompt substring to reply (first match wins, else ``default``), a callable
    ``f(prompt_text)`` or ``f(prompt_text, rng_or_None)``, or a sequence of replies used in turn (one per
    completion, across calls: scripts a multi-turn agent). With ``temperature > 0`` a two-argument callable
    receives ``np.random.default_rng([seed, i, j])`` for prompt ``i``, sample ``j`` (seed None counts as 0, so the
    fake is always reproducible); greedy gets None. See :func:`choice_responder` for a sampling fake.

    Chat prompts are rendered with :func:`plain_transcript` (``user: ...\nassistant:``). The reply is cut to
    ``max_new_tokens`` whitespace tokens (finish ``length``), then at stop strings / ``stop_regex`` (``stop``);
    otherwise the finish reason is ``eos``. Each generated token has logprob -1.0; ``calls`` records every
    rendered prompt.
    """

    def __init__(self, responses: Mapping[str, str] | Responder | Sequence[str], *, spec: str = "scripted:custom",
                 default: str = "ok") -> None:
        self.spec = spec
        self.default = default
        self._responses = _as_responder(responses) if callable(responses) else responses
        self._turn = 0
        self.calls: list[str] = []

    def _reply(self, prompt: Prompt, rng: np.random.Generator | None) -> str:
        text = plain_transcript(prompt)
        r = self._responses
        if callable(r):
            return r(text, rng)
        if isinstance(r, Mapping):
            for key, reply in r.items():
                if key in text:
                    return reply
            return self.default
        if not r:
            return self.default
        reply = r[self._turn % len(r)]
        self._turn += 1
        return reply

    def generate(self, prompts: Sequence[Prompt], config: GenerateConfig = GenerateConfig()) -> list[Completion]:
        seed = 0 if config.seed is None else config.seed
        out = []
        for i, p in enumerate(prompts):
            self.calls.append(plain_transcript(p))
            for j in range(config.n):
                rng = np.random.default_rng([seed, i, j]) if config.temperature > 0 else None
                text = self._reply(p, rng)
                words = text.split(" ")
                finish = "eos"
                if len(words) > config.max_new_tokens:
                    text, finish = " ".join(words[: config.max_new_tokens]), "length"
                text, hit = apply_stops(text, config)
                if hit:
                    finish = "stop"
                n_tok = len(text.split())
                out.append(Completion(text=text, finish_reason=finish, token_ids=tuple(range(n_tok)),
                                      logprobs=(-1.0,) * n_tok, prompt_tokens=len(plain_transcript(p).split())))
        return out

    def logprobs(self, prompt: Prompt, continuation: str) -> np.ndarray:
        """-1 nat per whitespace token: deterministic and easy to check by hand."""
        return -np.ones(len(continuation.split()))


_ARITH = re.compile(r"(-?\d+(?:\s*[-+*x×]\s*-?\d+)+)\s*=\s*\?*\s*$|What is\s+(-?\d+(?:\s*[-+*x×]\s*-?\d+)+)\s*\?")


def _solve(expr: str) -> int:
    """Evaluate a flat ``a op b op c`` expression with + - * (no eval): left to right, * before +/-."""
    tokens = re.findall(r"-?\d+|[-+*x×]", expr.replace(" ", ""))
    terms: list[int] = [int(tokens[0])]
    for op, num in zip(tokens[1::2], tokens[2::2]):
        n = int(num)
        if op in "*x×":
            terms[-1] *= n
        else:
            terms.append(n if op == "+" else -n)
    return sum(terms)


def arith_responder(text: str, rng: np.random.Generator | None) -> str:
    """The ``scripted:arith`` behaviour, exactly.

    * The question is the last line containing ``What is <expr>?`` or ending in ``<expr> =`` (e.g.
      ``Question: 12 + 7 =``), where ``<expr>`` is integers joined by ``+ - * x ×`` (``*`` binds tighter).
    * The reply is ``"<expr> = <a>. Answer: <a>"``, e.g. ``12 + 7 = 19. Answer: 19``.
    * Greedy (``rng`` None): ``a`` is correct. Sampling: with the row's stream, ``rng.random() < 0.5`` keeps
      ``a`` correct; otherwise ``a`` is off by ``rng.integers(1, 10)`` with sign ``+`` if ``rng.random() < 0.5``.
      So the pass rate is exactly Bernoulli(0.5) per sample, reproducible per (seed, prompt, sample).
    * No question: ``"I don't know"``.
    """
    question = None
    for line in text.splitlines():
        m = _ARITH.search(line.strip())
        if m:
            question = m.group(1) or m.group(2)
    if question is None:
        return "I don't know"
    answer = _solve(question)
    if rng is not None and rng.random() >= 0.5:
        answer += int(rng.integers(1, 10)) * (1 if rng.random() < 0.5 else -1)
    return f"{question.strip()} = {answer}. Answer: {answer}"


def _fail(text: str, rng: np.random.Generator | None) -> str:
    raise LMError("scripted:fail always fails (a fault-injection fake)")


# ------------------------------------------------------------------------------------------ white-box fake
ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789 .,:?+-=\n"
"""The fake's characters; ids 0-3 are PAD, BOS, EOS, UNK, then one id per character (49 in all)."""
PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3


def _torch():
    try:
        import torch
    except ImportError as e:
        raise MissingExtraError("hf", "ScriptedWhiteBoxLM (torch)") from e
    return torch


class ScriptedCache:
    """The fake's cache: per position, the token embedding [B, T, D] (all a later position needs) and whether it
    is a real token rather than left padding [B, T] bool. ``forward`` extends it in place, like the real caches,
    so a method that forgets to fork is caught by tests on the fake too."""

    def __init__(self, emb: Any, keep: Any) -> None:
        self.emb, self.keep = emb, keep

    def get_seq_length(self) -> int:
        return int(self.emb.shape[1])

    def batch_select_indices(self, idx: Any) -> None:
        self.emb, self.keep = self.emb[idx], self.keep[idx]


class _HookSlot:
    def __init__(self, hooks: list, fn: Any) -> None:
        self._hooks, self._fn = hooks, fn

    def remove(self) -> None:
        if self._fn in self._hooks:
            self._hooks.remove(self._fn)


class ScriptedWhiteBoxLM:
    """A ``WhiteBoxLM`` small enough to check by hand: a fixed random bigram table plus two tiny layers.

    For token ``x_t`` with embedding ``e_t = E[x_t]`` (D = 8)::

        h_0 = e_t                                        hidden_states[0]
        h_1 = h_0 + mean(e_s for real s <= t)            layer 0: a uniform causal "attention" over the cache
        h_2 = h_1 + tanh(h_1 @ W)                        layer 1
        logits = B[x_t] + h_2 @ U                        B: the bigram table [V, V]

    The context mean makes logits depend on the whole prefix, so a wrong cache (not forked, not cropped, padding
    attended) gives different numbers than a full forward. Positions carry no information (``position_ids`` are
    accepted and ignored). All weights come from ``np.random.default_rng(seed)``; generation shares the torch
    backends' decode loop, so it is seeded and batch-invariant the same way.
    """

    num_layers = 2
    hidden_size = 8
    vocab_size = 4 + len(ALPHABET)
    eos_token_ids = (EOS_ID,)
    pad_id = PAD_ID

    def __init__(self, *, seed: int = 0, spec: str = "scripted:whitebox", max_positions: int = 512) -> None:
        torch = _torch()
        rng = np.random.default_rng(seed)
        V, D = self.vocab_size, self.hidden_size
        t = lambda a: torch.tensor(a, dtype=torch.float32)
        self.E, self.W = t(rng.normal(size=(V, D))), t(rng.normal(size=(D, D)) / np.sqrt(D))
        bigram = 2.0 * rng.normal(size=(V, V))
        bigram[:, [PAD_ID, BOS_ID, UNK_ID]] = -30.0  # generated text stays inside the alphabet (plus EOS)
        self.U, self.B = t(rng.normal(size=(D, V)) / np.sqrt(D)), t(bigram)
        self.spec, self.max_positions = spec, max_positions
        self._hooks: list[list[Any]] = [[] for _ in range(self.num_layers)]
        self.info = {"spec": spec, "seed": seed}

    def encode(self, text: str) -> list[int]:
        """Lossy on purpose: lower-cased; characters outside ``ALPHABET`` become UNK."""
        return [4 + ALPHABET.index(c) if c in ALPHABET else UNK_ID for c in text.lower()]

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(ALPHABET[i - 4] if i >= 4 else "\ufffd" for i in ids if i not in (PAD_ID, BOS_ID, EOS_ID))

    def render(self, prompt: Prompt) -> list[int]:
        return [BOS_ID] + self.encode(plain_transcript(prompt))

    def forward(self, input_ids: Any, cache: ScriptedCache | None = None, *, hidden_states: bool = False,
                attention_mask: Any | None = None, position_ids: Any | None = None) -> ForwardOutput:
        """``input_ids`` [B, T]; ``attention_mask`` [B, past + T] (1 = real token) covers the cache too."""
        torch = _torch()
        ids = torch.as_tensor(input_ids, dtype=torch.long)
        ids = ids[None] if ids.ndim == 1 else ids
        B, T = ids.shape
        past = 0 if cache is None else cache.get_seq_length()
        if cache is not None and cache.emb.shape[0] != B:
            raise ValueError(f"forward: batch of {B} rows after a cache of {cache.emb.shape[0]}; "
                             "use fork_cache(cache, n) to branch")
        if past + T > self.max_positions:
            raise LMError(f"{self.spec}: {past + T} tokens exceed the context ({self.max_positions})")
        mask = (torch.ones(B, past + T, dtype=torch.bool) if attention_mask is None
                else torch.as_tensor(attention_mask).bool())
        if tuple(mask.shape) != (B, past + T):
            raise ValueError(f"forward: attention_mask must be [B, past + T] = {[B, past + T]}, "
                             f"got {list(mask.shape)}")
        if cache is None:
            cache = ScriptedCache(torch.zeros(B, 0, self.hidden_size), torch.zeros(B, 0, dtype=torch.bool))
        h = self.E[ids]
        cache.emb, cache.keep = torch.cat([cache.emb, h], 1), torch.cat([cache.keep, mask[:, past:]], 1)
        hs = [h]
        w = cache.keep.float()[..., None]
        ctx = (cache.emb * w).cumsum(1)[:, past:] / w.cumsum(1)[:, past:].clamp(min=1.0)
        for layer in range(self.num_layers):
            h = h + ctx if layer == 0 else h + torch.tanh(h @ self.W)
            for fn in list(self._hooks[layer]):
                out = fn(layer, h)
                h = out if out is not None else h
            hs.append(h)
        logits = self.B[ids] + h @ self.U
        return ForwardOutput(logits=logits, hidden_states=tuple(hs) if hidden_states else None, cache=cache)

    def fork_cache(self, cache: ScriptedCache, n: int = 1) -> ScriptedCache:
        return ScriptedCache(cache.emb.repeat_interleave(n, 0), cache.keep.repeat_interleave(n, 0))

    def crop_cache(self, cache: ScriptedCache, length: int) -> ScriptedCache:
        if not 0 <= length <= cache.get_seq_length():
            raise ValueError(f"crop_cache: length must be in [0, {cache.get_seq_length()}], got {length}")
        cache.emb, cache.keep = cache.emb[:, :length], cache.keep[:, :length]
        return cache

    def cache_length(self, cache: ScriptedCache) -> int:
        return cache.get_seq_length()

    def add_hook(self, layer: int, fn: Callable[[int, Any], Any]) -> HookHandle:
        if not 0 <= layer < self.num_layers:
            raise ValueError(f"add_hook: layer must be in [0, {self.num_layers}), got {layer}")
        self._hooks[layer].append(fn)
        return HookHandle(_HookSlot(self._hooks[layer], fn))

    def logprobs(self, prompt: Prompt, continuation: str) -> np.ndarray:
        torch = _torch()
        p, c = self.render(prompt), self.encode(continuation)
        logits = self.forward([p + c]).logits[0].double()
        logp = torch.log_softmax(logits[len(p) - 1: -1], -1)
        return logp.gather(1, torch.tensor(c, dtype=torch.long)[:, None])[:, 0].numpy()

    def generate(self, prompts: Sequence[Prompt], config: GenerateConfig = GenerateConfig()) -> list[Completion]:
        from agentmill.lm.decoding import decode_rows

        rendered = [self.render(p) for p in prompts]
        seed = config.seed if config.seed is not None else int(np.random.SeedSequence().entropy % (2**63))
        rows = [(i, j) for i in range(len(prompts)) for j in range(config.n)]
        return [c for s in range(0, len(rows), 32) for c in decode_rows(self, rendered, rows[s: s + 32], config, seed)]


PRESETS: dict[str, Callable[[], ScriptedLM | ScriptedWhiteBoxLM]] = {
    "echo": lambda: ScriptedLM(lambda t, r: t.rsplit("user: ", 1)[-1].removesuffix("\nassistant:").strip(),
                               spec="scripted:echo"),
    "constant": lambda: ScriptedLM(lambda t, r: "ok", spec="scripted:constant"),
    "arith": lambda: ScriptedLM(arith_responder, spec="scripted:arith"),
    "fail": lambda: ScriptedLM(_fail, spec="scripted:fail"),
    "whitebox": lambda: ScriptedWhiteBoxLM(spec="scripted:whitebox"),
}


def load(rest: str, **_: object) -> ScriptedLM | ScriptedWhiteBoxLM:
    if rest not in PRESETS:
        raise ValueError(f"unknown scripted preset {rest!r}; presets: {', '.join(sorted(PRESETS))}")
    return PRESETS[rest]()


# ------------------------------------------------------------------------------------------ scoring fake
class ScriptedScoringLM:
    """A canned token scorer for tests of segment scoring (``lm.scoring``) and the progress advantage.

    Tokens are whitespace-separated words looked up in ``vocab`` (id = index; id 0 is ``<bos>``; an unknown word
    raises ``ValueError`` so a test never scores a word it did not plan for). The predictive distribution after a
    context is the canned vector ``next_logprobs(context_ids) -> (V,)`` — or, given a mapping ``{word: logprob}``,
    the same context-free vector everywhere (missing words get ``default``). So log p(w | context) is whatever the
    test wrote down, and the top-k mean is the mean of the k largest entries of that vector. The vector need not
    be normalised: this is a fake for checking bookkeeping, not a model.
    """

    bos_id = 0
    eos_token_ids: tuple[int, ...] = ()

    def __init__(self, vocab: Sequence[str], logprobs: Mapping[str, float] | Callable[[tuple[int, ...]], Any], *,
                 default: float = -1.0, spec: str = "scripted:scoring", max_positions: int | None = None) -> None:
        self.vocab = ("<bos>", *[w for w in vocab if w != "<bos>"])
        self._index = {w: i for i, w in enumerate(self.vocab)}
        if len(self._index) != len(self.vocab):
            raise ValueError("ScriptedScoringLM: duplicate words in vocab")
        if isinstance(logprobs, Mapping):
            unknown = set(logprobs) - set(self._index)
            if unknown:
                raise ValueError(f"ScriptedScoringLM: logprobs for words outside vocab: {sorted(unknown)}")
            table = np.full(len(self.vocab), float(default))
            for w, v in logprobs.items():
                table[self._index[w]] = float(v)
            self._next = lambda ctx: table
        else:
            self._next = logprobs
        self.spec, self.max_positions = spec, max_positions
        self.calls: list[list[list[int]]] = []

    def encode(self, text: str) -> list[int]:
        out = []
        for w in text.split():
            if w not in self._index:
                raise ValueError(f"ScriptedScoringLM: word {w!r} is not in the vocabulary")
            out.append(self._index[w])
        return out

    def decode(self, ids: Sequence[int]) -> str:
        return " ".join(self.vocab[i] for i in ids if i != self.bos_id)

    def tokenizer_fingerprint(self) -> str:
        return "scripted-words:" + "|".join(self.vocab)

    def score_token_ids(self, seqs: Sequence[Sequence[int]], *, top_k: int = 0,
                        ) -> list[tuple[np.ndarray, np.ndarray | None]]:
        """Per sequence: log p(x_t | x_<t) for t >= 1 (index 0 NaN) and the top-k mean, float64 (canned values are
        returned exactly, so exact tabular pairs can be checked through a scorer at 1e-10)."""
        self.calls.append([list(s) for s in seqs])
        out = []
        for s in seqs:
            lp = np.full(len(s), np.nan)
            tk = np.full(len(s), np.nan) if top_k else None
            for t in range(1, len(s)):
                vec = np.asarray(self._next(tuple(int(x) for x in s[:t])), dtype=np.float64)
                lp[t] = vec[int(s[t])]
                if tk is not None:
                    tk[t] = np.sort(vec)[::-1][:top_k].mean()
            out.append((lp, tk))
        return out

    def logprobs(self, prompt: Prompt, continuation: str) -> np.ndarray:
        ctx = [self.bos_id] + self.encode(plain_transcript(prompt))
        cont = self.encode(continuation)
        lp, _ = self.score_token_ids([ctx + cont])[0]
        return lp[len(ctx):].astype(np.float64)

    def generate(self, prompts: Sequence[Prompt], config: GenerateConfig = GenerateConfig()) -> list[Completion]:
        raise LMError(f"{self.spec} only scores text; it does not generate")
