"""KernelPro (arXiv 2606.26453): diagnose, then prescribe, then search over compiled CPU kernels.

A roofline measured on this machine, Stage-1 bottleneck classification, 15 deterministic micro-profiling tools
(assembly inspection standing in for SASS checks), a correctness wall against the known reward hacks, and MCTS over
compiled-and-measured candidates from a fixed transformation library (exhaustively measurable) or an LLM."""

from agentmill.methods.kernelpro.config import MARCH, KernelProConfig
from agentmill.methods.kernelpro.core import OptimizeResult, optimize
from agentmill.methods.kernelpro.feedback import Finding, Profile
from agentmill.methods.kernelpro.library import EXPLOITS, enumerate_space
from agentmill.methods.kernelpro.roofline import Ceilings, RooflineReport, calibrate
from agentmill.methods.kernelpro.search import SearchResult, greedy, mcts, random_search
from agentmill.methods.kernelpro.tables import MeasuredTable
from agentmill.methods.kernelpro.tasks import TASKS, Task, get_task
from agentmill.methods.kernelpro.tools import TOOLS, diagnose
from agentmill.methods.kernelpro.wall import Evaluation, WallVerdict, evaluate

__all__ = ["EXPLOITS", "MARCH", "TASKS", "TOOLS", "Ceilings", "Evaluation", "Finding", "KernelProConfig",
           "MeasuredTable", "OptimizeResult", "Profile", "RooflineReport", "SearchResult", "Task", "WallVerdict",
           "calibrate", "diagnose", "enumerate_space", "evaluate", "get_task", "greedy", "mcts", "optimize",
           "random_search"]
