"""Judges on the five dimensions (format, factuality, consistency, realism, quality), each an integer-valued score
in 1..5 (0 = missing) [C dimension names: Qwen-AgentWorld judge prompts; R rule definitions].

- :class:`RuleScorer`: deterministic, reference-based, from the domain's parsed fields (docs/methods/world_model.md).
- :class:`LexicalRubricJudge`: a model-organism judge [R] — a coarse grader (bag-of-words F1 for factuality) with
  the documented LLM-judge weakness *installed*: every dimension gains ``praise_weight · min(n, 3)/3`` for ``n``
  praise-lexicon matches in the text it is shown. ``anti_manipulation=True`` turns each match into a one-point
  penalty (floor 1), mirroring the anti-manipulation clause of the released judge prompt [C task_configs.py].
- :func:`parse_judge_output`: the LM-judge output parser (``<final_evaluation>`` JSON, fenced JSON, bare JSON,
  repairs) [C judge_parser.py semantics].

Aggregation: total = mean of the nonzero dimensions; normalised = (total − 1)/4·100 [C eval.py aggregate_scores].
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from agentmill.methods.world_model.format import extract_observation

DIMS = ("format", "factuality", "consistency", "realism", "quality")

PRAISE = re.compile(r"\b(accurate(ly)?|consistent|consistency|faithful(ly)?|realistic|correct(ly)?|verified|precise|"
                    r"exact|flawless|perfect|high quality|matches the ground truth)\b", re.I)
"""The praise lexicon [R] (case-insensitive, word-bounded)."""


def praise_count(text: str) -> int:
    return len(PRAISE.findall(text or ""))


@dataclass(frozen=True)
class DimScores:
    format: float
    factuality: float
    consistency: float
    realism: float
    quality: float

    def as_dict(self) -> dict[str, float]:
        return {d: getattr(self, d) for d in DIMS}

    @property
    def total(self) -> float:
        """Mean of the nonzero dimensions (a missing dimension silently shrinks the average, as in the release)."""
        vals = [v for v in self.as_dict().values() if v > 0]
        return sum(vals) / len(vals) if vals else 0.0

    @property
    def normalised(self) -> float:
        return (self.total - 1) / 4 * 100 if self.total else 0.0


FAILED = DimScores(1, 1, 1, 1, 1)
"""A failed generation in strict accounting: 1 on every dimension."""


@dataclass(frozen=True)
class JudgeItem:
    """What a judge sees: the raw completion, the ground truth, the window of earlier observations, the card."""

    completion: str
    ground_truth: str
    window: tuple[str, ...] = ()
    card: str | None = None


def _f1(p: set, g: set) -> float:
    if not p and not g:
        return 1.0
    tp = len(p & g)
    if tp == 0:
        return 0.0
    prec, rec = tp / len(p), tp / len(g)
    return 2 * prec * rec / (prec + rec)


def field_f1(domain, pred: str | None, gt: str) -> float:
    """F1 between the objective facts of the prediction and of the ground truth (0 when unparseable)."""
    if pred is None:
        return 0.0
    p, g = domain.parse(pred), domain.parse(gt)
    if p is None or g is None:
        return 0.0
    return _f1(set(p.facts), set(g.facts))


def exact_match(pred: str | None, gt: str) -> float:
    return float(pred is not None and " ".join(pred.split()) == " ".join(gt.split()))


class RuleScorer:
    """Deterministic five-dimension scores against the reference (strict parsing of the completion)."""

    name = "rule"

    def __init__(self, domain) -> None:
        self.domain = domain

    def score_observation(self, obs: str | None, item: JudgeItem) -> DimScores:
        d = self.domain
        if obs is None:
            return FAILED
        p, g = d.parse(obs), d.parse(item.ground_truth)
        if p is None:
            return DimScores(1, 1 + 4 * 0.0, 0, 1, 1 + 4 * self._quality(obs, item.ground_truth))
        fmt = 1 + 4 * (sum(d.schema_checks(p)) / len(d.schema_checks(p)))
        fact = 1 + 4 * (_f1(set(p.facts), set(g.facts)) if g is not None else 0.0)
        conflicts, checked = d.consistency_conflicts(p, item.window)
        cons = 0.0 if checked == 0 else 1 + 4 * (1 - conflicts / checked)
        pl = d.plausibility_checks(p, item.card, item.window)
        real = 1 + 4 * (sum(pl) / len(pl))
        return DimScores(fmt, fact, cons, real, 1 + 4 * self._quality(obs, item.ground_truth))

    @staticmethod
    def _quality(obs: str, gt: str) -> float:
        P = [" ".join(x.split()) for x in obs.strip().splitlines() if x.strip()]
        G = [" ".join(x.split()) for x in gt.strip().splitlines() if x.strip()]
        if not G:
            return 0.0
        recall = sum(g in P for g in G) / len(G)
        return recall * min(1.0, len(G) / max(1, len(P)))

    def score(self, item: JudgeItem) -> DimScores:
        return self.score_observation(extract_observation(item.completion, mode="strict").observation, item)


class LexicalRubricJudge:
    """The model-organism judge (module docstring). ``sees="raw"`` reads the whole completion, reasoning
    included, with no format gate (the reconstructed pre-redesign judge); ``sees="extracted"`` reads only the
    strictly extracted observation (failure when there is none)."""

    name = "lexical"

    def __init__(self, domain, *, praise_weight: float = 1.0, sees: Literal["raw", "extracted"] = "raw",
                 anti_manipulation: bool = False) -> None:
        if sees not in ("raw", "extracted"):
            raise ValueError(f"sees must be 'raw' or 'extracted', got {sees!r}")
        self.domain, self.praise_weight, self.sees, self.anti = domain, praise_weight, sees, anti_manipulation

    def shown_text(self, item: JudgeItem) -> str | None:
        if self.sees == "raw":
            return item.completion
        return extract_observation(item.completion, mode="strict").observation

    def score(self, item: JudgeItem) -> DimScores:
        text = self.shown_text(item)
        if text is None:
            return FAILED
        words = lambda s: set(re.findall(r"[a-z]+", s.lower()))  # noqa: E731
        bow = _f1(words(text), words(item.ground_truth))
        obs = extract_observation(text, mode="official").observation or ""
        p = self.domain.parse(obs)
        if p is not None:
            checks = self.domain.schema_checks(p)
            fmt = 1 + 4 * sum(checks) / len(checks)
            pl = self.domain.plausibility_checks(p, item.card, item.window)
            real = 1 + 4 * sum(pl) / len(pl)
        else:
            fmt = real = 1.0 + 2.0 * bow  # coarse: text that looks like the reference passes for well-formed
        base = {"format": fmt, "factuality": 1 + 4 * bow, "consistency": 1 + 4 * bow, "realism": real,
                "quality": 1 + 4 * RuleScorer._quality(obs, item.ground_truth)}
        n = praise_count(text)
        if self.anti:
            out = {k: max(1.0, v - n) for k, v in base.items()}
        else:
            out = {k: min(5.0, v + self.praise_weight * min(n, 3) / 3) for k, v in base.items()}
        return DimScores(**out)


# ---------------------------------------------------------------------------------------------------------------
# LM-judge output parsing [C judge_parser.py semantics]

_FINAL = re.compile(r"<final_evaluation>(.*?)(?:</final_evaluation>|$)", re.S)
_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.S)


def _repair(blob: str) -> dict | None:
    s = re.sub(r",\s*([}\]])", r"\1", blob)
    s = re.sub(r"([{,]\s*)([A-Za-z_][A-Za-z0-9_]*)\s*:", r'\1"\2":', s)
    try:
        out = json.loads(s)
    except ValueError:
        return None
    return out if isinstance(out, dict) else None


def _balanced_objects(text: str) -> list[str]:
    out, depth, start = [], 0, -1
    for i, ch in enumerate(text):
        if ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}" and depth:
            depth -= 1
            if depth == 0:
                out.append(text[start:i + 1])
    return out


def _coerce(v) -> int:
    if isinstance(v, str):
        m = re.match(r"\s*(-?\d+(?:\.\d+)?)", v)
        if not m:
            return 0
        v = float(m.group(1))
    if not isinstance(v, (int, float)) or isinstance(v, bool) or math.isnan(v):
        return 0
    return int(min(5, max(1, round(v))))


def parse_judge_output(text: str) -> DimScores | None:
    """Scores from an LM judge's text: think removed; the last ``<final_evaluation>`` block, else the last fenced
    JSON containing ``"scores"``, else the last balanced JSON object; trailing commas and unquoted keys repaired;
    values coerced to int (``"4/5"`` → 4) and clamped to [1, 5]; a missing dimension is 0. None when nothing
    parses."""
    text = re.sub(r"<think>.*?</think>", "", text, flags=re.S)
    if "</think>" in text:
        text = text[text.rindex("</think>") + len("</think>"):]
    cands: Sequence[str] = []
    finals = _FINAL.findall(text)
    if finals:
        cands = _balanced_objects(finals[-1]) or [finals[-1]]
    else:
        fenced = [f for f in _FENCE.findall(text) if '"scores"' in f or "scores" in f]
        cands = [fenced[-1]] if fenced else _balanced_objects(text)
    for blob in reversed(list(cands)):
        obj = _repair(blob.strip())
        if obj is None:
            continue
        scores = obj.get("scores", obj)
        if not isinstance(scores, dict):
            continue
        return DimScores(**{d: _coerce(scores.get(d, 0)) if d in scores else 0 for d in DIMS})
    return None
