"""A trainable candidate policy and its fixed reference, built from one model spec.

The progress advantage (E173) and G2PO's LoRA check (E165) both need the same thing: a policy that chooses among
admissible commands and can be trained, beside a frozen reference that starts equal to it (so β·log(π_θ/π_ref) is
zero before training). ``hf:`` specs share one copy of the weights (LoRA on, LoRA off: :class:`lm.pair.HFPair`);
``tiny:`` specs load two copies with the same seed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class Pair:
    """A trainable candidate policy, its fixed reference, and what built them."""

    policy: Any
    reference: Any
    spec: str
    owner: Any = None
    """The ``HFPair`` keeping the shared weights alive (None for tiny pairs)."""


def render_for(one_shot: bool) -> Any:
    from agentmill.lm.policy import CommandPrompt

    return CommandPrompt() if one_shot else CommandPrompt(example=None)


def load_candidate_lm(spec: str) -> Any:
    """A fresh (uncached) tiny model, or the process-cached ``hf:`` model, for a reference-only policy."""
    if spec.startswith("tiny:"):
        from agentmill.lm.tiny import load

        return load(spec[len("tiny:"):])
    from agentmill.lm import load_lm

    return load_lm(spec)


def build_pair(spec: str, *, temperature: float, one_shot: bool, lr: float, record: bool = False,
               memo: int = 256) -> Pair:
    """``hf:NAME`` → ``HFPair(NAME, adapter="new")``: policy = base + a fresh LoRA (B = 0, so π_θ = π_ref at the
    start; defaults r = 8, α = 16, q/v projections [R], docs/methods/progress_advantage.md), reference = the same
    weights with the adapter off. ``tiny:SPEC`` → two copies of the same tiny model (same seed, so again π_θ = π_ref at
    the start). ``memo``: memoised states per policy (``CandidatePolicy``); a tiny KeyDoor has few distinct states, so a
    memo that holds them all makes re-visits and re-scoring free."""
    from agentmill.lm.policy import CandidatePolicy, LoRACandidatePolicy

    render = render_for(one_shot)
    if spec.startswith("hf:"):
        from agentmill.lm.pair import HFPair

        pair = HFPair(spec[len("hf:"):], adapter="new", threads=1)
        pol = LoRACandidatePolicy(pair.policy, pair.trainable_parameters(), render, temperature, lr=lr,
                                  record=record, memo=memo)
        return Pair(pol, CandidatePolicy(pair.reference, render, temperature, record=False, memo=memo), spec, pair)
    if spec.startswith("tiny:"):
        lm = load_candidate_lm(spec)
        pol = LoRACandidatePolicy(lm, list(lm.model.parameters()), render, temperature, lr=lr, record=record,
                                  memo=memo)
        return Pair(pol, CandidatePolicy(load_candidate_lm(spec), render, temperature, record=False, memo=memo), spec)
    raise ValueError(f"P-6 pairs are built from 'hf:NAME' or 'tiny:SPEC', got {spec!r}")
