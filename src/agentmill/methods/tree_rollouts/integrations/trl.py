"""Tree rollouts inside TRL's ``GRPOTrainer`` through its experimental ``rollout_func`` hook (E162, [R]).

TRL (>= 0.26) calls ``rollout_func(prompts, trainer)`` with the per-process slice of the batch, in which its
``RepeatSampler`` places ``num_generations`` consecutive copies of each prompt. This adapter grows one tree per
run of identical prompts with exactly as many leaves as the run is long, and returns one row per input, in order:
``prompt_ids``, ``completion_ids`` (the whole completion, shared prefix included, plus EOS when sampled) and
``logprobs`` (sampling logprobs of every completion token), plus ``tree_reward``, ``tree_id``, ``branch_pos``,
``leaf_depth``, ``tree_mixed`` and ``uucb_terms``, which TRL forwards to reward functions. Register
:func:`reward_from_tree` as the reward function so TRL's reward is the one the selector saw.

TRL then computes flat group advantages over the returned leaves; tree-aware token advantages cannot be injected
without overriding private trainer methods (not done). In TRL mode (equal leaves G) the tree's benefit is fewer
generated and forward tokens per group [R].

    from trl import GRPOConfig, GRPOTrainer
    from agentmill.methods.tree_rollouts.integrations.trl import make_trl_rollout_func, reward_from_tree
    from agentmill.envs.arithmetic import ArithmeticTask

    def verify(completion, prompt):            # self-verifying arithmetic: the answer is in the prompt
        return ArithmeticTask.from_prompt(prompt).verify(completion)

    trainer = GRPOTrainer(model=..., reward_funcs=reward_from_tree, args=GRPOConfig(num_generations=8, ...),
                          train_dataset=..., rollout_func=make_trl_rollout_func(verifier=verify))
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Callable, Mapping

import numpy as np

from agentmill.lm.base import MissingExtraError
from agentmill.lm.fork import StopSpec, WhiteBoxForker
from agentmill.methods.tree_rollouts.config import TreeConfig
from agentmill.methods.tree_rollouts.sampler import build_tree
from agentmill.methods.tree_rollouts.selectors import Selector, make_selector
from agentmill.methods.tree_rollouts.tree import Reward, every_k, top_entropy, union

MIN_TRL = (0, 26)


def _check_trl_version() -> str:
    try:
        import trl
    except ImportError as e:  # pragma: no cover - exercised only without the extra
        raise MissingExtraError("trl", "the TRL rollout_func adapter") from e
    parts = tuple(int(x) for x in trl.__version__.split(".")[:2] if x.isdigit())
    if parts < MIN_TRL:
        raise RuntimeError(f"the tree rollout_func needs trl >= 0.26 (rollout_func(prompts, trainer)); "
                           f"found {trl.__version__}")
    return trl.__version__


def prompt_key(prompt: Any) -> str:
    """The key of a prompt in ``answers``: the text itself, or the JSON of a conversation."""
    return prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True, ensure_ascii=False)


def _check_sampling(args: Any, temperature: float | None) -> float:
    """The adapter samples with plain temperature only; anything else would make its logprobs off-policy."""
    if getattr(args, "use_vllm", False):
        raise ValueError("the tree rollout_func samples with the HF model; set use_vllm=False")
    for name, neutral in (("top_p", 1.0), ("repetition_penalty", 1.0)):
        v = getattr(args, name, neutral)
        if v is not None and float(v) != neutral:
            raise ValueError(f"tree rollouts support plain temperature sampling only; {name}={v} must be {neutral}")
    for name in ("top_k", "min_p"):
        v = getattr(args, name, None)
        if v not in (None, 0, 0.0, -1):
            raise ValueError(f"tree rollouts support plain temperature sampling only; unset {name} (got {v})")
    t = float(getattr(args, "temperature", 1.0))
    if temperature is not None and float(temperature) != t:
        raise ValueError(f"temperature override {temperature} differs from trainer.args.temperature={t}; the "
                         "trainer recomputes logprobs at its own temperature")
    return t


class _TrainerLM:
    """The trainer's policy as a white-box LM (``HFLM`` over the unwrapped model, no_grad, eval mode)."""

    def __init__(self, trainer: Any) -> None:
        from agentmill.lm.hf import HFLM

        model = trainer.accelerator.unwrap_model(trainer.model)
        tok = getattr(trainer, "processing_class", None) or trainer.tokenizer
        self.model, self.hf = model, HFLM(model, tok, spec="trl:policy", info={"spec": "trl:policy"})


def make_trl_rollout_func(*, verifier: Callable[[str, Any], Reward | Any], answers: Mapping[str, Any] | None = None,
                          selector: str | Selector = "uucb", tree: TreeConfig | None = None, lm: Any | None = None,
                          temperature: float | None = None, branch_every: int = 8) -> Callable[[list, Any], dict]:
    """A ``rollout_func`` growing one tree per run of identical prompts (see the module docstring).

    ``verifier(completion_text, truth)`` gets ``answers[prompt_key(prompt)]`` when ``answers`` is given, else the
    prompt's text (self-verifying tasks parse it); it returns a ``Reward`` or anything with ``value``/``reason``.
    ``lm``: a white-box LM to sample with instead of the trainer's model (tests, a frozen sampler).
    """
    _check_trl_version()
    sel = make_selector(selector) if isinstance(selector, str) else selector
    base_cfg = tree or TreeConfig(budget_tokens=None, max_leaves=8)

    def rollout_func(prompts: list, trainer: Any) -> dict[str, list]:
        args = trainer.args
        temp = _check_sampling(args, temperature)
        max_len = int(getattr(args, "max_completion_length", None) or base_cfg.max_new_tokens)
        process = int(getattr(getattr(trainer, "accelerator", None), "process_index", 0))
        step = int(getattr(getattr(trainer, "state", None), "global_step", 0))
        model = None
        if lm is not None:
            white = lm
        else:
            holder = _TrainerLM(trainer)
            white, model = holder.hf, holder.model
        was_training = bool(getattr(model, "training", False))
        if model is not None:
            model.eval()
        try:
            rows = _rollout(prompts, white, process, step, temp, max_len)
        finally:
            if model is not None and was_training:
                model.train()
        if len(rows["prompt_ids"]) != len(prompts):
            raise AssertionError(f"rollout_func built {len(rows['prompt_ids'])} rows for {len(prompts)} inputs")
        return rows

    def _rollout(prompts: list, white: Any, process: int, step: int, temp: float, max_len: int) -> dict[str, list]:
        from dataclasses import replace

        forker = WhiteBoxForker(white)
        eos = list(getattr(white, "eos_token_ids", ()) or ())
        out: dict[str, list] = {k: [] for k in ("prompt_ids", "completion_ids", "logprobs", "tree_reward", "tree_id",
                                                "branch_pos", "leaf_depth", "tree_mixed", "uucb_terms")}
        i = 0
        run_index = 0
        while i < len(prompts):
            j = i
            while j < len(prompts) and prompt_key(prompts[j]) == prompt_key(prompts[i]):
                j += 1
            prompt = prompts[i]
            key = prompt_key(prompt)
            if answers is not None:
                if key not in answers:
                    raise KeyError(f"no answer for prompt sha1={hashlib.sha1(key.encode()).hexdigest()[:12]} "
                                   "in `answers`")
                truth = answers[key]
            else:
                truth = key if isinstance(prompt, str) else prompt[-1]["content"]
            ids = white.render(prompt if isinstance(prompt, str) else prompt)

            def verify(_tokens, text, truth=truth):
                r = verifier(text, truth)
                return r if isinstance(r, Reward) else Reward(getattr(r, "value", r), getattr(r, "reason", ""))

            cfg = replace(base_cfg, budget_tokens=None, max_leaves=j - i, max_new_tokens=max_len, temperature=temp)
            h = int(hashlib.sha1(key.encode()).hexdigest()[:8], 16)
            t = build_tree(ids, forker, verify, sel, cfg, tree_key=(step, process, run_index, h),
                           prompt_key=key[:100], branch_policy=union(every_k(branch_every), top_entropy(2)),
                           stop=StopSpec())
            full_lp: dict[int, np.ndarray] = {}
            for lf in t.leaves:
                head = full_lp[lf.parent_leaf][: lf.new_from] if lf.parent_leaf is not None else np.zeros(0, np.float32)
                full_lp[lf.id] = np.concatenate([head, lf.logprobs])
            tree_id = f"{step}-{process}-{run_index}"
            for lf in t.leaves:
                comp = lf.tokens.tolist()
                lps = full_lp[lf.id].astype(float).tolist()
                if lf.finish == "eos" and eos and lf.eos_logprob is not None:
                    comp.append(int(eos[0]))
                    lps.append(float(lf.eos_logprob))
                out["prompt_ids"].append(list(ids))
                out["completion_ids"].append(comp)
                out["logprobs"].append(lps)
                out["tree_reward"].append(lf.reward.value)
                out["tree_id"].append(tree_id)
                out["branch_pos"].append(lf.new_from)
                out["leaf_depth"].append(lf.new_from)
                out["tree_mixed"].append(t.is_mixed())
                out["uucb_terms"].append(dict(lf.uucb_terms))
            i, run_index = j, run_index + 1
        return out

    return rollout_func


def reward_from_tree(completions: list, tree_reward: list | None = None, **kwargs: Any) -> list[float | None]:
    """TRL reward function returning the reward the tree's verifier gave (None = unscorable, which TRL excludes)."""
    if tree_reward is None:
        raise ValueError("reward_from_tree needs the 'tree_reward' column: use it with make_trl_rollout_func")
    if len(tree_reward) != len(completions):
        raise ValueError(f"{len(tree_reward)} tree rewards for {len(completions)} completions")
    return [None if r is None else float(r) for r in tree_reward]
