"""E163 (Wei & Kim, arXiv:2606.22938): RLVR learns to backtrack efficiently, SFT on golden paths does not.

Chain-of-thought is modelled as path finding on a multigraph path-star maze
(:class:`agentmill.envs.pathstar.PathStarMultigraph`). A tabular policy over (depth, facing) is trained by SFT on
golden shortest paths, by RLVR (exact policy-gradient flow, or sampled REINFORCE) and by distillation of RLVR
traces; :func:`hitting_time` gives the exact expected steps to the target. See README.md.
"""

from agentmill.envs.pathstar import PathStarMultigraph
from agentmill.methods.backtrack_maze.config import MazeConfig
from agentmill.methods.backtrack_maze.hitting import (HittingTime, expected_hitting_time, hitting_time,
                                                      objective_and_grad, optimal_time, restart_time,
                                                      sft_converged_time)
from agentmill.methods.backtrack_maze.policy import Adam, TabularPolicy
from agentmill.methods.backtrack_maze.rollout import Episodes, mc_hitting_time, run_episodes
from agentmill.methods.backtrack_maze.train import (TrainLog, Traces, ce_grad, collect_traces, distill,
                                                    fit_student, train_rlvr_exact, train_rlvr_reinforce, train_sft)
from agentmill.methods.backtrack_maze.wrappers import RestartAfter

__all__ = [
    "PathStarMultigraph", "MazeConfig", "TabularPolicy", "Adam", "HittingTime", "hitting_time",
    "expected_hitting_time", "objective_and_grad", "optimal_time", "sft_converged_time", "restart_time",
    "Episodes", "run_episodes", "mc_hitting_time", "TrainLog", "Traces", "ce_grad", "train_sft",
    "train_rlvr_exact", "train_rlvr_reinforce", "collect_traces", "distill", "fit_student", "RestartAfter",
]
