"""State keys: which observations count as "the same state" in GiGPO anchor groups and G2PO graph nodes.

The key decides everything (g2po README, Pitfalls): over-merging aliases different true states ("Nothing
happens."), under-merging splits one state over volatile ids and timestamps. A key function is
``key_fn(obs, info) -> Hashable``; it never sees ``info["oracle"]`` (``StepTable`` refuses that namespace).

Built-ins: ``ExactKey``, ``ScrubbedKey``, ``FieldsKey``, ``HashKey``, and ``cluster_similar``, the
GiGPO similarity grouping, which compares observations with each other and so is a grouping pass, not a key.
``UNIQUE_OBS_PATTERN`` (defined by ``envs.wrappers.UniqueObsWrapper``, re-exported here) matches the
``[request <8 hex> at <ISO timestamp>]`` field that wrapper appends; ``ScrubbedKey(UNIQUE_OBS_PATTERN)`` undoes it.
"""

from __future__ import annotations

import difflib
import hashlib
import re
import warnings
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from agentmill.envs.wrappers import UNIQUE_OBS_PATTERN  # re-exported: the wrapper owns the format it writes

__all__ = ["UNIQUE_OBS_PATTERN", "ExactKey", "FieldsKey", "HashKey", "ScrubbedKey", "StateKeyFn", "cluster_similar",
           "key_from_spec"]

StateKeyFn = Callable[[str, Mapping[str, Any]], Hashable]

SIMILARITY_WARN_ROWS = 5000
"""``cluster_similar`` warns above this many rows per group: it makes O(rows x clusters) ratio calls [R]."""

_WS = re.compile(r"\s+")

_TEXT_CACHE = 1 << 16
"""Entries of the string caches below. Keys are evaluated once per row and a group's rows revisit the same few
descriptions (that repetition is what G2PO merges), so most calls repeat an earlier string."""


@lru_cache(maxsize=_TEXT_CACHE)
def _norm_ws(text: str) -> str:
    """Whitespace runs to one space, ends stripped (pure: cached)."""
    return _WS.sub(" ", text).strip()


@lru_cache(maxsize=_TEXT_CACHE)
def _scrub_text(patterns: tuple[re.Pattern[str], ...], text: str) -> str:
    """``text`` with every match of each pattern removed, in order (pure: cached)."""
    for rx in patterns:
        text = rx.sub("", text)
    return text


def _require_str(x: Any, what: str) -> str:
    if not isinstance(x, str):
        raise TypeError(f"state key: {what} must be str, got {type(x).__name__}")
    return x


@dataclass(frozen=True)
class ExactKey:
    """The observation text itself; with ``normalize_ws`` whitespace runs collapse to one space and the ends are
    stripped, so re-wrapped text still merges."""

    normalize_ws: bool = True

    def __call__(self, obs: str, info: Mapping[str, Any]) -> str:
        _require_str(obs, "observation")
        return " ".join(obs.split()) if self.normalize_ws else obs  # = collapse \s+ runs, strip; 3x faster than re


@dataclass(frozen=True)
class ScrubbedKey:
    """Remove regex matches (volatile request ids, timestamps) before keying with ``base``.

    String values of ``info`` are scrubbed too, so ``ScrubbedKey(UNIQUE_OBS_PATTERN, FieldsKey(...))`` undoes the
    UniqueObs wrapper for field keys as well (the wrapper also edits ``info["description"]``).
    """

    patterns: str | Sequence[str] = (UNIQUE_OBS_PATTERN,)
    base: StateKeyFn = field(default_factory=ExactKey)

    def __post_init__(self) -> None:
        pats = (self.patterns,) if isinstance(self.patterns, str) else tuple(self.patterns)
        object.__setattr__(self, "patterns", pats)
        object.__setattr__(self, "_compiled", tuple(re.compile(p) for p in pats))

    def _scrub(self, text: str) -> str:
        return _scrub_text(self._compiled, text)  # type: ignore[attr-defined]

    def __call__(self, obs: str, info: Mapping[str, Any]) -> Hashable:
        obs = self._scrub(_require_str(obs, "observation"))
        info = {k: self._scrub(v) if isinstance(v, str) else v for k, v in info.items()}
        return self.base(obs, info)


def _hashable(v: Any) -> Hashable:
    if isinstance(v, (list, tuple)):
        return tuple(_hashable(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _hashable(x)) for k, x in v.items()))
    return v


@dataclass(frozen=True)
class FieldsKey:
    """A tuple of ``info`` fields, e.g. ("description", "inventory"): the room and what is carried, without the
    feedback line, so the same state merges whatever message came with it. Default key for TextWorld and KeyDoor
    [R]. Whitespace in string fields is normalised like ``ExactKey``."""

    fields: tuple[str, ...] = ("description", "inventory")

    def __post_init__(self) -> None:
        object.__setattr__(self, "fields", (self.fields,) if isinstance(self.fields, str) else tuple(self.fields))

    def __call__(self, obs: str, info: Mapping[str, Any]) -> Hashable:
        out = []
        for f in self.fields:
            if f not in info:
                raise KeyError(f"FieldsKey: info has no field {f!r} (fields present: {sorted(info)}); "
                               "request it from the environment or choose another key")
            v = info[f]
            out.append(_norm_ws(v) if isinstance(v, str) else _hashable(v))
        return tuple(out)


@dataclass(frozen=True)
class HashKey:
    """sha1 hex digest of the base key's text: constant-size keys for very long observations."""

    base: StateKeyFn = field(default_factory=ExactKey)

    def __call__(self, obs: str, info: Mapping[str, Any]) -> str:
        k = self.base(obs, info)
        text = k if isinstance(k, str) else repr(k)
        return hashlib.sha1(text.encode("utf-8")).hexdigest()


def cluster_similar(texts: Sequence[str], threshold: float = 0.95) -> list[int]:
    """Greedy similarity clusters (GiGPO's similarity option, verl-agent [C]).

    Each text joins the first existing cluster (in creation order) whose representative - its first member in
    input order - has ``difflib.SequenceMatcher(None, rep, text).ratio() >= threshold``; otherwise it founds a new
    cluster. Identical texts always share a cluster. Returns one cluster id (0, 1, ... in order of creation) per
    text. O(n x clusters) ratio calls: warns above ``SIMILARITY_WARN_ROWS`` texts.
    """
    if not (0.0 < threshold < 1.0):
        raise ValueError(f"cluster_similar: threshold must be in (0, 1), got {threshold}")
    if len(texts) > SIMILARITY_WARN_ROWS:
        warnings.warn(f"cluster_similar: {len(texts)} rows in one group (> {SIMILARITY_WARN_ROWS}); this makes "
                      "O(rows x clusters) SequenceMatcher calls", stacklevel=2)
    reps: list[str] = []
    exact: dict[str, int] = {}
    out: list[int] = []
    for text in texts:
        _require_str(text, "similarity key text")
        if text in exact:  # ratio(x, x) = 1: skip the matcher for exact repeats (same result, much faster)
            out.append(exact[text])
            continue
        cid = -1
        for j, rep in enumerate(reps):
            sm = difflib.SequenceMatcher(None, rep, text)  # default autojunk, as verl-agent
            if sm.real_quick_ratio() >= threshold and sm.quick_ratio() >= threshold and sm.ratio() >= threshold:
                cid = j
                break
        if cid < 0:
            cid = len(reps)
            reps.append(text)
        exact[text] = cid
        out.append(cid)
    return out


def key_from_spec(spec: str) -> tuple[StateKeyFn, float | None]:
    """Parse a command-line key spec (``agentmill g2po advantages --key``) into ``(key_fn, similarity)``.

    ``exact`` -> ``ExactKey()``; ``fields:description,inventory`` -> ``FieldsKey(...)``; ``scrub:REGEX`` ->
    ``ScrubbedKey(REGEX)`` over ``ExactKey`` (``scrub:unique`` uses ``UNIQUE_OBS_PATTERN``); ``hash`` ->
    ``HashKey()``; ``similar:0.95`` -> ``ExactKey()`` with GiGPO's similarity threshold 0.95 (a grouping pass, so it
    is returned separately and only ``gigpo_advantages`` uses it). Never evaluates the string.
    """
    kind, _, arg = spec.partition(":")
    if kind == "exact" and not arg:
        return ExactKey(), None
    if kind == "hash" and not arg:
        return HashKey(), None
    if kind == "fields" and arg:
        names = tuple(f.strip() for f in arg.split(",") if f.strip())
        if names:
            return FieldsKey(names), None
    if kind == "scrub" and arg:
        pattern = UNIQUE_OBS_PATTERN if arg == "unique" else arg
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"key spec {spec!r}: bad regex: {exc}") from exc
        return ScrubbedKey(pattern), None
    if kind == "similar" and arg:
        try:
            threshold = float(arg)
        except ValueError:
            threshold = float("nan")
        if not (0.0 < threshold < 1.0):
            raise ValueError(f"key spec {spec!r}: the similarity threshold must be a number in (0, 1)")
        return ExactKey(), threshold
    raise ValueError(f"unknown key spec {spec!r}; use exact | hash | fields:a,b | scrub:REGEX | scrub:unique | "
                     "similar:THRESHOLD")
