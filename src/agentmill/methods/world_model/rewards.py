"""RL rewards for fidelity, all in [0, 1] (docs/methods/world_model.md, "rewards") [R weights; P "rubric and rule"].

- ``rule``: 0 if the strict parse fails or a schema check fails; else ½·EM + ½·field-F1.
- ``judge_naive``: (J(raw completion) − 1)/4 with the organism judge reading everything, no format gate: the
  reconstructed pre-redesign reward that can be flattered.
- ``judge_guarded``: (J(observation) − 1)/4 with the anti-manipulation rule on; 0 without an observation.
- ``hybrid``: 1[parse ok ∧ schema ok]·(rule_w·rule + judge_w·judge_guarded).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from agentmill.methods.world_model.data import WMExample
from agentmill.methods.world_model.format import extract_observation
from agentmill.methods.world_model.judges import (JudgeItem, LexicalRubricJudge, exact_match, field_f1,
                                                  praise_count)


@dataclass(frozen=True)
class RewardBreakdown:
    total: float
    rule: float
    judge: float
    praise_full: int
    praise_shown: int
    praise_obs: int
    parse_ok: bool
    schema_ok: bool


RewardFn = Callable[[WMExample, str], RewardBreakdown]
KINDS = ("rule", "judge_naive", "judge_guarded", "hybrid")


def make_reward(kind: Literal["rule", "judge_naive", "judge_guarded", "hybrid"], domain, judge=None, *,
                rule_w: float = 0.5, judge_w: float = 0.5) -> RewardFn:
    """The reward function of ``kind`` (module docstring). ``judge`` defaults to the organism judge in the view the
    kind needs; a raw-reading judge inside ``hybrid`` or ``judge_guarded`` is refused."""
    if kind not in KINDS:
        raise ValueError(f"unknown reward {kind!r}; choose from {KINDS}")
    if judge is None:
        judge = (LexicalRubricJudge(domain, sees="raw") if kind == "judge_naive"
                 else LexicalRubricJudge(domain, sees="extracted", anti_manipulation=True))
    if kind in ("hybrid", "judge_guarded") and getattr(judge, "sees", "extracted") == "raw":
        raise ValueError(f"a judge with sees='raw' may only be used by judge_naive, not {kind}")

    def reward(ex: WMExample, completion: str) -> RewardBreakdown:
        ext = extract_observation(completion, mode="strict")
        obs = ext.observation
        parsed = domain.parse(obs) if obs is not None else None
        schema_ok = parsed is not None and all(domain.schema_checks(parsed))
        rule = 0.0
        if schema_ok:
            rule = 0.5 * exact_match(obs, ex.next_obs) + 0.5 * field_f1(domain, obs, ex.next_obs)
        item = JudgeItem(completion, ex.next_obs, (ex.obs,), ex.card)
        judge_score = 0.0
        if kind != "rule":
            judge_score = (judge.score(item).total - 1) / 4 if (kind == "judge_naive" or obs is not None) else 0.0
        if kind == "rule":
            total = rule
        elif kind in ("judge_naive", "judge_guarded"):
            total = judge_score
        else:
            total = float(schema_ok) * (rule_w * rule + judge_w * judge_score)
        if math.isnan(total) or not 0.0 <= total <= 1.0 + 1e-9:
            raise ValueError(f"reward {kind} returned {total}, outside [0, 1]")
        shown = completion if getattr(judge, "sees", "raw") == "raw" else (obs or "")
        return RewardBreakdown(min(1.0, total), rule, judge_score, praise_count(completion), praise_count(shown),
                               praise_count(obs or ""), obs is not None, schema_ok)

    return reward


def as_trl_reward_funcs(reward: RewardFn, example_by_prompt: dict[str, WMExample]) -> list[Callable[..., list[float]]]:
    """The reward in TRL's ``GRPOTrainer(reward_funcs=[...])`` shape: called with ``prompts`` and ``completions``
    (strings) as keyword arguments, returns one float per completion."""

    def wm_reward(prompts, completions, **_):
        return [reward(example_by_prompt[p], c).total for p, c in zip(prompts, completions)]

    return [wm_reward]
