"""Metis (E168): text-first agent memory that codifies a plan into a validated, sandboxed tool only when its
pattern recurs (docs/methods/metis.md)."""

from agentmill.methods.metis.config import MetisConfig, ScriptedPolicyConfig
from agentmill.methods.metis.memory import MemoryStore
from agentmill.methods.metis.skills import export_agent_skills
from agentmill.methods.metis.stream import StreamResult, run_frozen_diagnostic, run_stream

__all__ = ["MemoryStore", "MetisConfig", "ScriptedPolicyConfig", "StreamResult", "export_agent_skills",
           "run_frozen_diagnostic", "run_stream"]
