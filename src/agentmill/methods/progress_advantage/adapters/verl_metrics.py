"""Progress advantage as a free verl metric [R]. No verl import: the function reads a ``DataProto``-shaped
object (``.batch`` mapping of tensors, ``.non_tensor_batch`` mapping of arrays).

Use it after verl has computed ``ref_log_prob`` (any run with a reference model, i.e. a KL term)::

    metrics.update(step_progress_advantage(batch, beta=config.actor_rollout_ref.actor.kl_loss_coef))

β should be the actor's KL coefficient. Caveat (README, Caveats): verl's ``use_kl_loss`` puts the KL in the loss,
whose fixed point is not the KL-regularised optimum of the paper's identity, so the score is a heuristic there, not A*.
"""

from __future__ import annotations

from typing import Any

from agentmill.methods.progress_advantage.adapters import token_progress_metrics


def step_progress_advantage(data: Any, beta: float, *, policy_key: str = "old_log_probs",
                            ref_key: str = "ref_log_prob", mask_key: str = "response_mask",
                            traj_key: str = "traj_uid") -> dict[str, float]:
    """β·Σ_{action tokens}(old_log_probs − ref_log_prob) per row, summarised as ``pa/*`` metrics; per-trajectory
    sum/min/last when ``non_tensor_batch[traj_key]`` exists (verl-agent: one row per step)."""
    batch = getattr(data, "batch", None)
    if batch is None:
        raise TypeError("step_progress_advantage expects a verl DataProto (an object with .batch)")
    missing = [k for k in (policy_key, ref_key) if k not in batch]
    if missing:
        raise ValueError(f"step_progress_advantage: the batch has no {missing}; verl computes ref_log_prob only when "
                         "a reference model is used (a KL term: use_kl_loss or use_kl_in_reward)")
    mask = batch[mask_key] if mask_key in batch else batch["attention_mask"][:, -batch[policy_key].shape[1]:]
    nt = getattr(data, "non_tensor_batch", None) or {}
    traj = nt.get(traj_key) if hasattr(nt, "get") else None
    return token_progress_metrics(batch[policy_key], batch[ref_key], mask, beta,
                                  traj_ids=None if traj is None else list(traj))
