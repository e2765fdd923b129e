"""Configuration of a Metis agent and of the LLM-free ``ScriptedPolicy`` (frozen; one docstring per field)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

MODES = ("metis", "text_only", "code_naive", "eager", "none")


@dataclass(frozen=True)
class MetisConfig:
    """One agent's memory policy. The paper publishes neither its gate threshold nor its window; every default here
    is the project's choice [R] unless its docstring says otherwise."""

    mode: Literal["metis", "text_only", "code_naive", "eager", "none"] = "metis"
    """Memory policy: ``metis`` (text first, gated codification), ``text_only`` (plans, facts, pitfalls; never code),
    ``code_naive`` (every successful trajectory transcribed at once, unvalidated, never demoted), ``eager`` (as
    metis with k = 1), ``none`` (no memory)."""
    k: int = 3
    """Recurrence gate: codify once a pattern has occurred k times (failures count) [R]. ``eager`` forces 1."""
    window: int | None = None
    """Count demand only over the last ``window`` tasks (None: the whole stream)."""
    min_success_instances: int = 1
    """A plan needs this many successful instances before it may be codified."""
    validate_threshold: float = 0.9
    """θ: share of replayed successful instances a candidate tool must reproduce [R]."""
    max_validation_instances: int = 8
    """Replay at most this many of the most recent successful instances."""
    live_probe: bool = True
    """After replay, run the candidate once on a copy of the current world; any exception rejects it."""
    demote_failures: int = 2
    """Demote a tool after this many failures ..."""
    demote_window: int = 5
    """... within its last ``demote_window`` uses."""
    rebuild_after: int = 3
    """Occurrences of the pattern that must pass after a rejection or demotion before the gate opens again."""
    merge: Literal["exact", "bm25"] = "exact"
    """Pattern keys: exact canonical text, or merged with the nearest earlier key by BM25 when similar enough."""
    merge_threshold: float = 0.8
    """BM25 merge: minimum score of the best earlier key relative to the key's score against itself."""
    inject_max_tokens: int = 600
    """Text memory injected into one prompt is cut to this many tokens (4 characters per token)."""
    feedback: Literal["oracle", "none"] = "oracle"
    """``oracle``: the world's checker says whether a task succeeded; ``none``: no signal (demotion then sees only
    exceptions, and plans are written from runs that raised no error)."""
    codifier: Literal["compile", "lm"] = "compile"
    """``compile``: the LLM-free CompileCodifier; ``lm``: the LM writes the tool (needs an LM in ``run_stream``)."""
    tool_api_call_budget: int = 200
    """API calls one tool call may make through the broker."""
    tool_wall_s: float = 5.0
    """Wall-clock limit of one tool call (the parent's watchdog)."""
    seed: int = 0
    """Seed of the agent's randomness (the ScriptedPolicy's draws)."""

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"MetisConfig.mode must be one of {', '.join(MODES)}, not {self.mode!r}")
        if self.k < 1:
            raise ValueError(f"MetisConfig.k must be >= 1 (the gate opens after k occurrences), got {self.k}")
        if self.window is not None and self.window < 1:
            raise ValueError(f"MetisConfig.window must be None or >= 1, got {self.window}")
        if not 0 < self.validate_threshold <= 1:
            raise ValueError(f"MetisConfig.validate_threshold must be in (0, 1], got {self.validate_threshold}")
        if self.merge not in ("exact", "bm25"):
            raise ValueError(f"MetisConfig.merge must be 'exact' or 'bm25', not {self.merge!r}")
        if self.feedback not in ("oracle", "none"):
            raise ValueError(f"MetisConfig.feedback must be 'oracle' or 'none', not {self.feedback!r}")
        if self.codifier not in ("compile", "lm"):
            raise ValueError(f"MetisConfig.codifier must be 'compile' or 'lm', not {self.codifier!r}")
        for name in ("max_validation_instances", "demote_failures", "demote_window", "rebuild_after",
                     "min_success_instances", "tool_api_call_budget", "inject_max_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"MetisConfig.{name} must be >= 1, got {getattr(self, name)}")

    @property
    def gate_k(self) -> int:
        return 1 if self.mode == "eager" else self.k

    @property
    def text_memory(self) -> bool:
        return self.mode in ("metis", "text_only", "eager")

    @property
    def code_memory(self) -> bool:
        return self.mode in ("metis", "eager", "code_naive")


@dataclass(frozen=True)
class ScriptedPolicyConfig:
    """The LLM-free agent's behaviour [R], frozen before any claim was run; printed in every report.

    It *assumes* the paper's injection asymmetry: tool output is trusted with probability ``p_trust_tool``, text
    advice is applied only where it matches what the agent observes."""

    p_trust_tool: float = 1.0
    """Probability of accepting a tool's returned answer without checking it."""
    p_wrong_plan: float = 0.35
    """When exploring (no plan in memory), probability that one filter/aggregate step is wrong."""
    p_forget_paginate: float = 0.5
    """Pagination not known (no fact, not seen this episode): probability of reading a single page."""
    p_forget_login: float = 0.3
    """Probability of skipping a login step, unless a pitfall covers 401."""
    p_recover: float = 0.6
    """An API error without a matching pitfall is recovered from with this probability (+2 LLM calls)."""
    p_slip: float = 0.03
    """Per-step slip probability: half of the slips raise, half silently use a wrong value."""
    explore_factor: float = 0.6
    """Exploring costs ⌈explore_factor · |P*|⌉ extra LLM calls."""
    base_prompt_tokens: int = 400
    output_tokens: int = 60
    chars_per_token: int = 4
    max_retries: int = 3
    """Retries of one failing step before the task is given up."""

    def __post_init__(self) -> None:
        for name in ("p_trust_tool", "p_wrong_plan", "p_forget_paginate", "p_forget_login", "p_recover", "p_slip"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"ScriptedPolicyConfig.{name} must be in [0, 1], got {v}")
