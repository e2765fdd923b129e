"""The request schema of the OpenAI-compatible server: parse a body and validate every field the server reads,
refusing anything malformed with a ``RequestError`` (a 4xx in OpenAI's error shape) before it reaches the
tokenizer or the engine.

Why each guard exists (from a hostile probe of the first server, issue 20):

- ``parse_body``: the JSON nesting depth is bounded (``MAX_JSON_DEPTH``) — a 200k-deep body raised
  ``RecursionError`` inside ``json.loads``, answered 500 and reset the client's pooled connection; ``NaN`` and
  ``Infinity`` (which Python's ``json`` accepts but JSON does not) are refused; strings must be valid Unicode (a
  ``"\\ud800"`` escape yields a lone surrogate that no tokenizer or UTF-8 encoder accepts).
- ``sampling_from``: every number is type-checked and must be finite and in range; ``seed`` must be a 64-bit
  integer (torch's generators refuse larger ones inside the engine thread).
- ``fit_max_tokens``: a ``max_tokens`` the context cannot hold is refused naming the limit (it was silently cut).
- ``prompt_chars``: the text a request would tokenise is measured before tokenising, so a 1 MB prompt is refused
  in microseconds instead of costing seconds of tokenizer time for a prompt the context cannot hold anyway.
"""

from __future__ import annotations

import json
import math
from typing import Any

from agentmill.lm.engine import SamplingParams
from agentmill.serve.errors import RequestError

MAX_JSON_DEPTH = 64
"""Deepest nesting of objects and arrays accepted in a body. Real requests nest JSON Schemas inside ``tools``
(body → tools → [i] → function → parameters → properties → ... ), a handful of levels per schema level; 64 leaves
room for schemas 25 levels deep while staying far below Python's recursion limit for the code that walks them."""

PROMPT_CHARS_PER_TOKEN = 32
"""Default prompt-size cap in characters per token of context. Ordinary text runs 3-6 characters per SmolLM2
token; only runs of whitespace or punctuation reach 64 (its longest token is 81 characters). A prompt averaging
over 32 would be refused by the context check anyway unless it is almost all such runs; at a 2048-token context
the cap is 65,536 characters, which the SmolLM2 tokenizer encodes in 0.05-0.2 s (measured on this host, idle and
under load); 1 MB took 1.4-3.8 s."""

UNSUPPORTED = ("functions", "function_call", "response_format", "logprobs", "top_logprobs")
DEFAULT_MAX_TOKENS = 128
SEED_RANGE = (-(1 << 63), 1 << 63)


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def parse_body(raw: bytes) -> dict[str, Any]:
    """A request body as a JSON object, with its depth and strings checked (module doc)."""
    try:
        body = json.loads(raw, parse_constant=_refuse_constant)
    except RecursionError:
        raise RequestError(f"request body nests deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as e:                       # JSONDecodeError, UnicodeDecodeError, NaN/Infinity, >4300 digits
        raise RequestError(f"request body is not valid JSON: {e}") from None
    if not isinstance(body, dict):
        raise RequestError("request body must be a JSON object")
    _check_tree(body)
    return body


def _check_tree(body: Any) -> None:
    """Depth at most ``MAX_JSON_DEPTH`` and every string (keys included) encodable as UTF-8; iterative, so the
    check itself cannot overflow the stack."""
    stack = [(body, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_JSON_DEPTH:
            raise RequestError(f"request body nests deeper than {MAX_JSON_DEPTH} levels")
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for k, v in items:
            for s in (k, v):
                if isinstance(s, str) and not s.isascii():
                    try:
                        s.encode("utf-8")
                    except UnicodeEncodeError:
                        raise RequestError("request body holds a string that is not valid Unicode (a lone "
                                           "surrogate escape such as \\ud800)") from None
            if isinstance(v, dict | list):
                stack.append((v, depth + 1))


def prompt_chars(obj: Any) -> int:
    """Characters a request would feed the tokenizer: every string under ``obj`` plus 32 per object or array (the
    chat template's per-message markup), so thousands of empty messages count too."""
    total, stack = 0, [obj]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            total += len(node)
        elif isinstance(node, dict | list):
            total += 32
            stack.extend(node.values() if isinstance(node, dict) else node)
    return total


def _number(body: dict[str, Any], name: str, default: Any, *, integer: bool = False) -> Any:
    v = body.get(name)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, int if integer else int | float):
        raise RequestError(f"'{name}' must be {'an integer' if integer else 'a number'}", name)
    if isinstance(v, float) and not math.isfinite(v):
        raise RequestError(f"'{name}' must be finite", name)
    return v


def _flag(body: dict[str, Any], name: str, where: str | None = None) -> bool:
    v = body.get(name)
    if v is not None and not isinstance(v, bool):
        raise RequestError(f"'{where or name}' must be a boolean", where or name)
    return bool(v)


def sampling_from(body: dict[str, Any]) -> SamplingParams:
    """Validate the OpenAI sampling fields; anything that would change the distribution unsupported → 400.
    ``max_tokens`` is checked for type here and against the context by :func:`fit_max_tokens`."""
    for f in UNSUPPORTED:
        if body.get(f) not in (None, [], {}, False):
            raise RequestError(f"'{f}' is not supported by this server", f)
    if body.get("logit_bias") not in (None, {}):
        raise RequestError("'logit_bias' is not supported by this server", "logit_bias")
    for f in ("presence_penalty", "frequency_penalty"):
        if _number(body, f, 0) != 0:
            raise RequestError(f"'{f}' must be 0 on this server", f)
    if _number(body, "n", 1, integer=True) != 1:
        raise RequestError("only n = 1 is supported", "n")
    requested_max_tokens(body)
    stop = body.get("stop") or ()
    if isinstance(stop, str):
        stop = (stop,)
    if not isinstance(stop, list | tuple) or len(stop) > 4 or not all(isinstance(s, str) and s for s in stop):
        raise RequestError("'stop' must be a non-empty string or a list of at most 4", "stop")
    temperature = _number(body, "temperature", 1.0)
    top_p = _number(body, "top_p", 1.0)
    top_k = _number(body, "top_k", 0, integer=True)
    seed = _number(body, "seed", None, integer=True)
    if not 0 <= temperature <= 2:
        raise RequestError(f"'temperature' must be in [0, 2], got {temperature}", "temperature")
    if not 0 < top_p <= 1:
        raise RequestError(f"'top_p' must be in (0, 1], got {top_p}", "top_p")
    if top_k < -1:
        raise RequestError(f"'top_k' must be >= 0 (or -1 for no limit), got {top_k}", "top_k")
    if seed is not None and not SEED_RANGE[0] <= seed < SEED_RANGE[1]:
        raise RequestError("'seed' must be a 64-bit signed integer", "seed")
    # The engine seeds torch generators with the seed and the DSpark drafter with seed * 7919 + 104729, both of
    # which must fit 64 bits; folding to 32 bits keeps every seed deterministic and leaves 0 <= seed < 2^32 as is.
    return SamplingParams(temperature=float(temperature), top_p=float(top_p), top_k=max(top_k, 0),
                          seed=None if seed is None else seed % (1 << 32), max_tokens=DEFAULT_MAX_TOKENS,
                          stop=tuple(stop))


def requested_max_tokens(body: dict[str, Any]) -> tuple[int | None, str]:
    """The client's ``max_completion_tokens`` (preferred, as on OpenAI) or ``max_tokens``, and which one it was."""
    name = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    n = _number(body, name, None, integer=True)
    if n is not None and n < 1:
        raise RequestError(f"'{name}' must be at least 1, got {n}", name)
    return n, name


def fit_max_tokens(body: dict[str, Any], n_prompt: int, context: int, param: str) -> int:
    """``max_tokens`` for a prompt of ``n_prompt`` tokens: the client's value when prompt + completion fit the
    model's ``context``, else 400 naming the limit (OpenAI's and vLLM's behaviour; cutting it silently hid why an
    answer stopped). Omitted, it is ``DEFAULT_MAX_TOKENS`` or whatever room the context has left."""
    if n_prompt >= context:
        raise RequestError(f"this model's maximum context length is {context} tokens, but the prompt has {n_prompt} "
                           "tokens (no room for a completion)", param)
    n, name = requested_max_tokens(body)
    if n is None:
        return min(DEFAULT_MAX_TOKENS, context - n_prompt)
    if n_prompt + n > context:
        raise RequestError(f"this model's maximum context length is {context} tokens, but {n_prompt + n} were "
                           f"requested ({n_prompt} in the prompt, {n} for '{name}'); lower '{name}' to at most "
                           f"{context - n_prompt}", name)
    return n


def stream_flags(body: dict[str, Any]) -> tuple[bool, bool]:
    """(``stream``, ``stream_options.include_usage``), each a boolean or absent."""
    stream = _flag(body, "stream")
    so = body.get("stream_options")
    if so is not None and not isinstance(so, dict):
        raise RequestError("'stream_options' must be an object", "stream_options")
    include_usage = _flag(so or {}, "include_usage", "stream_options.include_usage")
    return stream, include_usage


def check_model(body: dict[str, Any], served_model_name: str) -> None:
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise RequestError("'model' must be a string", "model")
    if model not in (None, served_model_name):
        raise RequestError(f"model {model!r} does not exist; this server serves {served_model_name!r}", "model", 404,
                           "not_found_error", "model_not_found")


def completion_prompt(body: dict[str, Any], *, vocab: int, context: int, max_chars: int) -> str | list[int]:
    """The ``/v1/completions`` prompt as text to tokenise or as token ids, with the fields this server does not
    implement refused; sizes are checked before any tokenising."""
    if body.get("echo") not in (None, False):
        raise RequestError("'echo' is not supported", "echo")
    if _number(body, "best_of", 1, integer=True) != 1:
        raise RequestError("only best_of = 1 is supported", "best_of")
    if body.get("suffix") is not None:
        raise RequestError("'suffix' is not supported", "suffix")
    p = body.get("prompt")
    if isinstance(p, list) and len(p) == 1 and isinstance(p[0], str):
        p = p[0]
    if isinstance(p, str) and p:
        if len(p) > max_chars:
            raise RequestError(f"'prompt' is {len(p)} characters; this server tokenises at most {max_chars} (the "
                               f"model's context is {context} tokens)", "prompt")
        return p
    if isinstance(p, list) and p and all(isinstance(t, int) and not isinstance(t, bool) for t in p):
        if len(p) >= context:
            raise RequestError(f"this model's maximum context length is {context} tokens, but the prompt has "
                               f"{len(p)} tokens", "prompt")
        if any(t < 0 or t >= vocab for t in p):
            raise RequestError(f"token ids must be in [0, {vocab})", "prompt")
        return p
    raise RequestError("'prompt' must be a non-empty string, one-element list of strings, or list of token ids",
                       "prompt")
