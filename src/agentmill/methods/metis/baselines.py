"""Baselines' pieces. The memory policies themselves are :class:`MetisConfig` modes (``none``, ``text_only``,
``code_naive``, ``eager``, ``metis``), run by the same agent loop. ``TrajectoryTranscriber`` is the failing arm as
secondary sources describe it [S]: the literal call sequence of one successful run with slot substitution — same
pages fetched, same page_limit, the field names of the day — no validation, no demotion."""

from __future__ import annotations

from agentmill.envs.appsim import Step, step_endpoints
from agentmill.methods.metis.codify import compile_steps
from agentmill.methods.metis.policy import ActResult
from agentmill.methods.metis.records import ToolSource


class TrajectoryTranscriber:
    name = "transcribe"

    def transcribe(self, res: ActResult, key: str, fields_used) -> ToolSource:
        """``fields_used(endpoint, logical)`` → the physical field the run read."""
        steps: tuple[Step, ...] = res.steps
        pages = res.trace.pages

        def pagination(i: int, s: Step) -> tuple[str, int | None, int]:
            n, limit = pages.get(i, (1, None))
            return "pages", limit, n

        src = compile_steps(steps, pagination=pagination, fields=fields_used,
                            header=f"transcribed trajectory for pattern: {key}")
        return ToolSource(src, "run", tuple(step_endpoints(steps)))
