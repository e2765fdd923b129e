"""An LM that acts by choosing among admissible commands ([R]; E165 G-8, E173 P-6).

A text agent in KeyDoor or TextWorld is given the admissible commands at every step. Instead of sampling free text
and hoping it parses, :class:`CandidatePolicy` scores every candidate and samples from

    π(a|s) = softmax_a ℓ(a)/T,    ℓ(a) = Σ_j log p_LM(a_j | prompt(s), a_<j) + log p_LM(<end of turn> | prompt(s), a)

[D] (progress_advantage README deviation 5). The end-of-turn token is part of ℓ so that "go north" is not a free prefix
of "go north east". The scorer of E173 (``action_space="candidates"``) recomputes the same ℓ from the same prompt ids,
so log π(a|s) = ℓ(a)/T − logsumexp_b ℓ(b)/T is exactly what it compares across a (policy, reference) pair.

Cost. The prompt (system turn, one-shot example, goal, observation, numbered commands: 150–300 tokens) dominates;
candidates are 2–8 tokens. So the prompt is prefilled once and its KV cache is repeated K times on the batch axis,
and all K candidates (+ end of turn) go through one right-padded forward (PERF-7, measured by
:func:`benchmark_shared_prefix`). Right padding needs no attention mask: a row's pads come after all of its real
tokens, so causal attention keeps them out of every position that is scored.
Across decisions, :class:`PromptCache` keeps the last prompt's cache and re-feeds only what differs from it
(consecutive prompts share the system turn and the one-shot example).

Training [R]: :class:`LoRACandidatePolicy` adds AdamW over the trainable
parameters (the LoRA of an :class:`agentmill.lm.pair.HFPair`, or every parameter of a ``tiny:`` model) and
:meth:`LoRACandidatePolicy.pg_update`, the policy-gradient step of ``envs.policies.pg_step`` (same advantages,
same exact KL-over-candidates term, same normalisation options) computed with autograd through the shared-prefix
forward. :meth:`LoRACandidatePolicy.distill_step` fits π to a given target distribution per state (cross-entropy
over candidates, for P-6a).
"""

from __future__ import annotations

import copy
import math
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agentmill.core.pg import pg_inputs
from agentmill.core.types import Message, StepTable
from agentmill.lm.base import LMError, MissingExtraError, Prompt

Renderer = Callable[[str, Mapping[str, Any], Sequence[str]], Prompt]
"""``render(obs, info, candidates) -> prompt``: a conversation (rendered with the model's chat template by
``lm.render``) or a raw string. It must be a pure function of its arguments: training re-renders the prompt of
every row from the StepTable's (obs, info, candidates)."""


def _torch() -> Any:
    try:
        import torch
    except ImportError as e:
        raise MissingExtraError("hf", "CandidatePolicy (torch)") from e
    return torch


# ------------------------------------------------------------------------------------------------ the prompt
@dataclass(frozen=True)
class OneShotExample:
    """A solved decision shown before the real one (SmolLM2 follows a format only when shown one, ARCHITECTURE.md
    §3). The example is a made-up KeyDoor-like state: its rooms and colours are not those of any layout."""

    goal: str = "Open the chest in the cellar."
    """The example's task."""
    observation: str = "-= Hallway =-\nYou see a red key.\nExits: north, west (a locked red door).\nYou are carrying nothing."
    """The example's observation."""
    commands: tuple[str, ...] = ("examine red key", "go north", "look", "take red key", "wait")
    """The example's admissible commands, numbered in the prompt."""
    answer: str = "take red key"
    """The assistant's reply: one command copied exactly (not its number)."""


@dataclass(frozen=True)
class CommandPrompt:
    """The default renderer: the template's default system turn (SmolLM2 can derail with a custom one), then one
    user/assistant exchange per shot, then the real decision as a user turn. Each user turn holds the goal, the
    observation, the numbered commands and the instruction; the assistant answers with the command text, which is
    exactly the span ℓ(a) scores."""

    example: OneShotExample | None = OneShotExample()
    """The one-shot example; None for zero-shot."""
    instruction: str = "Reply with exactly one of the commands above, copied word for word."
    """Last line of every user turn."""
    goal_key: str = "objective"
    """``info`` field holding the task (KeyDoor and TextWorld both provide ``objective``)."""

    def user_turn(self, goal: str, obs: str, commands: Sequence[str]) -> str:
        numbered = "\n".join(f"{i}. {c}" for i, c in enumerate(commands, 1))
        head = f"Goal: {goal.strip()}\n" if goal and goal.strip() else ""
        return f"{head}Observation:\n{obs.strip()}\nCommands:\n{numbered}\n{self.instruction}"

    def __call__(self, obs: str, info: Mapping[str, Any], candidates: Sequence[str]) -> list[Message]:
        msgs: list[Message] = []
        if self.example is not None:
            ex = self.example
            msgs += [Message("user", self.user_turn(ex.goal, ex.observation, ex.commands)),
                     Message("assistant", ex.answer)]
        msgs.append(Message("user", self.user_turn(str(info.get(self.goal_key) or ""), obs, candidates)))
        return msgs


def end_of_turn_id(lm: Any) -> int:
    """The token that closes an assistant turn: the tokenizer's EOS (``<|im_end|>`` for SmolLM2, which its chat
    template writes right after the reply; the E173 scorer's ``chat_episode`` uses the same), else the model's
    first EOS id (``tiny:``, ``scripted:whitebox``)."""
    tok = getattr(lm, "tokenizer", None)
    if tok is not None and getattr(tok, "eos_token_id", None) is not None:
        return int(tok.eos_token_id)
    eos = tuple(getattr(lm, "eos_token_ids", ()) or ())
    if not eos:
        raise LMError(f"{getattr(lm, 'spec', '?')!r} has no EOS token to end a candidate's turn")
    return int(eos[0])


# ------------------------------------------------------------------------------------------------ scoring
def _rows(candidate_ids: Sequence[Sequence[int]], eot: int | None) -> list[list[int]]:
    rows = [list(c) + ([eot] if eot is not None else []) for c in candidate_ids]
    if not rows:
        raise ValueError("no candidates to score")
    if any(len(r) == 0 for r in rows):
        raise ValueError("a candidate tokenizes to nothing and there is no end-of-turn token to score")
    return rows


def _padded(rows: list[list[int]], pad: int) -> Any:
    torch = _torch()
    L = max(len(r) for r in rows)
    ids = torch.full((len(rows), L), pad, dtype=torch.long)
    for k, r in enumerate(rows):
        ids[k, : len(r)] = torch.tensor(r, dtype=torch.long)
    return ids


def _gather_sums(first_logp: Any, cand_logp: Any, rows: list[list[int]]) -> Any:
    """ℓ per row from the prompt's last-position log-probs [V] and the candidate batch's log-probs [K, L, V]:
    token 0 of row k is scored by the prompt's last position, token j ≥ 1 by row k's position j − 1."""
    torch = _torch()
    ids = _padded(rows, 0)
    lengths = torch.tensor([len(r) for r in rows])
    K, L = ids.shape
    first = first_logp[ids[:, 0]]
    if L > 1:
        rest = cand_logp[:, : L - 1].gather(2, ids[:, 1:, None])[..., 0]
        valid = torch.arange(1, L)[None, :] < lengths[:, None]
        rest = torch.where(valid, rest, torch.zeros((), dtype=rest.dtype)).sum(1)
    else:
        rest = torch.zeros(K, dtype=first.dtype)
    return first + rest


class PromptCache:
    """The KV cache of the last prompt a policy prefilled, reused for the next prompt's shared prefix.

    Consecutive decisions of one agent share the system turn, the one-shot example and often the goal (≈ 130 of
    ≈ 250 tokens with :class:`CommandPrompt`), so the next prefill forks this cache, crops it to the longest
    common prefix (at least ``min_shared`` tokens, else it starts afresh) and feeds only the rest. The stored
    cache is never extended in place (it is forked first), and it is tied to the weights that produced it:
    :meth:`CandidatePolicy.invalidate` drops it.
    """

    def __init__(self, min_shared: int = 16) -> None:
        self.min_shared = int(min_shared)
        self.ids: tuple[int, ...] = ()
        self.cache: Any = None
        self.reused_tokens = 0
        self.fed_tokens = 0

    def clear(self) -> None:
        self.ids, self.cache = (), None

    def prefill(self, lm: Any, prompt_ids: Sequence[int], **kw: Any) -> Any:
        """``lm.forward`` output (last-position logits, a cache covering ``prompt_ids``) for the prompt."""
        torch = _torch()
        ids = tuple(int(x) for x in prompt_ids)
        n = 0
        if self.cache is not None:
            m = min(len(ids), len(self.ids)) - 1  # feed at least one token: its logits score the first candidate
            while n < m and ids[n] == self.ids[n]:
                n += 1
        if n >= self.min_shared:
            cache = lm.crop_cache(lm.fork_cache(self.cache, 1), n)
            out = lm.forward(torch.tensor([list(ids[n:])], dtype=torch.long), cache, **kw)
        else:
            n = 0
            out = lm.forward(torch.tensor([list(ids)], dtype=torch.long), **kw)
        self.reused_tokens += n
        self.fed_tokens += len(ids) - n
        self.ids, self.cache = ids, out.cache
        return out


def candidate_logliks(lm: Any, prompt_ids: Sequence[int], candidate_ids: Sequence[Sequence[int]],
                      eot: int | None, *, prompt_cache: PromptCache | None = None) -> np.ndarray:
    """ℓ for each candidate (float64, shape (K,)) with the shared-prefix KV cache: one prefill of ``prompt_ids``
    (only its part not shared with ``prompt_cache``'s last prompt, when given), the cache forked K times
    (``lm.fork_cache``), one right-padded forward of the K candidates (+ ``eot``).

    Works on any WhiteBoxLM (``forward``/``fork_cache``/``crop_cache``). Log-softmax in float32 (LoRA log-ratios are
    small; progress_advantage README, Caveats), sums in float64.
    """
    torch = _torch()
    if not prompt_ids:
        raise ValueError("the prompt renders to no tokens: the first candidate token has no context")
    rows = _rows(candidate_ids, eot)
    kw = {"logits_to_keep": 1} if _accepts_logits_to_keep(lm) else {}
    if prompt_cache is not None:
        pre = prompt_cache.prefill(lm, prompt_ids, **kw)
    else:
        pre = lm.forward(torch.tensor([list(prompt_ids)], dtype=torch.long), **kw)
    first = torch.log_softmax(pre.logits[0, -1].float(), -1)
    cache = lm.fork_cache(pre.cache, len(rows))
    out = lm.forward(_padded(rows, int(getattr(lm, "pad_id", 0) or 0)), cache)
    logp = torch.log_softmax(out.logits.float(), -1)
    return _gather_sums(first, logp, rows).double().numpy()


def candidate_logliks_reencode(lm: Any, prompt_ids: Sequence[int], candidate_ids: Sequence[Sequence[int]],
                               eot: int | None) -> np.ndarray:
    """The brute-force reference (and PERF-7's baseline): one full forward of prompt + candidate (+ ``eot``) per
    candidate, no cache shared. Returns ℓ (float64, (K,))."""
    torch = _torch()
    rows = _rows(candidate_ids, eot)
    n = len(prompt_ids)
    if n == 0:
        raise ValueError("the prompt renders to no tokens: the first candidate token has no context")
    out = np.empty(len(rows))
    for k, r in enumerate(rows):
        logits = lm.forward(torch.tensor([list(prompt_ids) + r], dtype=torch.long)).logits[0]
        logp = torch.log_softmax(logits[n - 1: n - 1 + len(r)].float(), -1)
        out[k] = float(logp.gather(1, torch.tensor(r)[:, None]).double().sum())
    return out


_LTK: dict[type, bool] = {}


def _accepts_logits_to_keep(lm: Any) -> bool:
    """Whether ``lm.forward`` takes ``logits_to_keep`` (the hf backend: skips the LM head over the prefill)."""
    import inspect

    key = type(getattr(lm, "_lm", lm))
    if key not in _LTK:
        try:
            _LTK[key] = "logits_to_keep" in inspect.signature(key.forward).parameters
        except (TypeError, ValueError, AttributeError):
            _LTK[key] = False
    return _LTK[key]


# -------------------------------------------------------------------------------------- differentiable scoring
def _grad_call(lm: Any, ids: Any, cache: Any, *, last_only: bool = False) -> tuple[Any, Any]:
    """(logits, cache) with autograd on, through the backend's torch module (``lm.forward`` runs under no_grad).
    transformers models (``hf:`` and the policy side of an ``HFPair``, whose ``model`` is the peft model with the
    adapter on) and ``tiny:`` models are supported."""
    from agentmill.lm import tiny

    base = getattr(lm, "_lm", lm)
    if getattr(lm, "_on", None) is False:
        raise ValueError("cannot train the reference side of an HFPair (its adapter is disabled); train pair.policy")
    if isinstance(base, tiny.TinyLM):
        if cache is None:
            cache = tiny.TinyCache(base.cfg.layers)
        logits, _ = base.model(ids, cache)
        return logits[:, -1:] if last_only else logits, cache
    model = getattr(base, "model", None)
    if model is None or getattr(base, "tokenizer", None) is None:
        raise TypeError(f"training a CandidatePolicy needs a torch backend (hf:, tiny: or an HFPair's policy); "
                        f"{getattr(lm, 'spec', type(lm).__name__)!r} is not one")
    if cache is None:
        from transformers import DynamicCache

        cache = DynamicCache()
    kw = {"logits_to_keep": 1} if last_only else {}
    out = model(input_ids=ids, past_key_values=cache, use_cache=True, **kw)
    return out.logits, out.past_key_values


def candidate_logliks_torch(lm: Any, prompt_ids: Sequence[int], candidate_ids: Sequence[Sequence[int]],
                            eot: int | None) -> Any:
    """ℓ as a differentiable torch float32 tensor (K,): the shared-prefix computation of :func:`candidate_logliks`
    with autograd on. The prompt's cache is repeated on the batch axis in place (``batch_repeat_interleave``, a
    differentiable op) instead of deep-copied, so gradients reach the prompt's keys and values too."""
    torch = _torch()
    rows = _rows(candidate_ids, eot)
    with torch.enable_grad():
        logits, cache = _grad_call(lm, torch.tensor([list(prompt_ids)], dtype=torch.long), None, last_only=True)
        first = torch.log_softmax(logits[0, -1].float(), -1)
        cache.batch_repeat_interleave(len(rows))
        logits2, _ = _grad_call(lm, _padded(rows, int(getattr(lm, "pad_id", 0) or 0)), cache)
        logp = torch.log_softmax(logits2.float(), -1)
        return _gather_sums(first, logp, rows)


# ------------------------------------------------------------------------------------------------ the policy
@dataclass(frozen=True)
class Decision:
    """What the policy saw and computed at one ``act`` call ([R]: "each step records candidates and the
    prompt's token ids"); ``loglik`` is ℓ per candidate (before temperature)."""

    prompt_ids: tuple[int, ...]
    candidates: tuple[str, ...]
    loglik: np.ndarray
    chosen: int


class CandidatePolicy:
    """π(a|s) = softmax over the admissible commands of ℓ(a)/T (module docstring), on any WhiteBoxLM.

    Implements the ``envs.rollout.Policy`` protocol (``act``, ``logprob``) and the ``log_probs(obs, info,
    candidates)`` method of ``envs.policies``' softmax policies, so ``envs.policies.kl_per_step`` works on two
    CandidatePolicies (a LoRA policy and its reference). ``decisions`` collects one :class:`Decision` per ``act``
    call when ``record`` is true (``pop_decisions`` drains it).

    ℓ of a state is memoised (``memo`` entries, keyed by prompt ids and candidates), so ``logprob`` after ``act``
    costs nothing. Changing the model's weights outside :class:`LoRACandidatePolicy` requires :meth:`invalidate`.
    """

    uses_oracle = False
    free_text = False

    def __init__(self, lm: Any, render: Renderer | None = None, temperature: float = 1.0, *,
                 end_of_turn: int | None | str = "auto", record: bool = True, memo: int = 256,
                 reuse_prefix: bool = True) -> None:
        for name in ("forward", "fork_cache", "render", "encode"):
            if not callable(getattr(lm, name, None)):
                raise TypeError(f"CandidatePolicy needs a WhiteBoxLM (hf:, tiny:, scripted:whitebox, HFPair views); "
                                f"{getattr(lm, 'spec', type(lm).__name__)!r} has no {name}()")
        if not temperature > 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.lm = lm
        self.render = render if render is not None else CommandPrompt()
        self.temperature = float(temperature)
        self.eot: int | None = end_of_turn_id(lm) if end_of_turn == "auto" else end_of_turn  # type: ignore[assignment]
        self.record = record
        self.decisions: list[Decision] = []
        self._memo: OrderedDict[tuple[Any, ...], np.ndarray] = OrderedDict()
        self._memo_size = int(memo)
        self.prompt_cache = PromptCache() if reuse_prefix and callable(getattr(lm, "crop_cache", None)) else None

    def __repr__(self) -> str:
        return f"CandidatePolicy({getattr(self.lm, 'spec', '?')!r}, T={self.temperature})"

    # -- rendering
    @staticmethod
    def candidates_of(info: Mapping[str, Any], candidates: Sequence[str] | None = None) -> tuple[str, ...]:
        cands = tuple(candidates) if candidates is not None else tuple(info.get("admissible_commands") or ())
        if not cands:
            raise ValueError("CandidatePolicy chooses among info['admissible_commands'], which is empty")
        if len(set(cands)) != len(cands):
            raise ValueError(f"duplicate candidates {cands}: each command would be counted twice in the softmax")
        return cands

    def prompt_ids(self, obs: str, info: Mapping[str, Any], candidates: Sequence[str]) -> list[int]:
        prompt = self.render(obs, info, candidates)
        return list(self.lm.render(prompt))

    def candidate_ids(self, candidates: Sequence[str]) -> list[list[int]]:
        return [list(self.lm.encode(c)) for c in candidates]

    # -- scores
    def invalidate(self) -> None:
        """Forget memoised ℓ and the cached prompt (call after changing the model's weights)."""
        self._memo.clear()
        if self.prompt_cache is not None:
            self.prompt_cache.clear()

    def logliks(self, obs: str, info: Mapping[str, Any], candidates: Sequence[str] | None = None
                ) -> tuple[np.ndarray, tuple[str, ...], list[int]]:
        """(ℓ (K,) float64, candidates, prompt ids) at state (obs, info)."""
        cands = self.candidates_of(info, candidates)
        ids = self.prompt_ids(obs, info, cands)
        key = (tuple(ids), cands)
        ell = self._memo.get(key)
        if ell is None:
            ell = candidate_logliks(self.lm, ids, self.candidate_ids(cands), self.eot, prompt_cache=self.prompt_cache)
            if not np.all(np.isfinite(ell)):
                raise LMError(f"{getattr(self.lm, 'spec', '?')}: non-finite candidate log-likelihoods {ell}")
            self._memo[key] = ell
            if len(self._memo) > self._memo_size:
                self._memo.popitem(last=False)
        else:
            self._memo.move_to_end(key)
        return ell, cands, ids

    def log_probs(self, obs: str, info: Mapping[str, Any], candidates: Sequence[str] | None = None) -> np.ndarray:
        """log π(·|s) over the candidates (float64, (K,)), in candidate order."""
        ell, _, _ = self.logliks(obs, info, candidates)
        z = ell / self.temperature
        return z - _logsumexp(z)

    def act(self, obs: str, info: Mapping[str, Any], rng: np.random.Generator) -> tuple[str, float]:
        ell, cands, ids = self.logliks(obs, info)
        z = ell / self.temperature
        lp = z - _logsumexp(z)
        p = np.exp(lp)
        i = int(rng.choice(len(cands), p=p / p.sum()))
        if self.record:
            self.decisions.append(Decision(tuple(ids), cands, ell.copy(), i))
        return cands[i], float(lp[i])

    def logprob(self, obs: str, info: Mapping[str, Any], action: str) -> float:
        lp = self.log_probs(obs, info)
        cands = self.candidates_of(info)
        return float(lp[cands.index(action)]) if action in cands else -math.inf

    def pop_decisions(self) -> list[Decision]:
        out, self.decisions = self.decisions, []
        return out


def _logsumexp(z: np.ndarray) -> float:
    m = float(np.max(z))
    return m + math.log(float(np.exp(z - m).sum()))


# ------------------------------------------------------------------------------------------------ training
def _table_rows(steps: StepTable) -> list[tuple[str, Mapping[str, Any], str, tuple[str, ...] | None]]:
    return [(steps.obs[i], steps.info[i], steps.action[i], steps.candidates[i]) for i in range(len(steps))]


class LoRACandidatePolicy(CandidatePolicy):
    """A :class:`CandidatePolicy` whose ``parameters`` are trained with AdamW (lr 1e-4 [R]).

    ``parameters``: the tensors to train, e.g. ``HFPair.trainable_parameters()`` (the LoRA of ``pair.policy``, which
    must then be the ``lm``) or ``tiny_lm.model.parameters()``. :meth:`reset` restores their initial values and a
    fresh optimizer, so one loaded model serves every arm of a comparison (``policy_factory=policy.reset``).

    Updates run row by row, accumulating gradients (peak memory: one prompt prefill and one candidate batch with
    autograd), then take one optimizer step.
    """

    def __init__(self, lm: Any, parameters: Sequence[Any], render: Renderer | None = None, temperature: float = 1.0,
                 *, lr: float = 1e-4, weight_decay: float = 0.0, max_grad_norm: float | None = 1.0,
                 end_of_turn: int | None | str = "auto", record: bool = True, memo: int = 256,
                 reuse_prefix: bool = True) -> None:
        super().__init__(lm, render, temperature, end_of_turn=end_of_turn, record=record, memo=memo,
                         reuse_prefix=reuse_prefix)
        torch = _torch()
        self.parameters = [p for p in parameters if p.requires_grad]
        if not self.parameters:
            raise ValueError("LoRACandidatePolicy: no trainable parameters (requires_grad) given")
        self.lr, self.weight_decay, self.max_grad_norm = float(lr), float(weight_decay), max_grad_norm
        self._initial = [p.detach().clone() for p in self.parameters]
        self.optimizer = torch.optim.AdamW(self.parameters, lr=self.lr, weight_decay=self.weight_decay)
        self.updates = 0

    def reset(self) -> LoRACandidatePolicy:
        """Initial weights, a fresh AdamW, no memo, no decisions; returns self (usable as a policy factory)."""
        torch = _torch()
        with torch.no_grad():
            for p, p0 in zip(self.parameters, self._initial):
                p.copy_(p0)
        self.optimizer = torch.optim.AdamW(self.parameters, lr=self.lr, weight_decay=self.weight_decay)
        self.updates = 0
        self.decisions = []
        self.invalidate()
        return self

    def training_state(self) -> dict[str, Any]:
        """What a resumed training run needs to continue exactly: the trained tensors (copies), the AdamW state and
        the update count. ``torch.save``-able; :meth:`load_training_state` restores it onto the same model."""
        # deep copies: ``state_dict()`` hands out the live moment tensors, which the next step changes in place
        return {"parameters": [p.detach().clone() for p in self.parameters],
                "optimizer": copy.deepcopy(self.optimizer.state_dict()), "updates": self.updates}

    def load_training_state(self, state: Mapping[str, Any]) -> LoRACandidatePolicy:
        """Restore :meth:`training_state` (same parameter shapes, same order); memos are cleared. Returns self."""
        torch = _torch()
        saved = list(state["parameters"])
        if [tuple(t.shape) for t in saved] != [tuple(p.shape) for p in self.parameters]:
            raise ValueError("load_training_state: the saved tensors do not match this policy's parameters "
                             "(another model or adapter configuration)")
        with torch.no_grad():
            for p, t in zip(self.parameters, saved):
                p.copy_(t)
        self.optimizer = torch.optim.AdamW(self.parameters, lr=self.lr, weight_decay=self.weight_decay)
        self.optimizer.load_state_dict(copy.deepcopy(state["optimizer"]))  # never share moments with the source
        self.updates = int(state["updates"])
        self.decisions = []
        self.invalidate()
        return self

    def _log_pi_torch(self, obs: str, info: Mapping[str, Any], cands: tuple[str, ...]) -> Any:
        torch = _torch()
        ids = self.prompt_ids(obs, info, cands)
        ell = candidate_logliks_torch(self.lm, ids, self.candidate_ids(cands), self.eot)
        return torch.log_softmax(ell / self.temperature, 0)

    def _apply(self, lr: float | None) -> float:
        torch = _torch()
        norm = float(torch.nn.utils.clip_grad_norm_(self.parameters, self.max_grad_norm if self.max_grad_norm
                                                    else float("inf")))
        if lr is not None:
            for g in self.optimizer.param_groups:
                g["lr"] = float(lr)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.updates += 1
        self.invalidate()
        return norm

    def pg_update(self, steps: StepTable, advantages: np.ndarray, lr: float | None = None, *, kl_coef: float = 0.0,
                  ref: CandidatePolicy | None = None, normalize: str = "rows") -> dict[str, float]:
        """One policy-gradient step, the autograd twin of ``envs.policies.pg_step``: minimise

            L(θ) = (1/n) Σ_rows [ −A_row · log π_θ(a_row|s_row) + kl_coef · KL(π_θ(·|s_row) ‖ π_ref(·|s_row)) ]

        (KL exact over the row's candidates; π_ref from ``ref``, held fixed) with one AdamW step. With the caller's
        returns built from r_t − β·KL_t (``envs.policies.kl_per_step(policy, ref, steps)``) and ``kl_coef = β``
        this follows the gradient of the KL-regularised objective, whose fixed point is π*. ``n`` as in
        ``pg_step``'s ``normalize``; ``lr`` overrides the optimizer's step size for this and later steps.

        Returns diagnostics: rows, mean |A|, the loss, the gradient norm before clipping, seconds.
        """
        torch = _torch()
        t0 = time.perf_counter()
        adv, n = pg_inputs(steps, advantages, kl_coef=kl_coef, ref=ref, normalize=normalize)
        total = 0.0
        self.optimizer.zero_grad(set_to_none=True)
        for r, (obs, info, action, cands_) in enumerate(_table_rows(steps)):
            cands = self.candidates_of(info, cands_)
            if action not in cands:
                raise ValueError(f"row {r}: action {action!r} is not among the candidates the policy chose from")
            if adv[r] == 0.0 and kl_coef == 0.0:
                continue  # no gradient: skip the forward
            lp = self._log_pi_torch(obs, info, cands)
            loss = -float(adv[r]) * lp[cands.index(action)]
            if kl_coef > 0:
                lr_ = torch.as_tensor(ref.log_probs(obs, info, cands), dtype=lp.dtype)  # type: ignore[union-attr]
                loss = loss + kl_coef * (lp.exp() * (lp - lr_)).sum()
            loss = loss / n
            loss.backward()
            total += float(loss.detach())
        norm = self._apply(lr)
        return {"rows": float(len(steps)), "mean_abs_adv": float(np.abs(adv).mean()), "loss": total,
                "grad_norm": norm, "seconds": time.perf_counter() - t0}

    def distill_step(self, states: Sequence[tuple[str, Mapping[str, Any], Sequence[str], np.ndarray]],
                     lr: float | None = None) -> dict[str, float]:
        """One AdamW step on the mean cross-entropy H(π_target(·|s), π_θ(·|s)) over ``states`` =
        [(obs, info, candidates, target probabilities (K,))]: fits the policy to a known distribution per state
        (P-6a distils the exact π* of a small KeyDoor). Returns the mean loss and the mean KL(target ‖ π_θ)."""
        torch = _torch()
        t0 = time.perf_counter()
        if not states:
            raise ValueError("distill_step: no states")
        self.optimizer.zero_grad(set_to_none=True)
        total = kl = 0.0
        for obs, info, cands_, target in states:
            cands = self.candidates_of(info, cands_)
            q = np.asarray(target, dtype=np.float64)
            if q.shape != (len(cands),) or np.any(q < 0) or not math.isclose(q.sum(), 1.0, abs_tol=1e-6):
                raise ValueError(f"distill_step: the target must be a distribution over the {len(cands)} candidates")
            lp = self._log_pi_torch(obs, info, cands)
            qt = torch.as_tensor(q, dtype=lp.dtype)
            loss = -(qt * lp).sum() / len(states)
            loss.backward()
            total += float(loss.detach())
            with np.errstate(divide="ignore", invalid="ignore"):
                kl += float(np.where(q > 0, q * (np.log(q) - lp.detach().double().numpy()), 0.0).sum()) / len(states)
        norm = self._apply(lr)
        return {"loss": total, "kl_target": kl, "grad_norm": norm, "seconds": time.perf_counter() - t0}


# ------------------------------------------------------------------------------------------------ PERF-7
@dataclass
class SharedPrefixBenchmark:
    """PERF-7: ℓ of K candidates with the shared-prefix cache vs one full forward per candidate (best of
    ``repeats``, seconds), and the largest difference between the two (they must agree)."""

    prompt_tokens: int
    n_candidates: int
    candidate_tokens: list[int]
    shared_seconds: float
    reencode_seconds: float
    max_abs_diff: float
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def speedup(self) -> float:
        return self.reencode_seconds / self.shared_seconds


def benchmark_shared_prefix(lm: Any, prompt_ids: Sequence[int], candidate_ids: Sequence[Sequence[int]],
                            eot: int | None, *, repeats: int = 3) -> SharedPrefixBenchmark:
    """Time :func:`candidate_logliks` against :func:`candidate_logliks_reencode` on the same inputs (one warm-up
    call each first). Project target PERF-7 [R]: ≥ 3× with a prompt ≤ 256 tokens and ≤ 12 candidates."""
    torch = _torch()
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")

    def best(fn: Callable[[], np.ndarray]) -> tuple[float, np.ndarray]:
        out = fn()
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            out = fn()
            times.append(time.perf_counter() - t0)
        return min(times), out

    ts, a = best(lambda: candidate_logliks(lm, prompt_ids, candidate_ids, eot))
    tr, b = best(lambda: candidate_logliks_reencode(lm, prompt_ids, candidate_ids, eot))
    return SharedPrefixBenchmark(len(prompt_ids), len(candidate_ids), [len(c) for c in candidate_ids], ts, tr,
                                 float(np.max(np.abs(a - b))),
                                 {"spec": getattr(lm, "spec", "?"), "threads": torch.get_num_threads(),
                                  "repeats": repeats})


def benchmark_case(policy: CandidatePolicy, states: Sequence[tuple[str, Mapping[str, Any]]], *,
                   max_prompt_tokens: int = 256, max_candidates: int = 12,
                   ) -> tuple[list[int], list[list[int]], int | None, dict[str, Any]]:
    """A real decision for PERF-7: of ``states`` [(obs, info)], the one with the most admissible commands (at most
    ``max_candidates``, the first ones kept) whose prompt renders within ``max_prompt_tokens``. The caller supplies
    the states (e.g. KeyDoor random walks: lm does not import envs). Returns (prompt ids, candidate ids,
    end-of-turn id, a description)."""
    best: tuple[int, list[int], tuple[str, ...], str] | None = None
    for obs, info in states:
        cands = policy.candidates_of(info)[:max_candidates]
        ids = policy.prompt_ids(obs, info, cands)
        if len(ids) <= max_prompt_tokens and (best is None or len(cands) > best[0]):
            best = (len(cands), ids, cands, obs)
    if best is None:
        raise ValueError(f"no state renders within {max_prompt_tokens} prompt tokens")
    _, ids, cands, obs = best
    return ids, policy.candidate_ids(cands), policy.eot, {"obs": obs, "candidates": list(cands)}
