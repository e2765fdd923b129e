"""Deterministic fakes of the ``LM`` protocol for unit tests (``scripted:<preset>``).

Every backend has a scripted twin so that tests of methods, experiments, servers and the CLI run in milliseconds
without a model. "Tokens" here are whitespace-separated words.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from agentmill.lm.base import Completion, GenerateConfig, LMError, Prompt, apply_stops, plain_transcript

Responder = Callable[[str, np.random.Generator | None], str]


class ScriptedLM:
    """An LM whose reply is a function of the prompt text (and, when sampling, of a seeded RNG).

    ``responses`` may be a mapping from prompt substring to reply (first match wins), a callable
    ``f(prompt_text, rng_or_None) -> reply``, or a sequence of replies used in turn. With ``temperature > 0`` the
    callable receives ``np.random.default_rng([seed, i, j])`` for prompt ``i``, sample ``j``; greedy gets None.
    """

    def __init__(self, responses: Mapping[str, str] | Responder | Sequence[str], *, spec: str = "scripted:custom",
                 default: str = "ok") -> None:
        self.spec = spec
        self.default = default
        self._responses = responses
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
    """Answers the last arithmetic question in ``text``: correct when greedy, correct with probability 0.5 when
    sampling (else off by 1..9); ``"I don't know"`` when there is no question. Questions look like
    ``What is 12 + 7?`` or end a line with ``12 + 7 =``."""
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


PRESETS: dict[str, Callable[[], ScriptedLM]] = {
    "echo": lambda: ScriptedLM(lambda t, r: t.rsplit("user: ", 1)[-1].removesuffix("\nassistant:").strip(),
                               spec="scripted:echo"),
    "constant": lambda: ScriptedLM(lambda t, r: "ok", spec="scripted:constant"),
    "arith": lambda: ScriptedLM(arith_responder, spec="scripted:arith"),
    "fail": lambda: ScriptedLM(_fail, spec="scripted:fail"),
}


def load(rest: str, **_: object) -> ScriptedLM:
    if rest not in PRESETS:
        raise ValueError(f"unknown scripted preset {rest!r}; presets: {', '.join(sorted(PRESETS))}")
    return PRESETS[rest]()
