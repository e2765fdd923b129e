"""Compaction strategies of ConstraintRot (docs/methods/constraint_rot.md "Use it" 3): the common interface, the non-LLM
compactors and the LLM summariser."""

from agentmill.methods.constraint_rot.compactors.base import (CompactionResult, Compactor, NoCompaction,
                                                             block_starts, make_config_hash, messages_hash)
from agentmill.methods.constraint_rot.compactors.extractive import ExtractiveSummary
from agentmill.methods.constraint_rot.compactors.head_tail import HeadAndTail
from agentmill.methods.constraint_rot.compactors.llm_summary import LLMSummary
from agentmill.methods.constraint_rot.compactors.note_following import NoteFollowingSummary
from agentmill.methods.constraint_rot.compactors.repeated import Repeated
from agentmill.methods.constraint_rot.compactors.structured import StructuredSummary
from agentmill.methods.constraint_rot.compactors.tool_clear import ToolResultClearing
from agentmill.methods.constraint_rot.compactors.window import SlidingWindow

__all__ = ["CompactionResult", "Compactor", "ExtractiveSummary", "HeadAndTail", "LLMSummary", "NoCompaction",
           "NoteFollowingSummary", "Repeated", "SlidingWindow", "StructuredSummary", "ToolResultClearing",
           "block_starts", "make_config_hash", "messages_hash"]
