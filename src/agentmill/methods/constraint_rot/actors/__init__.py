"""Actors of ConstraintRot (docs/methods/constraint_rot.md "Deviations from the paper" 5): the interface and the
scripted actors used in exact tests."""

from agentmill.methods.constraint_rot.actors.base import Action, Actor, ActorBrief, visible
from agentmill.methods.constraint_rot.actors.scripted import (AlwaysComply, AlwaysRefuse, LatestInstructionWins,
                                                              RandomActor, RuleReader, ScriptedActor)

__all__ = ["Action", "Actor", "ActorBrief", "AlwaysComply", "AlwaysRefuse", "LatestInstructionWins", "RandomActor",
           "RuleReader", "ScriptedActor", "visible"]
from agentmill.methods.constraint_rot.actors.endpoint import EndpointActor, EndpointError  # noqa: E402

__all__ += ["EndpointActor", "EndpointError"]
