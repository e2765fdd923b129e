"""The two long-running jobs of ``agentmill constraint-rot``, given objects the CLI has already parsed and checked:
``run`` (episodes × conditions with one actor, resumable) and ``cross`` (summarisers × actors on identical inputs),
plus the provenance every run manifest carries and the one-line JSON summaries the commands print.

Kept here rather than in the CLI so the command modules stay a thin face: what a run does to the office sandbox, the
result file and the manifest is read in one place, and a test can call it without argparse. Progress goes through a
``progress(total)`` context manager that returns a ``tick(description)`` callable (the CLI passes a rich bar)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from agentmill.methods.constraint_rot.runs import actor_config, cpu_info, package_versions, sha256_file

Tick = Callable[[str], None]
Progress = Callable[[int], contextlib.AbstractContextManager[Tick]]


@contextlib.contextmanager
def no_progress(total: int) -> Iterator[Tick]:
    """The silent ``progress`` of tests and library callers."""
    yield lambda description: None


def provenance(episodes_file: Path, episodes: Sequence[Any], seed: int) -> dict[str, Any]:
    """What every run entry of a manifest records first: the command line, package versions, the CPU, the episodes
    file with its sha256 and size, and the seed."""
    return {"argv": sys.argv[1:], "versions": package_versions(), "cpu": cpu_info(), "episodes": str(episodes_file),
            "episodes_sha256": sha256_file(episodes_file), "n_episodes": len(episodes), "seed": seed}


def compactor_entries(compactors: Sequence[Any]) -> list[dict[str, Any]]:
    return [{"name": m.name, "label": getattr(m, "label", m.name), "config_hash": m.config_hash, "repr": repr(m)}
            for m in compactors]


def run_conditions(actor: Any, episodes: Sequence[Any], conds: Sequence[Any], out: Path, *, counter: Any,
                   resume: bool, progress: Progress = no_progress) -> dict[str, int]:
    """Run every (episode, condition) not already in ``out`` (with ``resume``) and append one fsynced row each, in
    the real office sandbox (loopback SMTP and HTTP servers). Returns the counts the command prints."""
    from agentmill.envs.office import OfficeSandbox
    from agentmill.methods.constraint_rot.loop import AgentLoop, ResultWriter, result_key
    from agentmill.methods.constraint_rot.metrics import load_rows
    from agentmill.methods.constraint_rot.specs import stamp_summary

    with OfficeSandbox(0) as sb:
        loop = AgentLoop(actor, sb, counter=counter)
        done = {result_key(r) for r in load_rows(out) if not r.get("error")} if resume and out.is_file() else set()
        todo = [(ep, c) for ep in episodes for c in conds if loop.resume_key(ep, c) not in done]
        writer = ResultWriter(out)
        counts = {"planned": len(episodes) * len(conds), "skipped": len(episodes) * len(conds) - len(todo),
                  "rows": 0, "violations": 0, "errors": 0, "summary_failed": 0}
        with progress(len(todo)) as tick:
            for ep, cond in todo:
                res = loop.run(ep, cond)
                row = stamp_summary(res.row, cond.compactor, res.compactions)
                writer.append(row)
                counts["rows"] += 1
                counts["violations"] += bool(row.get("violation"))
                counts["errors"] += bool(row.get("error"))
                counts["summary_failed"] += bool(row.get("summary_failed"))
                tick(f"{cond.label} {ep.episode_id}")
    return counts


def run_crossing(actors: dict[str, Any], compactors: dict[str, Any], episodes: Sequence[Any], out: Path, *,
                 counter: Any, progress: Progress = no_progress
                 ) -> tuple[list[dict[str, Any]], dict[tuple[str, str], set[Any]]]:
    """Every actor × summariser × episode through compaction, rows appended to ``out``. One summary per (episode,
    summariser): later actors hit the summary cache, so every actor reads the same compacted context. Returns the
    rows and, per (episode, summariser), the set of model-input digests seen (one digest = identical inputs)."""
    from agentmill.envs.office import OfficeSandbox
    from agentmill.methods.constraint_rot import conditions as C
    from agentmill.methods.constraint_rot.loop import AgentLoop, ResultWriter
    from agentmill.methods.constraint_rot.specs import stamp_summary

    rows: list[dict[str, Any]] = []
    seen: dict[tuple[str, str], set[Any]] = {}
    writer = ResultWriter(out)
    with OfficeSandbox(0) as sb, progress(len(actors) * len(compactors) * len(episodes)) as tick:
        for a, actor in actors.items():
            loop = AgentLoop(actor, sb, counter=counter)
            for s, m in compactors.items():
                for ep in episodes:
                    res = loop.run(ep, C.compacted(m))
                    row = {**stamp_summary(res.row, m, res.compactions), "summariser": s, "actor_spec": a}
                    writer.append(row)
                    rows.append(row)
                    seen.setdefault((ep.episode_id, s), set()).add(row.get("model_input_sha"))
                    tick(f"{a} x {s}")
    return rows, seen


def dev_cases(episodes: Sequence[Any], counter: Any, keep_last: int) -> tuple[list[Any], int]:
    """The attack optimiser's dev cases: each episode run (``AlwaysComply``, no compaction) to its compaction point;
    the payload goes into the last distractor tool output outside the kept tail. (cases, episodes without one)."""
    from agentmill.envs.office import OfficeSandbox
    from agentmill.methods.constraint_rot.attacks.cases import attack_cases, compaction_points

    with OfficeSandbox(0) as sb:
        return attack_cases(compaction_points(sb, list(episodes), counter, keep_last), keep_last)


def actor_entries(actors: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"label": a, "name": getattr(x, "name", a), "config": actor_config(x)} for a, x in actors.items()]


def organism_summary(adapter: Path, card: Any, trained: bool, key: str) -> dict[str, Any]:
    """What ``organism train`` prints: where the adapter is, whether it was trained now, and its card's numbers."""
    losses = card.training.get("losses") or [None]
    return {"adapter_dir": str(adapter), "key": key, "trained_now": trained, "reused": not trained,
            "base": card.base, "base_sha256": card.base_sha256, "data_manifest_hash": card.data_manifest_hash,
            "n_examples": card.n_examples, "kinds": card.kinds, "instinct": card.instinct,
            "dtype": card.hyperparameters.get("dtype"), "steps": card.training.get("steps"),
            "loss_first": losses[0], "loss_last": losses[-1], "seconds": card.training.get("seconds"),
            "n_trainable": card.training.get("n_trainable"), "validated": card.validated}


def attack_summary(result: Any) -> dict[str, Any]:
    """What ``attack optimise`` prints of the frozen attack."""
    return {"template_id": result.template_id, "slots": result.slots, "drop_rate": result.drop_rate,
            "filler_drop_rate": result.filler_drop_rate, "clean_drop_rate": result.clean_drop_rate,
            "fitness": result.fitness, "random_best_fitness": result.random_best_fitness,
            "payload_tokens": result.payload_tokens, "evaluations": result.evaluations, "n_dev": result.n_dev,
            "content_hash": result.content_hash}
