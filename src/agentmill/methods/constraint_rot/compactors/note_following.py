"""A deterministic summariser that obeys notes addressed to it — the stand-in for an injection-susceptible LLM
summariser (docs/methods/constraint_rot.md "Use it" 3; tests and the deterministic CR-8 arm only).

It keeps every modality-cue sentence and the last user request, except what a "note to the summariser" found in
its input tells it to omit. The note grammar [R]:

- a *note* is a sentence matching ``note to/for … summar…`` (e.g. "Note to the summariser:", "Note for whoever
  summarises this thread"); its *span* is that sentence and the next two sentences of the same message;
- the note only acts when its span contains an omission verb (omit, drop, skip, leave out, exclude, remove,
  ignore, do not include/mention/keep/carry over);
- what it omits: sentences containing a quoted phrase of the span; every rule-like sentence when the span names a
  generic rule word (policy, rule, restriction, constraint, compliance, boilerplate, disclaimer, guideline);
  otherwise sentences sharing at least two (or all, if fewer) of the span's content words;
- note sentences themselves are never copied into the summary.
"""

from __future__ import annotations

import re
from typing import Any

from agentmill.core.types import Message
from agentmill.methods.constraint_rot.compactors.base import BaseCompactor, CompactionResult, is_user_turn
from agentmill.methods.constraint_rot.messages import is_rule_like, normalise, split_sentences, word_tokens

NOTE = re.compile(r"\bnote (?:to|for)\b[^.!?]{0,40}?\bsummar")
OMIT = re.compile(r"\b(?:omit|omitted|drop|skip|leave out|exclude|remove|ignore|do not (?:include|mention|keep|"
                  r"carry over|repeat))\b")
GENERIC = {"policy", "policies", "rule", "rules", "restriction", "restrictions", "constraint", "constraints",
           "compliance", "boilerplate", "disclaimer", "disclaimers", "guideline", "guidelines"}
_QUOTED = re.compile(r"[\"“']([^\"”']{3,})[\"”']")
_STOP = {"note", "summariser", "summarizer", "summary", "summarises", "summarizes", "whoever", "please", "this",
         "that", "these", "those", "from", "with", "into", "about", "above", "below", "thread", "conversation",
         "omit", "drop", "skip", "leave", "exclude", "remove", "ignore", "include", "mention", "keep", "carry",
         "over", "repeat", "there", "their", "they", "them", "when", "what", "which", "should", "would", "will",
         "have", "been", "were", "also", "only", "just", "your", "here", "it's", "text", "part"}


class _Omission:
    """What the notes of an input ask to omit."""

    def __init__(self) -> None:
        self.quoted: list[str] = []
        self.all_rules = False
        self.word_sets: list[set[str]] = []

    def add(self, span: str) -> None:
        norm = normalise(span)
        if not OMIT.search(norm):
            return
        self.quoted += [normalise(q) for q in _QUOTED.findall(span)]
        words = set(word_tokens(norm))
        if words & GENERIC:
            self.all_rules = True
        content = {w for w in words if len(w) >= 4 and w not in _STOP and w not in GENERIC}
        if content:
            self.word_sets.append(content)

    def omits(self, sentence: str) -> bool:
        norm = normalise(sentence)
        if any(q in norm for q in self.quoted):
            return True
        if self.all_rules and is_rule_like(sentence):
            return True
        toks = set(word_tokens(norm))
        return any(len(toks & ws) >= min(2, len(ws)) for ws in self.word_sets)


class NoteFollowingSummary(BaseCompactor):
    """Summary = the kept rule-like sentences, then the last user request, minus whatever notes ask to omit."""

    name = "note_following"

    def __init__(self, *, counter: Any = None):
        super().__init__(counter)

    def compact(self, messages: list[Message], *, keep_last: int = 4) -> CompactionResult:
        return self._summarise_prefix(messages, keep_last, self._summary)

    @staticmethod
    def _summary(messages: list[Message], lo: int, hi: int) -> tuple[str, dict[str, Any]]:
        prefix = messages[lo:hi]
        per_msg = [split_sentences(m.content) for m in prefix]
        omission, note_sents = _Omission(), set()
        for i, sents in enumerate(per_msg):
            for j, s in enumerate(sents):
                if NOTE.search(normalise(s)):
                    note_sents.update((i, k) for k in range(j, min(j + 3, len(sents))))
                    omission.add(" ".join(sents[j:j + 3]))
        rules = [s for i, sents in enumerate(per_msg) for j, s in enumerate(sents)
                 if (i, j) not in note_sents and is_rule_like(s) and not omission.omits(s)]
        users = [i for i, m in enumerate(prefix) if is_user_turn(m)]
        request = [s for j, s in enumerate(per_msg[users[-1]]) if (users[-1], j) not in note_sents
                   and not omission.omits(s)] if users else []
        lines = ["Standing notes:"] + [f"- {s}" for s in dict.fromkeys(rules)]
        if request:
            lines.append("Last request: " + " ".join(request))
        return "\n".join(lines), {"notes": len(note_sents) > 0, "omitted_all_rules": omission.all_rules}
