"""LLM summary compaction (docs/methods/constraint_rot.md "Use it" 3): a language model summarises the prefix; the
summary replaces it.

This is what harness auto-compaction does (LangChain ``SummarizationMiddleware``, LangMem, Codex, Claude Code):

1. **Cut.** Keep the leading system messages and the last ``keep_last`` messages (the tail never starts inside a
   tool-call block, ``base.split_prefix_tail``); the span between is the *prefix*.
2. **Pre-trim.** The prefix is trimmed to its last ``trim_input_tokens`` tokens, as LangChain's
   ``trim_tokens_to_summarize`` does (``trim_messages(strategy="last", allow_partial=True)``): whole tool-call
   blocks from the end while they fit, then the end of one more plain message if any budget is left. Whatever the
   trim removes the summariser never sees — ``CompactionResult.summariser_input`` holds exactly what it received,
   so the caller can fill ``saw_rule_in_input``.
3. **Prompt.** The received messages are rendered as ``Role: text`` lines into the style's prompt (table below).
   ``running`` folds a prior summary in: when the received messages contain a summary message, the prompt asks
   to *extend* that summary with the newer messages.
4. **Decode.** One greedy chat call, ``max_new_tokens = ceil(ratio · input_tokens)`` (at least 32), where
   ``input_tokens`` counts the received messages with ``counter``. ``no_repeat_ngram_size=4`` over the generated
   tokens (SmolLM2 loops without it [I]; the prompt does not count, so the rule can still be quoted verbatim).
5. **Insert.** ``sectioned*`` outputs lose their private ``<analysis>`` scratchpad (and keep only the
   ``<summary>`` body when one is tagged). The summary enters as one user-role message labelled
   ``origin="summary"``, ``trusted=False``: with the announcing prefix ``base.SUMMARY_PREFIX`` for
   ``goal_extract``/``running``, with a continuation preface for ``handoff``/``sectioned*``.

Styles and their prompts (``prompts/<style>.txt``, the project's own wording reproducing the *structure* each
harness uses; no third-party prompt text is vendored): ``goal_extract`` (LangChain), ``running``
(LangGraph/LangMem), ``handoff`` (Codex), ``sectioned``/``sectioned_secure`` (Claude Code, as reported by
community extractions; unverified), ``constraint_aware`` (project baseline). With ``prompt_source="auto"`` and
LangChain installed, ``goal_extract`` uses LangChain's own ``DEFAULT_SUMMARY_PROMPT`` loaded at run time.
``details["prompt_source"]`` and ``details["prompt_sha"]`` (sha256 of the template) say which prompt was used.

**Failure.** If the summariser raises (model error, context overflow, a dead endpoint), the context is returned
unchanged — the prefix is kept, never silently dropped — with ``summary_text=None`` and
``details["summary_failed"] = True`` plus the error text; a failure is never cached. A run that treats a failed
compaction as "no compaction" must read that flag.

**Name and label.** ``name`` is ``llm_summary:<style>`` (it is part of ``config_hash``, hence of every cache
key and result row); ``label`` is ``llm_summary:<style>@<lm spec>``, the display key that keeps one style on two
LMs apart.

**Cache.** With a :class:`~agentmill.methods.constraint_rot.summary_cache.SummaryCache`, the raw model output is
stored under ``sha256(config_hash, input messages, keep_last)``; a hit skips the model call (PF-6).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import math
import re
from dataclasses import replace
from importlib.resources import files
from typing import Any, Literal

from agentmill.core.types import Message
from agentmill.lm.base import GenerateConfig
from agentmill.methods.constraint_rot.compactors.base import (CONTINUATION_PREFACE, HANDOFF_PREFACE, SUMMARY_PREFIX,
                                                             BaseCompactor, CompactionResult,
                                                             block_starts, check_keep_last, last_step,
                                                             split_prefix_tail, summary_message)
from agentmill.methods.constraint_rot.messages import as_counter, count_tokens, message_text, origin
from agentmill.methods.constraint_rot.summary_cache import SummaryCache, cache_key

SummaryStyle = Literal["goal_extract", "running", "handoff", "sectioned", "sectioned_secure", "constraint_aware"]
STYLES: tuple[str, ...] = ("goal_extract", "running", "handoff", "sectioned", "sectioned_secure",
                           "constraint_aware")
# [R] (docs/methods/constraint_rot.md "Hyperparameters"): a floor so that a short prefix still gets a readable summary
MIN_NEW_TOKENS = 32
NO_REPEAT_NGRAM = 4  # docs/methods/constraint_rot.md "Use it" 3 [I]: SmolLM2 loops in greedy decoding otherwise
RUNNING_SPLIT = "\n%%\n"  # running.txt: the fresh-summary template, this line, the extend-a-summary template

# How the summary is announced when it enters the context (docs/methods/constraint_rot.md "Use it" 3).
# goal_extract/running: the fixed announcing prefix of the deterministic summarisers. handoff/sectioned*: our own
# continuation prefaces, in the manner of Codex's handoff prefix and Claude Code's "continued session" preface.
PREFACES: dict[str, str] = {"goal_extract": SUMMARY_PREFIX, "running": SUMMARY_PREFIX,
                            "handoff": HANDOFF_PREFACE, "sectioned": CONTINUATION_PREFACE,
                            "sectioned_secure": CONTINUATION_PREFACE, "constraint_aware": SUMMARY_PREFIX}

LANGCHAIN_PROMPT = ("langchain.agents.middleware.summarization", "DEFAULT_SUMMARY_PROMPT")


# ------------------------------------------------------------------------------------------------------ prompts
def project_prompt(style: str) -> str:
    """The project's template for ``style`` (``{transcript}``; ``running`` also ``{summary}``)."""
    check_style(style)
    return (files("agentmill.methods.constraint_rot") / "prompts" / f"{style}.txt").read_text(encoding="utf-8")


def langchain_prompt() -> tuple[str, str] | None:
    """(LangChain's summary prompt constant, ``langchain==<version>``) if installed and usable, else None."""
    module, attr = LANGCHAIN_PROMPT
    try:
        text = getattr(importlib.import_module(module), attr)
        text.format(messages="")  # usable the way LangChain fills it
        return text, f"langchain=={importlib.metadata.version('langchain')}"
    except Exception:  # noqa: BLE001 - absent, renamed or reshaped: fall back to the project's paraphrase
        return None


def check_style(style: str) -> str:
    if style not in STYLES:
        raise ValueError(f"LLMSummary.style must be one of {', '.join(STYLES)}; got {style!r}")
    return style


def render_transcript(messages: list[Message]) -> str:
    """``Role: text`` lines (tool results as ``Tool (name): text``; tool calls as ``name {json}`` lines)."""
    lines = []
    for m in messages:
        who = f"Tool ({m.name})" if m.role == "tool" and m.name else m.role.capitalize()
        lines.append(f"{who}: {message_text(m)}")
    return "\n".join(lines)


def strip_scratchpad(text: str) -> tuple[str, bool]:
    """Drop ``<analysis>…</analysis>`` (closed or left open before ``<summary>``/the end) and keep the body of
    ``<summary>…</summary>`` when tagged; (text, whether a scratchpad was found)."""
    t, n_closed = re.subn(r"<analysis>.*?</analysis>", "", text, flags=re.S)
    t, n_open = re.subn(r"<analysis>.*?(?=<summary>|\Z)", "", t, flags=re.S)
    body = re.search(r"<summary>(.*?)(?:</summary>|\Z)", t, flags=re.S)
    return (body.group(1) if body else t).strip(), bool(n_closed or n_open)


def strip_preface(text: str) -> str:
    """A summary message's text without its announcing line (to fold a prior summary into ``running``)."""
    for p in sorted(set(PREFACES.values()), key=len, reverse=True):
        if text.startswith(p):
            return text[len(p):].lstrip("\n")
    return text


# ------------------------------------------------------------------------------------------------------ trimming
def _tail_that_fits(text: str, budget: int, counter: Any) -> str:
    """The longest word-aligned suffix of ``text`` with at most ``budget`` tokens ('' if not even one word)."""
    starts = [m.start() for m in re.finditer(r"\S+", text)]
    lo, hi = 0, len(starts)  # smallest k with count(text[starts[k]:]) <= budget; hi = nothing kept
    while lo < hi:
        mid = (lo + hi) // 2
        if counter.count(text[starts[mid]:]) <= budget:
            hi = mid
        else:
            lo = mid + 1
    return text[starts[lo]:] if lo < len(starts) else ""


def trim_to_last_tokens(messages: list[Message], budget: int | None, counter: Any) -> tuple[list[Message], bool]:
    """The last ``budget`` tokens of ``messages``: whole blocks from the end while they fit, then the end of the
    preceding message when it is plain text (a tool-call block is never cut open). (messages, partial?)"""
    if budget is None:
        return list(messages), False
    starts = block_starts(messages)
    bounds = list(zip(starts, [*starts[1:], len(messages)]))
    used, keep_from = 0, len(messages)
    for lo, hi in reversed(bounds):
        t = count_tokens(messages[lo:hi], counter)
        if used + t > budget:
            break
        used, keep_from = used + t, lo
    kept = list(messages[keep_from:])
    if keep_from == 0 or used >= budget:
        return kept, False
    prev = messages[keep_from - 1]
    if prev.role == "tool" or prev.tool_calls:
        return kept, False
    tail = _tail_that_fits(prev.content, budget - used, counter)
    return ([replace(prev, content=tail)] + kept, True) if tail else (kept, False)


# ----------------------------------------------------------------------------------------------------- compactor
class LLMSummary(BaseCompactor):
    """Summarise the prefix with ``lm`` in one of the harness prompt styles (see the module docstring).

    ``lm`` is any ``agentmill.lm`` model (``load_lm("hf:smollm2")``, ``openai:…``, ``scripted:…``); ``counter``
    counts tokens for the trim, the budget and the achieved ratio (default: the SmolLM2 tokenizer).
    ``prompt_source``: ``"auto"`` loads LangChain's prompt for ``goal_extract`` where installed, ``"project"``
    always uses the project's paraphrase. ``calls`` counts model calls (cache hits excluded).
    """

    def __init__(self, lm: Any, style: SummaryStyle = "goal_extract", ratio: float = 0.25, keep_last: int = 4,
                 trim_input_tokens: int | None = 4000, cache: SummaryCache | None = None, counter: Any = None, *,
                 prompt_source: Literal["auto", "project"] = "auto"):
        if not callable(getattr(lm, "generate", None)):
            raise ValueError(f"LLMSummary.lm must be an agentmill LM (with generate), got {type(lm).__name__}")
        check_style(style)
        if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 < ratio <= 1:
            raise ValueError(f"LLMSummary.ratio must be a number in (0, 1], got {ratio!r}")
        check_keep_last(keep_last)
        if trim_input_tokens is not None and (isinstance(trim_input_tokens, bool)
                                              or not isinstance(trim_input_tokens, int) or trim_input_tokens < 1):
            raise ValueError(f"LLMSummary.trim_input_tokens must be None or an integer >= 1, "
                             f"got {trim_input_tokens!r}")
        if prompt_source not in ("auto", "project"):
            raise ValueError(f"LLMSummary.prompt_source must be 'auto' or 'project', got {prompt_source!r}")
        if cache is not None and not isinstance(cache, SummaryCache):
            raise ValueError(f"LLMSummary.cache must be a SummaryCache or None, got {type(cache).__name__}")
        loaded = langchain_prompt() if style == "goal_extract" and prompt_source == "auto" else None
        self.template, self.prompt_source = loaded if loaded else (project_prompt(style), "project")
        self.prompt_sha = hashlib.sha256(self.template.encode()).hexdigest()
        self.lm, self.style, self.ratio, self.keep_last = lm, style, float(ratio), keep_last
        self.trim_input_tokens, self.cache, self.calls = trim_input_tokens, cache, 0
        self.no_repeat_ngram_size = NO_REPEAT_NGRAM
        self.lm_spec: str = getattr(lm, "spec", type(lm).__name__)
        # ``name`` enters ``config_hash`` and through it every summary-cache key and ``--resume`` key, so it stays
        # ``llm_summary:<style>``; ``label`` adds the LM so two summarisers of one style on different LMs keep
        # apart in tables (metrics.compactor_groups does the same from result rows).
        self.name = f"llm_summary:{style}"
        self.label = f"{self.name}@{self.lm_spec}"
        counter = as_counter(counter)
        super().__init__(counter, lm=self.lm_spec, style=style, ratio=self.ratio,
                         keep_last=keep_last, trim_input_tokens=trim_input_tokens, prompt_sha=self.prompt_sha,
                         counter_name=counter.name, no_repeat_ngram_size=self.no_repeat_ngram_size)

    # ------------------------------------------------------------------------------------------------ prompt
    def build_prompt(self, received: list[Message]) -> tuple[str, bool]:
        """The prompt text for the messages the summariser received; (text, folded a prior summary?)."""
        if self.prompt_source != "project":  # LangChain's constant, filled the way LangChain fills it
            return self.template.format(messages=render_transcript(received)).rstrip(), False
        if self.style == "running":
            fresh, extend = self.template.split(RUNNING_SPLIT, 1)
            prior = max((i for i, m in enumerate(received) if origin(m) == "summary"), default=None)
            if prior is not None:
                newer = received[:prior] + received[prior + 1:]
                text = (extend.replace("{summary}", strip_preface(received[prior].content))
                        .replace("{transcript}", render_transcript(newer)))
                return text.strip(), True
            return fresh.replace("{transcript}", render_transcript(received)).strip(), False
        return self.template.replace("{transcript}", render_transcript(received)).strip(), False

    def max_new_tokens(self, input_tokens: int) -> int:
        """``ceil(ratio · input_tokens)``, at least 32 (rounded first so 0.1 · 30 is 3, not 4)."""
        return max(MIN_NEW_TOKENS, math.ceil(round(self.ratio * input_tokens, 9)))

    def _generate(self, prompt: str, max_new: int) -> dict[str, Any]:
        config = GenerateConfig(max_new_tokens=max_new, temperature=0.0,
                                no_repeat_ngram_size=self.no_repeat_ngram_size)
        self.calls += 1
        c = self.lm.generate([[Message("user", prompt)]], config)[0]
        return {"raw": c.text, "finish_reason": c.finish_reason, "completion_tokens": c.completion_tokens}

    # ----------------------------------------------------------------------------------------------- compact
    def compact(self, messages: list[Message], *, keep_last: int | None = None) -> CompactionResult:
        keep_last = check_keep_last(self.keep_last if keep_last is None else keep_last)
        sys_end, tail = split_prefix_tail(messages, keep_last)
        prefix = list(messages[sys_end:tail])
        base = {"style": self.style, "prompt_source": self.prompt_source, "prompt_sha": self.prompt_sha}
        if not prefix:
            return self._result(messages, list(messages), summary_text=None, summariser_input=prefix, **base)
        received, partial = trim_to_last_tokens(prefix, self.trim_input_tokens, self.counter)
        input_tokens = count_tokens(received, self.counter)
        prompt, folded = self.build_prompt(received)
        max_new = self.max_new_tokens(input_tokens)
        facts = {**base, "input_tokens": input_tokens, "max_new_tokens": max_new, "trimmed_messages":
                 len(prefix) - len(received) + int(partial), "partial_message": partial, "folded_prior": folded,
                 "no_repeat_ngram_size": self.no_repeat_ngram_size}
        key = cache_key(self.config_hash, messages, keep_last=keep_last)
        out = self.cache.get(key) if self.cache is not None else None
        facts["cache"] = None if self.cache is None else ("hit" if out is not None else "miss")
        if out is None:
            try:
                out = self._generate(prompt, max_new)
            except Exception as e:  # noqa: BLE001 - any summariser failure keeps the prefix (documented above)
                return self._result(messages, list(messages), summary_text=None, summariser_input=received,
                                    **facts, summary_failed=True, error=f"{type(e).__name__}: {e}")
            if self.cache is not None:
                self.cache.put(key, out)
        text, stripped = (strip_scratchpad(out["raw"]) if self.style.startswith("sectioned")
                          else (out["raw"].strip(), False))
        summary_tokens = self.counter.count(text)
        note = summary_message(text, step=last_step(prefix))
        if PREFACES[self.style] != SUMMARY_PREFIX:
            note = replace(note, content=f"{PREFACES[self.style]}\n{text}")
        after = list(messages[:sys_end]) + [note] + list(messages[tail:])
        return self._result(messages, after, summary_text=text, summariser_input=received, **facts,
                            summary_failed=False, finish_reason=out["finish_reason"],
                            scratchpad_stripped=stripped, summary_tokens=summary_tokens,
                            achieved_ratio=summary_tokens / input_tokens if input_tokens else None)
