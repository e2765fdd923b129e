"""The synthetic twin (E162, [R]): a numpy ``ForkableLM`` whose success probabilities are known exactly.

A prompt is a vector q in [0, 1]^H of per-step correctness probabilities. A completion has H steps of
``tokens_per_step`` tokens; the first token of step i is its *decision* token (1 = correct, 2 = wrong), drawn
correct with probability q_i while no earlier step erred and wrong forever after an error. Its entropy is the
binary entropy of q_i (0 once erred); the deterministic filler tokens report 0.05 nats. The reward is 1 iff every
step is correct, so an expansion from a clean prefix that has decided steps < s succeeds with probability
prod_{i >= s} q_i (``oracle_p``), and 0 from an erred prefix. Branch points are step boundaries.

Counters mimic exact prefix sharing: the prompt (``prompt_tokens``) is prefilled once per tree, a fork refeeds
one token, and a continuation of n tokens feeds n - 1 (it ends by length, never by EOS).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from agentmill.lm.fork import BranchRequest, Continuation, TokenCounters, stream_rng
from agentmill.methods.tree_rollouts.tree import Reward

CORRECT, WRONG = 1, 2
FILLER_ENTROPY = 0.05


def _binary_entropy(q: float) -> float:
    if q <= 0.0 or q >= 1.0:
        return 0.0
    return float(-(q * math.log(q) + (1 - q) * math.log(1 - q)))


@dataclass
class _SynthTree:
    q: np.ndarray
    key: tuple[int, ...]
    counters: TokenCounters = field(default_factory=TokenCounters)


class SyntheticChainLM:
    """``ForkableLM`` over chain prompts (see the module docstring)."""

    supports_prefix_sharing = True

    def __init__(self, steps: int = 10, tokens_per_step: int = 10, vocab: int = 16, prompt_tokens: int = 16) -> None:
        if steps < 1 or tokens_per_step < 1 or vocab < 4:
            raise ValueError("SyntheticChainLM: steps, tokens_per_step >= 1 and vocab >= 4 required")
        self.steps, self.tps, self.vocab, self.prompt_tokens = steps, tokens_per_step, vocab, prompt_tokens
        self.length = steps * tokens_per_step

    def decode(self, ids: Sequence[int]) -> str:
        if isinstance(ids, np.ndarray) and ids.ndim == 1 and ids.dtype.kind in "iuf":  # one array op per leaf
            chars = np.full(len(ids), ord("_"), np.uint8)
            chars[ids == CORRECT] = ord(".")
            chars[ids == WRONG] = ord("x")
            return chars.tobytes().decode("ascii")
        return "".join("." if i == CORRECT else "x" if i == WRONG else "_" for i in ids)

    def filler(self, pos: int) -> int:
        return 3 + pos % (self.vocab - 3)

    def start_tree(self, prompt: np.ndarray, tree_key: tuple[int, ...]) -> _SynthTree:
        q = np.asarray(prompt, dtype=np.float64)
        if q.shape != (self.steps,) or (q < 0).any() or (q > 1).any():
            raise ValueError(f"a synthetic prompt is {self.steps} probabilities in [0, 1], got {q!r}")
        t = _SynthTree(q, tuple(int(k) for k in tree_key))
        t.counters.prefill_tokens += self.prompt_tokens
        t.counters.forward_calls += 1
        return t

    def expand(self, tree: _SynthTree, requests: Sequence[BranchRequest], temperature: float = 1.0) -> list[Continuation]:
        """Filler tokens are written as whole slices and only decision tokens are visited one by one (the token loop
        was most of a synthetic run). The uniforms of one request are drawn as one array: its stream is private to the
        request and discarded after it, and ``rng.random(k)`` yields the values of k successive ``rng.random()``
        calls, of which the decision tokens consume the same prefix as before."""
        out = []
        tps = self.tps
        plain_filler = type(self).filler is SyntheticChainLM.filler
        for req in requests:
            rng = stream_rng(tree.key, req.expansion_id)
            prefix = np.asarray(req.prefix_ids, dtype=np.int32)
            erred = bool((prefix[:: tps] == WRONG).any())
            n = min(req.max_new_tokens, self.length - req.pos)
            if n < 1:
                raise ValueError(f"nothing to sample after position {req.pos} (completion length {self.length})")
            if plain_filler:  # self.filler(pos) for every position, as one array
                toks = (3 + np.arange(req.pos, req.pos + n) % (self.vocab - 3)).astype(np.int32)
            else:
                toks = np.array([self.filler(req.pos + j) for j in range(n)], dtype=np.int32)
            ents = np.full(n, FILLER_ENTROPY, np.float32)
            lps = np.zeros(n, np.float32)
            decisions = range((-req.pos) % tps, n, tps)  # j with (req.pos + j) % tps == 0
            if erred:
                toks[decisions.start:: tps] = WRONG
                ents[decisions.start:: tps] = 0.0
            elif len(decisions):
                draws = rng.random(len(decisions)).tolist()
                for d, j in enumerate(decisions):
                    if erred:
                        toks[j], ents[j] = WRONG, 0.0
                        continue
                    step = (req.pos + j) // tps
                    qi = tree.q[step]
                    ok = draws[d] < qi
                    toks[j] = CORRECT if ok else WRONG
                    ents[j] = _binary_entropy(qi)
                    lps[j] = math.log(qi if ok else 1 - qi) if 0 < qi < 1 else 0.0
                    erred = not ok
            c = tree.counters
            c.gen_tokens += n
            c.fed_tokens += n - 1
            if req.pos > 0:
                c.refeed_tokens += 1
                c.forks += 1
            out.append(Continuation(toks, lps, ents, float(ents[0]), "length"))
        tree.counters.forward_calls += 1
        return out

    def end_tree(self, tree: _SynthTree) -> TokenCounters:
        return tree.counters

    # --------------------------------------------------------------------------------- oracle and verifier
    def oracle_p(self, q: np.ndarray, prefix: np.ndarray) -> float:
        """True success probability of an expansion from ``prefix`` (decided steps are those before its end)."""
        prefix = np.asarray(prefix)
        if (prefix[:: self.tps] == WRONG).any():
            return 0.0
        decided = -(-len(prefix) // self.tps)  # steps whose decision token lies inside the prefix
        return float(np.prod(np.asarray(q)[decided:]))

    def verify(self, tokens: np.ndarray, text: str = "") -> Reward:
        tokens = np.asarray(tokens)
        if len(tokens) < self.length:
            return Reward(0.0, "truncated")
        ok = bool((tokens[:: self.tps] == CORRECT).all())
        return Reward(1.0 if ok else 0.0, "correct" if ok else "wrong")

    def branch_points(self, tokens: np.ndarray, entropies: np.ndarray, decode=None) -> list[int]:
        """Step boundaries: positions tps, 2 tps, ..."""
        return list(range(self.tps, len(tokens), self.tps))


# -------------------------------------------------------------------------------------------------- pools
def hard_prompt(rng: np.random.Generator, steps: int = 10) -> np.ndarray:
    """q = 0.97 except 3 random steps ~ U(0.15, 0.5): mean p_root = 0.97^7 * 0.325^3 ~ 0.028 [R]."""
    q = np.full(steps, 0.97)
    hard = rng.choice(steps, size=min(3, steps), replace=False)
    q[hard] = rng.uniform(0.15, 0.5, size=len(hard))
    return q


def make_pool(kind: str, n: int, seed: int, steps: int = 10, mix: tuple[float, float, float] = (0.6, 0.2, 0.2)) -> list[np.ndarray]:
    """Pools ``hard``, ``empty`` (hard plus one step at q = 0), ``easy`` (all 0.99, p ~ 0.90) or ``mix``
    (fractions ``mix`` of hard/empty/easy, shuffled), generated from ``seed``."""
    rng = np.random.default_rng([seed, 162])
    if kind == "hard":
        return [hard_prompt(rng, steps) for _ in range(n)]
    if kind == "empty":
        out = []
        for _ in range(n):
            q = hard_prompt(rng, steps)
            q[rng.integers(steps)] = 0.0
            out.append(q)
        return out
    if kind == "easy":
        return [np.full(steps, 0.99) for _ in range(n)]
    if kind == "mix":
        if not math.isclose(sum(mix), 1.0) or min(mix) < 0:
            raise ValueError(f"mix fractions must be >= 0 and sum to 1, got {mix}")
        kinds = rng.choice(3, size=n, p=np.asarray(mix))
        out = []
        for k in kinds:
            q = hard_prompt(rng, steps)
            if k == 1:
                q[rng.integers(steps)] = 0.0
            elif k == 2:
                q = np.full(steps, 0.99)
            out.append(q)
        return out
    raise ValueError(f"unknown pool kind {kind!r}; choose hard, empty, easy or mix")
