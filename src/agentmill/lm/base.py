"""The language-model protocols every method programs against.

``LM`` is a black box: text (or chat messages) in, sampled text out, plus log-probabilities of a given
continuation. ``WhiteBoxLM`` adds the internals that methods such as tree rollouts, probes and speculative
decoding need: token-level forward passes with per-layer hidden states and a KV cache that can be forked (share a
prefix across branches) and cropped (roll back rejected tokens).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, Union, runtime_checkable

import numpy as np

from agentmill.core import extras
from agentmill.core.types import Message

Prompt = Union[str, Sequence[Message]]
"""A raw text prompt (used as is) or a conversation (rendered with the model's chat template)."""

FinishReason = Literal["stop", "length", "eos"]


class LMError(RuntimeError):
    """A model could not be loaded or queried; the message names the cause and the fix."""


class MissingExtraError(LMError, extras.MissingExtraError):
    """:class:`agentmill.core.extras.MissingExtraError` raised by a model backend: also an :class:`LMError`, so code
    that handles a model that cannot be loaded handles a missing backend the same way."""

    def __init__(self, extra: str | Sequence[str], what: str) -> None:
        extras.MissingExtraError.__init__(self, extra, what)  # RuntimeError's __init__ comes first in the MRO


@dataclass(frozen=True)
class GenerateConfig:
    """Sampling settings shared by every backend.

    ``temperature == 0`` means greedy decoding. With ``temperature > 0`` and a ``seed``, sampling is reproducible
    and batch-invariant: sample ``j`` of prompt ``i`` draws from its own stream keyed by ``(seed, i, j)``, so it
    yields the same text whether decoded alone or in a batch.
    """

    max_new_tokens: int = 64
    """Upper bound on generated tokens per prompt."""
    temperature: float = 1.0
    """Softmax temperature; 0 = greedy (argmax)."""
    top_p: float = 1.0
    """Nucleus sampling mass in (0, 1]; 1 disables it."""
    stop: tuple[str, ...] = ()
    """Stop strings: generation ends when the decoded text contains one (it is cut before the stop string)."""
    stop_regex: str | None = None
    """Stop once the decoded text matches this regex (text kept through the end of the match); e.g. stop after
    ``Answer: 42`` and a newline. Checked on bounded text only (the generated part)."""
    seed: int | None = None
    """Seed for reproducible sampling; None draws fresh entropy."""
    n: int = 1
    """Completions per prompt (returned consecutively: prompt 0's n, then prompt 1's, ...)."""
    no_repeat_ngram_size: int = 0
    """> 0: never generate a token that would repeat an n-gram of this size **within the generated tokens** (0 = off).
    Unlike transformers' option of the same name, the prompt does not count: a summariser must be free to quote
    its input verbatim, and only its own loops are banned. Applied by the local decoders (``hf:``, ``scripted:``
    white-box); ``openai:`` endpoints decode remotely and ignore it."""

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.n < 1:
            raise ValueError(f"n must be >= 1, got {self.n}")
        if self.no_repeat_ngram_size < 0:
            raise ValueError(f"no_repeat_ngram_size must be >= 0, got {self.no_repeat_ngram_size}")


@dataclass(frozen=True)
class Completion:
    """One generated continuation.

    ``token_ids``/``logprobs`` are per generated token (logprob under the *sampling* distribution, i.e. after
    temperature); backends that cannot report them leave them empty.
    """

    text: str
    finish_reason: FinishReason
    token_ids: tuple[int, ...] = ()
    logprobs: tuple[float, ...] = ()
    prompt_tokens: int = 0
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def completion_tokens(self) -> int:
        return len(self.token_ids)


@runtime_checkable
class LM(Protocol):
    """A black-box language model."""

    spec: str
    """The spec string that loads this model (``hf:smollm2``, ``openai:gpt-4o-mini@http://...``)."""

    def generate(self, prompts: Sequence[Prompt], config: GenerateConfig = GenerateConfig()) -> list[Completion]:
        """Sample ``config.n`` completions for every prompt, in prompt order."""
        ...

    def logprobs(self, prompt: Prompt, continuation: str) -> np.ndarray:
        """Log-probabilities (temperature 1) of each token of ``continuation`` given ``prompt``; float64 [n]."""
        ...


@dataclass
class ForwardOutput:
    """Result of :meth:`WhiteBoxLM.forward`.

    Shapes: ``logits`` [B, T, V]; ``hidden_states`` a tuple of L+1 tensors [B, T, D] (embeddings, then every
    layer) or None when not requested; ``cache`` covers every token fed so far.
    """

    logits: Any
    hidden_states: tuple[Any, ...] | None
    cache: Any


@runtime_checkable
class WhiteBoxLM(LM, Protocol):
    """A language model whose internals are available (transformers, the tiny torch model, scripted fakes)."""

    num_layers: int
    hidden_size: int
    vocab_size: int
    eos_token_ids: tuple[int, ...]

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (no special tokens added)."""
        ...

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids`` (special tokens skipped)."""
        ...

    def render(self, prompt: Prompt) -> list[int]:
        """Token ids of a prompt as ``generate`` would feed it (chat template applied to conversations)."""
        ...

    def forward(self, input_ids: Any, cache: Any | None = None, *, hidden_states: bool = False,
                attention_mask: Any | None = None) -> ForwardOutput:
        """Run ``input_ids`` [B, T] (torch long) after ``cache``; returns logits, optional hidden states, cache."""
        ...

    def fork_cache(self, cache: Any, n: int = 1) -> Any:
        """A copy of ``cache`` repeated ``n`` times on the batch axis; the original is left bitwise unchanged."""
        ...

    def crop_cache(self, cache: Any, length: int) -> Any:
        """Keep the first ``length`` positions of ``cache`` (roll back rejected tokens); returns the cache."""
        ...

    def cache_length(self, cache: Any) -> int:
        """Number of positions held by ``cache``."""
        ...

    def add_hook(self, layer: int, fn: Any) -> Any:
        """Call ``fn(layer, hidden)`` on layer ``layer``'s output [B, T, D]; if it returns a tensor, that
        replaces the output (activation steering). Returns a handle with ``.remove()``."""
        ...


def as_messages(prompt: Sequence[Message | dict]) -> list[Message]:
    """A conversation as ``Message`` objects (accepts OpenAI-style dicts too)."""
    return [m if isinstance(m, Message) else Message.from_dict(m) for m in prompt]


def plain_transcript(prompt: Prompt) -> str:
    """The template-free rendering every backend without a chat template uses: raw strings as is, conversations
    as ``role: content`` lines ending in ``assistant:``."""
    if isinstance(prompt, str):
        return prompt
    return "".join(f"{m.role}: {m.content}\n" for m in as_messages(prompt)) + "assistant:"


class HookHandle:
    """What ``add_hook`` returns: call ``remove()`` to detach the hook."""

    def __init__(self, handle: Any) -> None:
        self._handle = handle

    def remove(self) -> None:
        self._handle.remove()


def require_white_box(lm: LM, method: str) -> WhiteBoxLM:
    """Return ``lm`` as a WhiteBoxLM or raise a clear error naming the method that needs internals."""
    if not isinstance(lm, WhiteBoxLM):
        raise TypeError(f"{method} needs model internals (a WhiteBoxLM such as hf:smollm2 or tiny:...), "
                        f"but {getattr(lm, 'spec', type(lm).__name__)!r} is a black-box LM")
    return lm


def apply_stops(text: str, config: GenerateConfig) -> tuple[str, bool]:
    """Apply ``config.stop`` strings and ``config.stop_regex`` to generated ``text``: (cut text, stopped?)."""
    text, hit = split_stop(text, config.stop)
    if config.stop_regex:
        import re

        m = re.search(config.stop_regex, text)
        if m:
            return text[: m.end()], True
    return text, hit


def split_stop(text: str, stop: Sequence[str]) -> tuple[str, bool]:
    """Cut ``text`` before the earliest stop string; return (text, whether a stop string was found)."""
    cut = -1
    for s in stop:
        if not s:
            continue
        j = text.find(s)
        if j >= 0 and (cut < 0 or j < cut):
            cut = j
    return (text, False) if cut < 0 else (text[:cut], True)
