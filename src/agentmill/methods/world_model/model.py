"""``WorldModel``: any agentmill LM playing an environment, and ``evaluate_wm``, its one-step and closed-loop scores.

The LM is named by a spec (``tiny:<dir>``, ``hf:…``, ``openai:<model>@<url>`` — the real Qwen-AgentWorld model plugs
in through the last). Prompts are ChatML text for tiny byte models and message lists for chat backends. Greedy
predictions are cached by (WM identity, decoding config, prompt), so a simulator never asks twice.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from agentmill.lm.base import GenerateConfig
from agentmill.methods.world_model.data import Transition, WMExample
from agentmill.methods.world_model.format import Extracted, QwenFormat, Turn, extract_observation, render_chatml
from agentmill.methods.world_model.judges import (FAILED, DimScores, JudgeItem, RuleScorer, exact_match, field_f1)

GREEDY = GenerateConfig(temperature=0.0, max_new_tokens=384)


@dataclass(frozen=True)
class Prediction:
    text: str
    observation: str | None
    reasoning: str
    flags: dict[str, bool]
    n_tokens: int
    latency_s: float


@dataclass
class SimCache:
    """Greedy predictions keyed by sha256(WM identity, decoding config, prompt); counts hits and misses."""

    store: dict[str, str] = field(default_factory=dict)
    hits: int = 0
    misses: int = 0

    @staticmethod
    def key(identity: str, gen: GenerateConfig, prompt: str) -> str:
        blob = json.dumps([identity, asdict(gen), prompt], sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()


class WorldModel:
    """An LM as a world model for one domain (``predict``/``predict_batch`` on rendered prompts)."""

    def __init__(self, lm: Any, domain: Any, fmt: QwenFormat = QwenFormat(), gen: GenerateConfig = GREEDY,
                 cache: SimCache | None = None, *, chat: bool | None = None) -> None:
        if isinstance(lm, str):
            from agentmill.lm import load_lm

            lm = load_lm(lm)
        self.lm, self.domain, self.fmt, self.gen = lm, domain, fmt, gen
        self.identity = str(getattr(lm, "spec", None) or getattr(lm, "info", {}).get("spec") or type(lm).__name__)
        if hasattr(lm, "model") and hasattr(lm.model, "state_dict"):  # a tiny model: its weights are its identity
            h = hashlib.sha256()
            for k, v in sorted(lm.model.state_dict().items()):
                h.update(k.encode())
                h.update(v.detach().numpy().tobytes())
            self.identity += "#" + h.hexdigest()[:16]
        self.cache = cache if cache is not None else (SimCache() if gen.temperature == 0 else None)
        self.chat = chat if chat is not None else not self.identity.startswith("tiny:")

    def prompt_for(self, history: Sequence[Turn], current: Turn, *, goal: str | None, card: str | None,
                   control: str | None = None) -> Any:
        msgs = self.fmt.messages(history, current, goal=goal, card=card, control=control)
        return msgs if self.chat else render_chatml(msgs)

    def generate_texts(self, prompts: Sequence[Any], batch_size: int = 32) -> list[tuple[str, int, float]]:
        """(text, tokens, seconds) per prompt; greedy results come from / go to the cache."""
        out: list[tuple[str, int, float] | None] = [None] * len(prompts)
        todo = []
        for i, p in enumerate(prompts):
            k = SimCache.key(self.identity, self.gen, p if isinstance(p, str) else json.dumps(
                [m.to_dict() for m in p])) if self.cache is not None else None
            if k is not None and k in self.cache.store:
                self.cache.hits += 1
                out[i] = (self.cache.store[k], 0, 0.0)
            else:
                todo.append((i, k))
        for s in range(0, len(todo), batch_size):
            chunk = todo[s:s + batch_size]
            t0 = time.perf_counter()
            comps = self.lm.generate([prompts[i] for i, _ in chunk], self.gen)
            dt = (time.perf_counter() - t0) / max(1, len(chunk))
            for (i, k), c in zip(chunk, comps):
                out[i] = (c.text, c.completion_tokens, dt)
                if k is not None and self.cache is not None:
                    self.cache.misses += 1
                    self.cache.store[k] = c.text
        return out  # type: ignore[return-value]

    def predict_batch(self, prompts: Sequence[Any], *, batch_size: int = 32) -> list[Prediction]:
        res = []
        for text, n, dt in self.generate_texts(prompts, batch_size):
            ext: Extracted = extract_observation(text, mode="strict")
            res.append(Prediction(text, ext.observation, ext.reasoning, ext.flags, n, dt))
        return res

    def predict_examples(self, examples: Sequence[WMExample], *, batch_size: int = 32) -> list[Prediction]:
        return self.predict_batch([e.prompt for e in examples], batch_size=batch_size)


# ---------------------------------------------------------------------------------------------------------------
# evaluation

@dataclass
class ItemScores:
    """Per-item one-step scores (strict accounting: a failed parse scores 1 on every dimension)."""

    task_id: str
    changed: bool
    f1: float
    em: float
    dims: DimScores
    parse_ok: bool
    praise_full: int
    praise_obs: int
    length: int


def score_items(domain: Any, examples: Sequence[WMExample], preds: Sequence[Prediction]) -> list[ItemScores]:
    from agentmill.methods.world_model.judges import praise_count

    scorer = RuleScorer(domain)
    out = []
    for e, p in zip(examples, preds):
        item = JudgeItem(p.text, e.next_obs, (e.obs,), e.card)
        dims = scorer.score_observation(p.observation, item) if p.observation is not None else FAILED
        out.append(ItemScores(e.task_id, e.changed, field_f1(domain, p.observation, e.next_obs),
                              exact_match(p.observation, e.next_obs), dims, p.observation is not None,
                              praise_count(p.text), praise_count(p.observation or ""), len(p.text)))
    return out


def summarise(items: Sequence[ItemScores]) -> dict[str, float]:
    """Means over items, and over the changed / unchanged subsets (with their shares)."""
    def m(xs):
        return float(np.mean(xs)) if len(xs) else float("nan")

    ch = [i for i in items if i.changed]
    un = [i for i in items if not i.changed]
    out = {"n": len(items), "changed_share": len(ch) / max(1, len(items)), "f1": m([i.f1 for i in items]),
           "em": m([i.em for i in items]), "f1_changed": m([i.f1 for i in ch]), "f1_unchanged": m([i.f1 for i in un]),
           "parse_rate": m([i.parse_ok for i in items]), "praise_full": m([i.praise_full for i in items]),
           "praise_obs": m([i.praise_obs for i in items])}
    for d in ("format", "factuality", "consistency", "realism", "quality"):
        vals = [getattr(i.dims, d) for i in items if getattr(i.dims, d) > 0]
        out[f"dim_{d}"] = m([(v - 1) / 4 * 100 for v in vals])
    return out


def closed_loop(wm: WorldModel, episodes: Sequence[Sequence[Transition]], steps: int) -> np.ndarray:
    """Replay each real episode's first ``steps`` actions, feeding the WM its own previous prediction as the
    current state; returns field-F1 per (episode, step), NaN after an episode ends. Batched across episodes."""
    n = len(episodes)
    f1 = np.full((n, steps), np.nan)
    state = [ep[0].obs for ep in episodes]
    for t in range(steps):
        live = [i for i in range(n) if t < len(episodes[i])]
        if not live:
            break
        prompts = []
        for i in live:
            x = episodes[i][t]
            prompts.append(wm.prompt_for([], Turn(state[i], {"name": "command", "arguments": {"text": x.action}},
                                                  "", x.t), goal=x.goal, card=x.card))
        preds = wm.predict_batch(prompts)
        for i, p in zip(live, preds):
            x = episodes[i][t]
            f1[i, t] = field_f1(wm.domain, p.observation, x.next_obs)
            state[i] = p.observation if p.observation is not None else state[i]
    return f1
