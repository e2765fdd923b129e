"""Export memory in the Agent Skills layout (agentskills.io: a folder per skill with ``SKILL.md`` whose front
matter has ``name`` and ``description``, optional ``references/`` and ``scripts/``).

One folder per plan: ``SKILL.md`` (the plan's steps), ``references/facts.md`` and ``references/pitfalls.md`` (facts
and pitfalls about the plan's endpoints), ``scripts/tool.py`` when the pattern has an active tool. No user-content
field value is exported: plans hold slot references, facts come from API metadata, instances are not exported."""

from __future__ import annotations

import re
from pathlib import Path

from agentmill.core.records import write_text_atomic
from agentmill.envs.appsim import step_endpoints
from agentmill.methods.metis.memory import MemoryStore

TOOL_HEADER = ("# Codified by Metis. Run it only behind a capability broker (agentmill.core.tool_sandbox): it\n"
               "# expects an `api` object whose call(app, endpoint, **args) is served by the parent process.\n")


def skill_name(key: str) -> str:
    """Lower-case hyphenated slug of the pattern key, ≤ 64 characters."""
    slug = re.sub(r"[^a-z0-9]+", "-", key.lower()).strip("-")
    return slug[:64].rstrip("-") or "pattern"


def export_agent_skills(store: MemoryStore, out_dir: Path | str) -> list[Path]:
    out = Path(out_dir)
    written: list[Path] = []
    used: set[str] = set()
    for plan in sorted(store.plans(), key=lambda p: p.pattern_key):
        name = skill_name(plan.pattern_key)
        base, i = name, 2
        while name in used:
            suffix = f"-{i}"
            name, i = base[: 64 - len(suffix)] + suffix, i + 1
        used.add(name)
        d = out / name
        eps = step_endpoints(plan.steps)
        desc = (f"Use when the user asks: {plan.pattern_key}. A plan of {len(plan.steps)} API steps over "
                f"{', '.join(eps)}; succeeded {plan.succeeded} of {plan.seen} times.")[:1024]
        steps = "\n".join(f"{k + 1}. `{s.describe()}`" for k, s in enumerate(plan.steps))
        body = (f"---\nname: {name}\ndescription: {desc}\n---\n\n# {plan.pattern_key}\n\nSlots in braces are "
                f"filled from the request; `$rK` names the result of step K.\n\n{steps}\n\nSee "
                f"references/facts.md and references/pitfalls.md before running the steps.\n")
        written.append(write_text_atomic(d / "SKILL.md", body))
        facts = [f for f in store.facts() if f.subject in eps or f.subject in {e.split('.')[0] for e in eps}]
        written.append(write_text_atomic(d / "references" / "facts.md", "# Facts\n\n" + "".join(
            f"- `{f.subject}` {f.key} = {f.value} (since task {f.valid_from})\n" for f in facts)))
        pits = [p for p in store.pitfalls() if p.endpoint in eps or p.code == 401 or p.endpoint == plan.pattern_key]
        written.append(write_text_atomic(d / "references" / "pitfalls.md", "# Pitfalls\n\n" + "".join(
            f"- `{p.endpoint}` error {p.code}: {p.remedy} (seen {p.count}×)\n" for p in pits)))
        tool = store.active_tool(plan.pattern_key)
        if tool is not None:
            written.append(write_text_atomic(d / "scripts" / "tool.py", TOOL_HEADER + tool.source))
    return written
