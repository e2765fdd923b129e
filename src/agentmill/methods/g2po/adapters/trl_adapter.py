"""Per-step G2PO-style (reconstructed) advantages inside TRL's ``GRPOTrainer`` [R].

**Returning advantages as rewards does not work.** TRL builds its advantages in
``_generate_and_score_completions`` as reward minus the mean of the ``num_generations`` completions of the same
prompt, divided by (std + 1e-4) unless ``scale_rewards="none"``: a precomputed advantage passed as a reward is
re-centred and re-scaled, and there is one scalar per completion, so no per-step credit inside a multi-turn
episode. This adapter therefore has two parts:

1. ``make_rollout_func(env_factory, render, max_steps)``: TRL's experimental ``rollout_func(prompts, trainer)``
   hook. Each prompt names a task; one full multi-turn episode is played per completion with the trainer's own
   model (plain temperature sampling). The completion is action tokens interleaved with environment feedback
   tokens; ``env_mask`` marks model tokens 1 and feedback 0 (TRL excludes the zeros from the loss), and the extra
   field ``agentmill_steps`` carries one serialised step row per action (obs, info without the oracle, action,
   reward, end, token span).
2. ``G2POGRPOTrainer(GRPOTrainer)``: after TRL has scored the batch, it rebuilds a ``StepTable`` from
   ``agentmill_steps`` (one group per run of ``num_generations`` completions), computes ``g2po_advantages`` (or
   GiGPO/GRPO), and replaces TRL's (B,) advantages by (B, T) per-token advantages: each step's advantage on its
   action tokens, 0 on feedback tokens. TRL 1.16's ``_compute_loss`` accepts (B, T) advantages.

Accepted range: ``TRL_REQUIREMENT`` (TRL 1.16.x), the same specifier as ``pyproject.toml``'s ``trl`` extra; single
process (groups must not be split across processes). A hooked method that disappears fails with "TRL internals
changed: <name> missing". The reward function is only logged by TRL here;
``episode_return`` (the undiscounted episode return) is the natural one.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from agentmill.core.extras import MissingExtraError
from agentmill.core.seeding import derive_seed
from agentmill.core.types import END_CONTINUES, END_TERMINATED, END_TRUNCATED, StepTable
from agentmill.envs.base import ORACLE_KEY
from agentmill.methods.g2po.config import G2POConfig, GiGPOConfig, GRPOConfig
from agentmill.methods.g2po.core import g2po_advantages, gigpo_advantages, grpo_advantages
from agentmill.methods.g2po.keys import ExactKey, StateKeyFn

TRL_REQUIREMENT = ">=1.16,<1.17"
"""TRL releases the adapter accepts; ``pyproject.toml``'s ``trl`` extra uses this exact specifier (a test holds them
equal), so ``pip install 'agentmill[trl]'`` never installs a TRL this adapter refuses. Why so narrow: the adapter
overrides private ``GRPOTrainer`` methods, which TRL changes between minor releases, and 1.16 is the series its real
trainer-step test runs on; TRL 1.15.0 has the hooks but its GRPO loss failed on CPU-only torch (its chunked
log-prob kernel needs Triton). Pre-releases inside the range (1.16.1.dev0) are accepted: a source install of a
1.16 branch."""
HOOKED = ("_generate_and_score_completions", "_compute_loss", "_generate")
"""GRPOTrainer methods whose behaviour the adapter relies on."""

Render = Callable[[str, Mapping[str, Any], int], str]
"""``render(obs, info, turn) -> text``: turn 0 returns the whole prompt (instructions and first observation); turn
k > 0 returns the feedback text appended after the k-th action, ending where the model's next action starts."""


def check_trl() -> str:
    """Import TRL, check the tested version range and the hooked internals; return the version string."""
    try:
        import trl
        from trl import GRPOTrainer
    except ImportError as exc:
        raise MissingExtraError("trl", "the G2PO TRL adapter") from exc
    from packaging.specifiers import SpecifierSet  # a TRL dependency, so present whenever TRL is
    from packaging.version import InvalidVersion, Version

    try:
        ok = Version(trl.__version__) in SpecifierSet(TRL_REQUIREMENT, prereleases=True)
    except InvalidVersion:
        ok = False
    if not ok:
        raise RuntimeError(f"unsupported TRL version {trl.__version__}: the G2PO adapter accepts trl{TRL_REQUIREMENT} "
                           f"(pip install 'trl{TRL_REQUIREMENT}', which 'agentmill[trl]' installs)")
    for name in HOOKED:
        if not callable(getattr(GRPOTrainer, name, None)):
            raise RuntimeError(f"TRL internals changed: GRPOTrainer.{name} missing")
    if "rollout_func" not in inspect.signature(GRPOTrainer.__init__).parameters:
        raise RuntimeError("TRL internals changed: GRPOTrainer(rollout_func=...) missing")
    return trl.__version__


def _strip_oracle(info: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in info.items() if k != ORACLE_KEY}


def make_rollout_func(env_factory: Callable[[str], Any], render: Render, max_steps: int, *,
                      max_new_tokens: int = 16, seed: int = 0) -> Callable[[list, Any], dict[str, list]]:
    """A TRL ``rollout_func(prompts, trainer)`` playing one episode per prompt with the trainer's model.

    ``env_factory(prompt)`` returns a fresh ``TextEnv`` for the task the prompt names. The env of completion k at
    training step s is reset with ``derive_seed(seed, "trl-rollout", s, k)`` and its action tokens are sampled with
    that seed too. An action is the generated text up to its first newline. An episode stops when the env
    terminates or truncates, after ``max_steps`` actions, or (truncated) when the next turn would exceed
    ``trainer.args.max_completion_length``.
    """
    if max_steps < 1 or max_new_tokens < 1:
        raise ValueError("make_rollout_func: max_steps and max_new_tokens must be >= 1")

    def rollout_func(prompts: list, trainer: Any) -> dict[str, list]:
        import torch

        model, tok = trainer.model, trainer.processing_class
        args = trainer.args
        if getattr(args, "use_vllm", False):
            raise ValueError("the G2PO rollout_func samples with the trainer's HF model; set use_vllm=False")
        temperature = float(getattr(args, "temperature", 1.0))
        limit = int(getattr(args, "max_completion_length", 256) or 256)
        step_no = int(getattr(trainer.state, "global_step", 0))
        out: dict[str, list] = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": [],
                                "agentmill_steps": []}
        device = next(model.parameters()).device
        for k, prompt in enumerate(prompts):
            if not isinstance(prompt, str):
                raise TypeError("make_rollout_func: prompts must be task strings (got a conversation); render the "
                                "chat template inside render()")
            s = derive_seed(seed, "trl-rollout", step_no, k)
            env = env_factory(prompt)
            try:
                obs, info = env.reset(seed=s)
                prompt_ids = tok(render(obs, _strip_oracle(info), 0), add_special_tokens=False).input_ids
                completion: list[int] = []
                logprobs: list[float] = []
                mask: list[int] = []
                steps: list[dict[str, Any]] = []
                for t in range(max_steps):
                    ctx = torch.tensor([prompt_ids + completion], device=device)
                    with torch.no_grad(), torch.random.fork_rng(devices=[]):
                        torch.manual_seed(derive_seed(s, "tokens", t))
                        gen = model.generate(ctx, attention_mask=torch.ones_like(ctx), max_new_tokens=max_new_tokens,
                                             do_sample=True, temperature=temperature, top_k=0, top_p=1.0,
                                             output_scores=True, return_dict_in_generate=True,
                                             pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
                    new = gen.sequences[0, ctx.shape[1]:].tolist()
                    # scores are the processed (temperature-scaled) logits: their log-softmax is the sampling log-prob
                    lps = [float(torch.log_softmax(sc[0].float(), -1)[tid]) for sc, tid in zip(gen.scores, new)]
                    action = tok.decode(new, skip_special_tokens=True).split("\n")[0].strip()
                    span = (len(completion), len(completion) + len(new))
                    completion += new
                    logprobs += lps
                    mask += [1] * len(new)
                    nobs, reward, terminated, truncated, ninfo = env.step(action)
                    row = {"t": t, "obs": obs, "info": _strip_oracle(info), "action": action,
                           "reward": float(reward), "next_obs": nobs, "next_info": _strip_oracle(ninfo),
                           "span": list(span), "end": END_TERMINATED if terminated else
                           (END_TRUNCATED if truncated else END_CONTINUES),
                           "won": bool(ninfo.get("won", False))}
                    steps.append(row)
                    if row["end"] != END_CONTINUES:
                        break
                    feedback = tok(render(nobs, _strip_oracle(ninfo), t + 1), add_special_tokens=False).input_ids
                    if t + 1 == max_steps or len(completion) + len(feedback) + max_new_tokens > limit:
                        row["end"] = END_TRUNCATED
                        break
                    completion += feedback
                    logprobs += [0.0] * len(feedback)
                    mask += [0] * len(feedback)
                    obs, info = nobs, ninfo
            finally:
                env.close()
            out["prompt_ids"].append(prompt_ids)
            out["completion_ids"].append(completion)
            out["logprobs"].append(logprobs)
            out["env_mask"].append(mask)
            out["agentmill_steps"].append(steps)
        return out

    return rollout_func


def episode_return(completions: list, agentmill_steps: list | None = None, **_: Any) -> list[float]:
    """TRL reward function: each episode's undiscounted return (TRL only logs it under ``G2POGRPOTrainer``)."""
    if agentmill_steps is None:
        raise ValueError("episode_return needs the agentmill_steps field: use make_rollout_func as rollout_func")
    return [float(sum(r["reward"] for r in steps)) for steps in agentmill_steps]


def steps_to_table(steps_per_completion: Sequence[Sequence[Mapping[str, Any]]], num_generations: int,
                   prefix: str = "") -> tuple[StepTable, np.ndarray, np.ndarray]:
    """Rebuild the StepTable of a TRL batch: completion i belongs to group i // num_generations (TRL's
    ``RepeatSampler`` places the copies of a prompt consecutively). Returns (table, completion index of each row,
    token span of each row (S, 2))."""
    if num_generations < 1 or len(steps_per_completion) % num_generations:
        raise ValueError(f"steps_to_table: {len(steps_per_completion)} completions are not whole groups of "
                         f"{num_generations}")
    cols: dict[str, list[Any]] = {n: [] for n in ("group_id", "traj_id", "t", "obs", "next_obs", "info", "next_info",
                                                  "action", "reward", "end", "success")}
    owner: list[int] = []
    spans: list[list[int]] = []
    for i, steps in enumerate(steps_per_completion):
        if not steps:
            raise ValueError(f"steps_to_table: completion {i} has no steps")
        won = bool(steps[-1].get("won", False))
        for row in steps:
            cols["group_id"].append(f"{prefix}g{i // num_generations}")
            cols["traj_id"].append(f"c{i}")
            for name in ("t", "obs", "next_obs", "info", "next_info", "action", "reward", "end"):
                cols[name].append(row[name])
            cols["success"].append(won)
            owner.append(i)
            spans.append(list(row["span"]))
    return StepTable(**cols), np.asarray(owner, dtype=np.int64), np.asarray(spans, dtype=np.int64).reshape(-1, 2)


def per_token_advantages(step_adv: np.ndarray, owner: np.ndarray, spans: np.ndarray, shape: tuple[int, int]
                         ) -> np.ndarray:
    """(B, T) float64: each step's advantage on its action tokens, 0 elsewhere (feedback, padding)."""
    out = np.zeros(shape)
    for a, i, (lo, hi) in zip(step_adv.tolist(), owner.tolist(), spans.tolist()):
        if hi > shape[1]:
            raise ValueError(f"per_token_advantages: span {lo}:{hi} of completion {i} exceeds {shape[1]} tokens")
        out[i, lo:hi] = a
    return out


_TRAINER_CLASS: type | None = None


def g2po_trainer_class() -> type:
    """``G2POGRPOTrainer``, built on first use so that importing this module does not import TRL."""
    global _TRAINER_CLASS
    if _TRAINER_CLASS is not None:
        return _TRAINER_CLASS
    check_trl()
    import torch
    from trl import GRPOTrainer

    class G2POGRPOTrainer(GRPOTrainer):
        """``GRPOTrainer`` whose advantages are per-token G2PO-style (or GiGPO/GRPO) step advantages.

        Extra keyword arguments: ``key_fn`` (default ``ExactKey()``; rows carry ``info`` without the oracle, so
        ``FieldsKey`` works when the env provides the fields) and ``estimator_config`` (a ``G2POConfig`` (default),
        ``GiGPOConfig`` or ``GRPOConfig``, which also selects the estimator).
        """

        def __init__(self, *args: Any, key_fn: StateKeyFn = ExactKey(),
                     estimator_config: G2POConfig | GiGPOConfig | GRPOConfig = G2POConfig(), **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.agentmill_key_fn = key_fn
            self.agentmill_config = estimator_config

        def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
            out = super()._generate_and_score_completions(inputs)
            if self.accelerator.num_processes > 1:
                raise NotImplementedError("G2POGRPOTrainer supports one process (groups must not be split)")
            steps = [x.get("agentmill_steps") for x in inputs]
            if any(s is None for s in steps):
                raise ValueError("G2POGRPOTrainer needs the agentmill_steps field: pass rollout_func="
                                 "make_rollout_func(...)")
            mode = "train" if self.model.training else "eval"
            n_gen = self.num_generations if mode == "train" else self.num_generations_eval
            table, owner, spans = steps_to_table(steps, n_gen, prefix=f"s{self.state.global_step}:")
            cfg = self.agentmill_config
            if isinstance(cfg, GRPOConfig):
                res = grpo_advantages(table, cfg)
            elif isinstance(cfg, GiGPOConfig):
                res = gigpo_advantages(table, self.agentmill_key_fn, cfg)
            else:
                res = g2po_advantages(table, self.agentmill_key_fn, cfg)
            mask = out["completion_mask"]
            adv = per_token_advantages(res.advantages, owner, spans, tuple(mask.shape))
            out["advantages"] = torch.as_tensor(adv, dtype=torch.float32, device=mask.device)
            for name in ("merge_rate", "shared_visit_fraction"):
                if name in res.diagnostics:
                    self._metrics[mode][f"g2po/{name}"].append(res.diagnostics[name])
            return out

    _TRAINER_CLASS = G2POGRPOTrainer
    return G2POGRPOTrainer


def __getattr__(name: str) -> Any:
    """``from ...trl_adapter import G2POGRPOTrainer`` works and imports TRL only then."""
    if name == "G2POGRPOTrainer":
        return g2po_trainer_class()
    raise AttributeError(name)
