"""Training and evaluation settings of the maze method.

Every default below is this project's [R] choice (docs/methods/backtrack_maze.md, Hyperparameters); the paper
(arXiv:2606.22938) analyses gradient flow and policy-gradient flow and gives no learning rates, step counts or batch
sizes.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MazeConfig:
    """Hyperparameters of SFT, RLVR (exact flow and REINFORCE), distillation and Monte Carlo evaluation."""

    sft_steps: int = 2000
    """Adam steps of SFT on golden shortest paths [R]."""
    sft_lr: float = 0.1
    """Adam learning rate of SFT [R]."""
    sft_batch: int = 64
    """Golden paths per step in ``mode="sampled"`` SFT (64 [R])."""
    rl_steps: int = 500
    """Adam steps of the exact policy-gradient flow on log E[T] [R]."""
    rl_lr: float = 0.1
    """Adam learning rate of the exact flow and of REINFORCE [R]."""
    reinforce_episodes: int = 12_000
    """Episodes of sampled REINFORCE in total [R]."""
    reinforce_batch: int = 32
    """Episodes per REINFORCE update; the advantage is reward minus the batch mean [R]."""
    t_max_factor: int = 20
    """REINFORCE horizon T_max = t_max_factor · T*; reward 1 - steps/T_max on success within T_max [R]."""
    distill_traces: int = 2000
    """Successful teacher traces used for distillation [R]."""
    distill_steps: int = 1000
    """Adam steps of maximum-likelihood distillation into a fresh uniform student [R] (README deviation 7)."""
    distill_lr: float = 0.1
    """Adam learning rate of distillation (same as SFT; [R])."""
    mc_episodes: int = 20_000
    """Monte Carlo episodes for hitting-time estimates (20 000 [R])."""
