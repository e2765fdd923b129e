"""A language world model for agent environments (E167, Qwen-AgentWorld): the Qwen message format and parser,
KeyDoor transition data, the three-stage recipe on a tiny model (CPT, SFT with reasoning, GRPO on a judge-plus-rule
reward), five-dimension evaluation, a simulated env, AgentWorldBench interop, and a steerable FactSearch world model
(``domain_factsearch``, ``search_wm``) (docs/methods/world_model.md)."""

from agentmill.methods.world_model.bench import bench_messages, export_bench, load_bench, score
from agentmill.methods.world_model.config import WMConfig
from agentmill.methods.world_model.data import TransitionTable, build_examples, collect_keydoor
from agentmill.methods.world_model.domain import KeyDoorDomain
from agentmill.methods.world_model.format import QwenFormat, extract_observation
from agentmill.methods.world_model.model import WorldModel
from agentmill.methods.world_model.rewards import make_reward
from agentmill.methods.world_model.simulator import SimulatedEnv
from agentmill.methods.world_model.train import train_cpt, train_grpo, train_sft

__all__ = ["KeyDoorDomain", "QwenFormat", "SimulatedEnv", "TransitionTable", "WMConfig", "WorldModel",
           "bench_messages", "build_examples", "collect_keydoor", "export_bench", "extract_observation",
           "load_bench", "make_reward", "score", "train_cpt", "train_grpo", "train_sft"]
