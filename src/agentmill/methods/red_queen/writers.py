"""Writers: the agent variants a ReviewWorld search evolves.

``ParamWriter`` is the template writer θ = (effort, polish bias, verbosity) of ``envs.review_world``;
:class:`ReviewWorkspace` is the search's workspace over it: roles ``submit`` (judge-dependent: the slot's judge
accepts the writer's document; 16 tasks, each an RNG stream) and ``format`` (judge-independent: |length| ≤ 1.5).
An LM writer (an endpoint rewriting documents) is not built.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from agentmill.envs.review_world import ReviewWorld, clip_writer, machine_docs
from agentmill.methods.red_queen.archive import Node
from agentmill.methods.red_queen.ledger import RoleSpec


@dataclass(frozen=True)
class ParamWriter:
    theta: tuple[float, float, float]

    def write(self, world: ReviewWorld, n: int, rng: np.random.Generator):
        return machine_docs(np.asarray(self.theta), n, rng, world.constants)


@dataclass
class ReviewWorkspace:
    world: ReviewWorld

    def roles(self) -> list[RoleSpec]:
        tasks = tuple(f"t{i}" for i in range(self.world.constants.n_tasks))
        return [RoleSpec("submit", "evaluator_dependent", tasks, slot=0),
                RoleSpec("format", "evaluator_independent", tasks)]

    def seed(self) -> list[float]:
        return [float(v) for v in self.world.constants.seed_writer]

    def expand(self, parent: Node, rng: np.random.Generator) -> list[float] | None:
        c = self.world.constants
        if rng.random() < c.p_unviable:
            return None
        child = clip_writer(np.asarray(parent.state, dtype=float) + rng.normal(0, c.expand_sd, 3))
        return [float(v) for v in child]

    def evaluate(self, node: Node, role: RoleSpec, task: str, judge: Any | None,
                 rng: np.random.Generator) -> int | tuple[int, Any]:
        doc = ParamWriter(tuple(node.state)).write(self.world, 1, rng)
        if role.name == "submit":
            return int(judge.accept(doc)[0]), doc.to_rows()[0]
        return int(abs(doc.length[0]) <= self.world.constants.format_bound)
