"""Training and evaluation settings of the maze method (spec rl-rollouts §2.9).

Every default below is this project's [R] choice from spec §2.9; the paper (arXiv:2606.22938) analyses gradient
flow and policy-gradient flow and gives no learning rates, step counts or batch sizes.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MazeConfig:
    """Hyperparameters of SFT, RLVR (exact flow and REINFORCE), distillation and Monte Carlo evaluation."""

    sft_steps: int = 2000
    """Adam steps of SFT on golden shortest paths (spec §2.9)."""
    sft_lr: float = 0.1
    """Adam learning rate of SFT (spec §2.9)."""
    sft_batch: int = 64
    """Golden paths per step in ``mode="sampled"`` SFT (spec §2.9: 64)."""
    rl_steps: int = 500
    """Adam steps of the exact policy-gradient flow on log E[T] (spec §2.9)."""
    rl_lr: float = 0.1
    """Adam learning rate of the exact flow and of REINFORCE (spec §2.9)."""
    reinforce_episodes: int = 12_000
    """Episodes of sampled REINFORCE in total (spec §2.9)."""
    reinforce_batch: int = 32
    """Episodes per REINFORCE update; the advantage is reward minus the batch mean (spec §2.9)."""
    t_max_factor: int = 20
    """REINFORCE horizon T_max = t_max_factor · T*; reward 1 - steps/T_max on success within T_max (spec §2.9)."""
    distill_traces: int = 2000
    """Successful teacher traces used for distillation (spec §2.9)."""
    distill_steps: int = 1000
    """Adam steps of maximum-likelihood distillation into a fresh uniform student (spec §6.4)."""
    distill_lr: float = 0.1
    """Adam learning rate of distillation (same as SFT; [R])."""
    mc_episodes: int = 20_000
    """Monte Carlo episodes for hitting-time estimates (spec §2.9: 20 000)."""
