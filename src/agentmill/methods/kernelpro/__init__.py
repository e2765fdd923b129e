"""KernelPro (arXiv 2606.26453): diagnose, then prescribe, then search over compiled CPU kernels.

A roofline measured on this machine, Stage-1 bottleneck classification, 15 deterministic micro-profiling tools
(assembly inspection standing in for SASS checks), a correctness wall against the known reward hacks, and MCTS over
compiled-and-measured candidates from a fixed transformation library (exhaustively measurable) or an LLM."""

from agentmill.methods.kernelpro.config import (MARCH, KernelProConfig, SearchConfig, TimingConfig, ToolThresholds,
                                                WallConfig)
from agentmill.methods.kernelpro.core import OptimizeResult, optimize
from agentmill.methods.kernelpro.feedback import Finding, Profile, render_feedback
from agentmill.methods.kernelpro.library import EXPLOITS, enumerate_space, render
from agentmill.methods.kernelpro.roofline import Ceilings, RooflineReport, calibrate, classify_time
from agentmill.methods.kernelpro.search import Outcome, SearchResult, greedy, mcts, random_search
from agentmill.methods.kernelpro.tables import MeasuredTable
from agentmill.methods.kernelpro.tasks import TASKS, Task, get_task
from agentmill.methods.kernelpro.tools import TOOLS, diagnose
from agentmill.methods.kernelpro.wall import Evaluation, WallVerdict, evaluate, evaluate_many

__all__ = ["EXPLOITS", "MARCH", "TASKS", "TOOLS", "Ceilings", "Evaluation", "Finding", "KernelProConfig",
           "MeasuredTable", "OptimizeResult", "Outcome", "Profile", "RooflineReport", "SearchConfig", "SearchResult",
           "Task", "TimingConfig", "ToolThresholds", "WallConfig", "WallVerdict", "calibrate", "classify_time",
           "diagnose", "enumerate_space", "evaluate", "evaluate_many", "get_task", "greedy", "mcts", "optimize",
           "random_search", "render", "render_feedback"]
