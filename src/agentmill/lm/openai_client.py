"""``openai:<model>@<base_url>`` — any OpenAI-compatible endpoint through the official ``openai`` SDK.

vLLM, llama.cpp's server, Ollama, hosted APIs and agentmill's own server all speak this protocol, so every
experiment that only needs a black-box LM runs against them unchanged. The key comes from ``OPENAI_API_KEY``
(local servers accept any value); it is never logged or written to a record.

Conversations go to ``/v1/chat/completions``, raw strings to ``/v1/completions``. Transient failures
(connection errors, timeouts, 429, 5xx) are retried a bounded number of times with exponential backoff; every
final failure is an ``LMError`` that says what went wrong and what to do.

Token logprobs of generated text are requested (``logprobs=True`` for chat, ``logprobs=1`` for completions); a
server that refuses the field with 400/422 is asked again without it, and once that works the client stops
asking (``Completion.logprobs`` is then empty).
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlparse

import numpy as np

from agentmill.core.types import Message
from agentmill.lm.base import Completion, GenerateConfig, LMError, MissingExtraError, Prompt, apply_stops

DEFAULT_TIMEOUT = 60.0
TIMEOUT_ENV = "AGENTMILL_OPENAI_TIMEOUT"
"""Seconds a call may take before it is retried, when the caller sets none (default 60). A CPU-only local server
prefilling a long agent history needs more: a retry re-sends the request while the server still works on the
abandoned one."""
DEFAULT_RETRIES = 3


def parse_openai_spec(rest: str) -> tuple[str, str]:
    """``<model>@<base_url>`` -> (model, base_url); the base URL is mandatory (nothing is contacted by default)."""
    model, sep, url = rest.rpartition("@")
    if not sep or not model or not url:
        raise ValueError(f"openai spec must be openai:<model>@<base_url>, e.g. "
                         f"openai:gpt-4o-mini@http://127.0.0.1:8000/v1; got openai:{rest}")
    u = urlparse(url)
    if u.scheme not in ("http", "https") or not u.netloc:
        raise ValueError(f"openai spec: base URL {url!r} must be an http(s) URL such as http://127.0.0.1:8000/v1")
    return model, url.rstrip("/")


class OpenAILM:
    """A black-box ``LM`` backed by an OpenAI-compatible server."""

    def __init__(self, model: str, base_url: str, *, timeout: float | None = None,
                 max_retries: int = DEFAULT_RETRIES, backoff: float = 0.5, api_key: str | None = None,
                 extra_body: dict[str, Any] | None = None) -> None:
        try:
            import openai
        except ImportError as e:
            raise MissingExtraError("openai", "the openai: backend") from e
        self._openai = openai
        if timeout is None:
            timeout = float(os.environ.get(TIMEOUT_ENV) or DEFAULT_TIMEOUT)
        if not timeout > 0:
            raise ValueError(f"OpenAILM timeout must be > 0 seconds, got {timeout} (from {TIMEOUT_ENV}?)")
        self.model, self.base_url = model, base_url
        self.spec = f"openai:{model}@{base_url}"
        self.max_retries, self.backoff = max_retries, backoff
        # SDK retries are off: we retry ourselves so the count and the final message are ours.
        self.client = openai.OpenAI(base_url=base_url, api_key=api_key or os.environ.get("OPENAI_API_KEY", "EMPTY"),
                                    timeout=timeout, max_retries=0)
        # Server-specific request fields sent with every call (e.g. a reasoning toggle such as vLLM's
        # {"chat_template_kwargs": {"enable_thinking": false}}); the OpenAI SDK merges them into the JSON body.
        self.extra_body = dict(extra_body) if extra_body else None
        self.info = {"spec": self.spec, "timeout": timeout, "max_retries": max_retries,
                     **({"extra_body": self.extra_body} if self.extra_body else {})}
        self._ask_token_logprobs = True

    # -------------------------------------------------------------------------------------------- errors
    def _call(self, fn: Any, **kw: Any) -> Any:
        oa = self._openai
        delay = self.backoff
        for attempt in range(self.max_retries + 1):
            try:
                return fn(**kw)
            except (oa.APIConnectionError, oa.APITimeoutError, oa.RateLimitError, oa.InternalServerError) as e:
                if attempt == self.max_retries:
                    raise LMError(self._explain(e, attempt + 1)) from e
                # Full jitter in [0.5, 1.5] × the exponential delay: clients that failed together retry apart.
                time.sleep(delay * (0.5 + random.random()))
                delay *= 2
            except oa.APIStatusError as e:
                raise LMError(self._explain(e, attempt + 1)) from e
        raise AssertionError("unreachable")

    def _refused(self, e: LMError) -> bool:
        """Whether ``e`` is the server refusing the request's fields (400/422), not a transport or auth failure."""
        return isinstance(e.__cause__, (self._openai.BadRequestError, self._openai.UnprocessableEntityError))

    def _create(self, fn: Any, token_logprobs: dict[str, Any], **kw: Any) -> Any:
        """``fn(**kw)`` asking for generated-token logprobs unless this server has refused them before."""
        if self._ask_token_logprobs:
            try:
                return self._call(fn, **kw, **token_logprobs)
            except LMError as e:
                if not self._refused(e):
                    raise
            resp = self._call(fn, **kw)  # a second refusal is about something else: let it raise
            self._ask_token_logprobs = False
            return resp
        return self._call(fn, **kw)

    def _explain(self, e: Exception, attempts: int) -> str:
        oa = self._openai
        where = f"{self.base_url} (model {self.model!r})"
        if isinstance(e, oa.APITimeoutError):
            return (f"{where} did not answer within the timeout after {attempts} attempt(s); raise the timeout or "
                    "check the server")
        if isinstance(e, oa.APIConnectionError):
            return f"could not connect to {where} after {attempts} attempt(s): is the server running?"
        if isinstance(e, oa.AuthenticationError):
            return f"{where} rejected the API key (401): set OPENAI_API_KEY"
        if isinstance(e, oa.NotFoundError):
            return f"{where}: not found (404): check the model name and that the base URL ends in /v1"
        if isinstance(e, oa.RateLimitError):
            return f"{where} kept rate-limiting (429) after {attempts} attempt(s); slow down or raise limits"
        if isinstance(e, oa.APIStatusError):
            return f"{where} answered HTTP {e.status_code} after {attempts} attempt(s): {_short(e)}"
        return f"{where}: {type(e).__name__}: {e}"

    # ----------------------------------------------------------------------------------------- generate
    def generate(self, prompts: Sequence[Prompt], config: GenerateConfig = GenerateConfig()) -> list[Completion]:
        out: list[Completion] = []
        for p in prompts:
            out.extend(self._chat(p, config) if not isinstance(p, str) else self._complete(p, config))
        return out

    def _common(self, c: GenerateConfig) -> dict[str, Any]:
        kw: dict[str, Any] = {"model": self.model, "max_tokens": c.max_new_tokens, "temperature": c.temperature,
                              "top_p": c.top_p, "n": c.n}
        if c.stop:
            kw["stop"] = list(c.stop)[:4]  # the API accepts at most 4 stop strings
        if c.seed is not None:
            kw["seed"] = c.seed
        if self.extra_body:
            kw["extra_body"] = self.extra_body
        return kw

    def _chat(self, prompt: Sequence[Message], c: GenerateConfig) -> list[Completion]:
        msgs = [(m if isinstance(m, Message) else Message.from_dict(m)).to_dict() for m in prompt]
        resp = self._create(self.client.chat.completions.create, {"logprobs": True}, messages=msgs,
                            **self._common(c))
        out = []
        for ch in sorted(resp.choices, key=lambda x: x.index):
            lps = tuple(t.logprob for t in (ch.logprobs.content or [])) if ch.logprobs else ()
            done = self._finish(ch.message.content or "", ch.finish_reason, lps, resp, c)
            reasoning = getattr(ch.message, "reasoning_content", None)  # servers that split the thinking off
            if reasoning:
                done.meta["reasoning"] = str(reasoning)
            out.append(done)
        return out

    def _complete(self, prompt: str, c: GenerateConfig) -> list[Completion]:
        resp = self._create(self.client.completions.create, {"logprobs": 1}, prompt=prompt, **self._common(c))
        out = []
        for ch in sorted(resp.choices, key=lambda x: x.index):
            lps = tuple(ch.logprobs.token_logprobs or ()) if ch.logprobs else ()
            out.append(self._finish(ch.text or "", ch.finish_reason, lps, resp, c))
        return out

    @staticmethod
    def _finish(text: str, reason: str | None, lps: tuple[float, ...], resp: Any, c: GenerateConfig) -> Completion:
        text, hit = apply_stops(text, c)  # stop_regex (and >4 stop strings) are applied client-side
        finish = "stop" if hit or reason == "stop" else ("length" if reason == "length" else "eos")
        usage = getattr(resp, "usage", None)
        return Completion(text=text, finish_reason=finish, logprobs=lps,
                          prompt_tokens=int(getattr(usage, "prompt_tokens", 0) or 0))

    def logprobs(self, prompt: Prompt, continuation: str) -> np.ndarray:
        """Log-probabilities of ``continuation``'s tokens via ``/v1/completions`` with ``echo=True, logprobs=1``.

        Tokens are attributed by their start offset: those starting inside ``continuation`` count, so a token
        straddling the prompt/continuation boundary is dropped (start ``continuation`` at a token boundary, e.g.
        with its leading space). ``max_tokens=0`` is tried first; a server that refuses it gets ``max_tokens=1``
        and the generated token is dropped by offset. Servers without prompt logprobs raise ``LMError``.
        """
        if not isinstance(prompt, str):
            raise LMError(f"{self.spec}: logprobs of a chat prompt need the server's chat template; pass the "
                          "rendered text instead")
        full = prompt + continuation
        lacks = (f"{self.spec}: the endpoint lacks prompt logprobs (/v1/completions with echo=True, logprobs=1); "
                 "use a server that supports them (e.g. vLLM) or a white-box backend (hf:, tiny:)")
        refusal: LMError | None = None
        for max_tokens in (0, 1):
            try:
                resp = self._call(self.client.completions.create, model=self.model, prompt=full,
                                  max_tokens=max_tokens, echo=True, logprobs=1)
                break
            except LMError as e:
                if not self._refused(e):
                    raise
                refusal = e
        else:
            raise LMError(f"{lacks}: {refusal}") from refusal
        lp = resp.choices[0].logprobs if resp.choices else None
        if lp is None or not lp.token_logprobs or lp.text_offset is None:
            raise LMError(f"{lacks}: it answered without them")
        return np.array([x for x, off in zip(lp.token_logprobs, lp.text_offset)
                         if len(prompt) <= off < len(full) and x is not None], dtype=np.float64)


def _short(e: Exception) -> str:
    body = getattr(e, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])[:300]
    return str(e)[:300]


def load(rest: str, **kw: Any) -> OpenAILM:
    model, url = parse_openai_spec(rest)
    return OpenAILM(model, url, **kw)
