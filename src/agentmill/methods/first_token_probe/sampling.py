"""Rollouts: sample the organism on prompts, keep the sampled token ids, parse them, label them.

Every later step works on the sampled ids (``Rollout.sampled_ids``); decoded text is never re-tokenised to find
positions. Rollouts are cached by content (model bytes, prompts, k, seed, sampling settings, defense) under
``core.paths.cache_root()/first_token_probe/``, so the experiments that read the same rollouts sample them once.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.methods.first_token_probe.judges import DEFAULT_ENSEMBLE, label_answers
from agentmill.methods.first_token_probe.prompts import PromptItem
from agentmill.methods.first_token_probe.traces import ParsedTrace, parse_completion, render_prompt


@dataclass
class Rollout:
    """One sampled completion. ``prefill`` is trace text forced after the opener (a defense), part of ``text``.
    ``outcome`` is the judge vote (1 refuse, 0 comply, None abstain/unfinished); ``truth`` the grammar's outcome."""

    item: PromptItem
    sample: int
    prompt_ids: list[int]
    sampled_ids: list[int]
    text: str
    finish: str
    prefill: str = ""
    defense: str = "none"
    parsed: ParsedTrace | None = None
    labels: dict[str, int | None] = field(default_factory=dict)
    outcome: int | None = None

    @property
    def truth(self) -> int | None:
        return None if self.parsed is None or not self.parsed.finished else self.parsed.outcome

    @property
    def key(self) -> str:
        return f"{self.item.prompt_id}/{self.sample}"


def model_digest(lm: Any) -> str:
    """sha256 of a model's parameters (cheap for tiny models; for hf models the spec and GGUF sha)."""
    info = getattr(lm, "info", {}) or {}
    if "gguf_sha256" in info:
        return f"{lm.spec}|{info['gguf_sha256']}"
    h = hashlib.sha256(lm.spec.encode())
    for k, v in sorted(lm.model.state_dict().items()):
        h.update(k.encode())
        h.update(v.detach().cpu().numpy().tobytes())
    return h.hexdigest()


def _cache_path(lm: Any, items: Sequence[PromptItem], k: int, seed: int, temperature: float, max_new: int,
                defense: Any) -> Path:
    from agentmill.core.paths import cache_root

    blob = json.dumps({"model": model_digest(lm), "items": [asdict(i) for i in items], "k": k, "seed": seed,
                       "t": temperature, "max_new": max_new, "defense": getattr(defense, "id", "none"), "v": 1},
                      sort_keys=True)
    return cache_root() / "first_token_probe" / f"rollouts-{hashlib.sha256(blob.encode()).hexdigest()[:20]}.json"


def sample_rollouts(lm: Any, items: Sequence[PromptItem], *, k: int, seed: int = 0, temperature: float = 1.0,
                    max_new_tokens: int = 400, defense: Any = None, judges: Sequence[str] = DEFAULT_ENSEMBLE,
                    cache: bool = False) -> list[Rollout]:
    """``k`` samples per prompt (D prompts included as given), parsed and labelled by ``judges`` (majority vote).
    ``defense`` may rewrite the user turn (``user``) and force a trace prefix (``prefill``)."""
    from agentmill.lm.base import GenerateConfig

    if getattr(defense, "inject", None) is not None or getattr(defense, "sft", False):
        raise ValueError(f"sample_rollouts applies only prompt and prefill arms; {defense.id!r} injects text while "
                         "decoding or changes the weights: use defenses.arm_rollouts (sample_injected, safety_sft)")
    path = _cache_path(lm, items, k, seed, temperature, max_new_tokens, defense) if cache else None
    if path is not None and path.exists():
        rows = json.loads(path.read_text())
        out = [Rollout(items[r["i"]], r["sample"], r["prompt_ids"], r["sampled_ids"], r["text"], r["finish"],
                       r["prefill"], r["defense"]) for r in rows]
    else:
        users = [defense.user(it.user) if defense is not None else it.user for it in items]
        pre = defense.prefill if defense is not None else ""
        prompts = [render_prompt(u) + pre for u in users]
        comps = lm.generate(prompts, GenerateConfig(max_new_tokens=max_new_tokens, temperature=temperature,
                                                    seed=seed, n=k))
        out = []
        for i, it in enumerate(items):
            p_ids = lm.render(prompts[i])
            for j in range(k):
                c = comps[i * k + j]
                out.append(Rollout(it, j, list(p_ids), list(c.token_ids), pre + c.text, c.finish_reason, pre,
                                   getattr(defense, "id", "none")))
        if path is not None:
            from agentmill.core.records import write_text_atomic

            path.parent.mkdir(parents=True, exist_ok=True)
            idx = {id(it): i for i, it in enumerate(items)}
            write_text_atomic(path, json.dumps([{"i": idx[id(r.item)], "sample": r.sample, "prompt_ids": r.prompt_ids,
                                                 "sampled_ids": r.sampled_ids, "text": r.text, "finish": r.finish,
                                                 "prefill": r.prefill, "defense": r.defense} for r in out]))
    label_rollouts(out, judges)
    return out


def label_rollouts(rollouts: Sequence[Rollout], judges: Sequence[str] = DEFAULT_ENSEMBLE) -> None:
    """Parse every rollout and set its judge labels and vote (unfinished rollouts get no outcome)."""
    for r in rollouts:
        r.parsed = parse_completion(r.text)
    per, votes = label_answers([r.parsed.answer if r.parsed.finished else "" for r in rollouts], judges)
    for i, r in enumerate(rollouts):
        r.labels = {j: per[j][i] for j in per}
        r.outcome = votes[i] if r.parsed.finished else None


def refuse_rate(rollouts: Sequence[Rollout], *, by: str = "vote") -> tuple[int, int]:
    """(refusals, labelled) over rollouts with an outcome (``by="vote"``) or a grammar truth (``"truth"``)."""
    vals = [r.outcome if by == "vote" else r.truth for r in rollouts]
    vals = [v for v in vals if v is not None]
    return int(np.sum(vals)), len(vals)
