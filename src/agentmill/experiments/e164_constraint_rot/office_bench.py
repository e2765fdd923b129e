"""What every E164 experiment shares: the token counter, the office sandbox, the episode generator's call, the
compactors under test, and claims built from the pre-registered criteria (prereg.yaml)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from agentmill.experiments.protocol import Claim


def make_counter(name: str) -> Any:
    from agentmill.methods.constraint_rot.messages import SmolLM2Counter, WhitespaceCounter

    if name == "whitespace":
        return WhitespaceCounter()
    if name == "smollm2":
        return SmolLM2Counter()
    raise ValueError(f"counter must be 'whitespace' or 'smollm2', got {name!r}")


def model_reads(s: Any, model: str | None) -> list[Path]:
    """``Experiment.reads`` of the E164 experiments: the files of every model the setup names (``base``,
    ``summariser``, a ``serve:`` summariser's model) and, for ``counter="smollm2"``, the SmolLM2 GGUF whose tokenizer
    counts the tokens; so a replaced GGUF reruns them. The organism adapter is declared when it is found
    (``organism_profiles.obtain_adapter``): its address comes from the SFT data, which takes ~30 s to build."""
    from agentmill.lm import model_files

    specs = [getattr(s, name, None) for name in ("base", "summariser")]
    if getattr(s, "counter", None) == "smollm2":
        specs.append("hf:smollm2")
    return [p for spec in specs if isinstance(spec, str) and spec for p in model_files(spec.removeprefix("serve:"))]


@contextlib.contextmanager
def office() -> Iterator[Any]:
    """One office sandbox for the whole run (its own root is in memory where possible: ``scratch_dir``)."""
    from agentmill.envs.office import OfficeSandbox

    with OfficeSandbox(0, smtp=False, http=False) as sb:
        yield sb


def episodes(sb: Any, counter: Any, n: int, seed: int, distractor_tokens: Sequence[int], *,
             locations: Sequence[str] | None = None, allowed_share: float = 0.0, split: str = "test_iid",
             attack: Any = None) -> list[Any]:
    """``n`` replayed episodes of ``split`` over every location (default) with distractors in
    ``distractor_tokens``; ``attack`` (an ``AttackSpec``) plants one attacker-controlled tool output in each."""
    from agentmill.methods.constraint_rot.catalogue import load_catalogue
    from agentmill.methods.constraint_rot.generate import LOCATIONS, generate_episodes

    lo, hi = (int(x) for x in distractor_tokens)
    return generate_episodes(load_catalogue(), split=split, n=n, seed=seed, counter=counter,
                             locations=tuple(locations or LOCATIONS), distractor_tokens=(lo, hi),
                             allowed_share=allowed_share, attack=attack, sandbox=sb)


def prereg_claim(criterion_id: str, statement: str, metric: str, *, paper_value: str = "—",
                 claim_id: str | None = None, exact_why: str = "") -> Claim:
    """A protocol claim from a pre-registered criterion (``eq`` → ``in [t, t]`` judged exact; ``le``/``ge`` →
    ``<=``/``>=`` on the CI; ``abs_le`` → the difference's CI inside ``[-t, t]``). ``claim_id`` (default the
    criterion id) tells apart one criterion applied to several arms. An ``eq`` criterion (prereg's ``note: exact``)
    needs ``exact_why``: why this metric is deterministic here, which the YAML cannot know (the same criterion may
    be measured on a scripted agent or on a sampled model). ``le``/``ge`` with ``exact_why`` are judged exact too:
    measured on a scripted agent, the rate has no sampling noise and its "CI" would be the point."""
    from agentmill.methods.constraint_rot.prereg import load_prereg

    k = load_prereg().criterion(criterion_id)
    src = f"prereg.yaml {criterion_id} ({k.metric})"
    if k.threshold is None:
        raise ValueError(f"{criterion_id}: direction {k.direction!r} has no threshold; build the claim by hand")
    t, cid = float(k.threshold), claim_id or criterion_id
    if k.direction == "eq":
        return Claim(cid, statement, src, paper_value, metric, "in", t, upper=t, judge_on="exact", exact_why=exact_why)
    if k.direction in ("le", "ge"):
        return Claim(cid, statement, src, paper_value, metric, "<=" if k.direction == "le" else ">=", t,
                     judge_on="exact" if exact_why else "ci", exact_why=exact_why)
    if exact_why:
        raise ValueError(f"{criterion_id}: exact_why is for 'eq', 'le' and 'ge' criteria, not {k.direction!r}")
    if k.direction == "abs_le":
        return Claim(cid, statement, src, paper_value, metric, "in", -t, upper=t)
    raise ValueError(f"{criterion_id}: direction {k.direction!r} is not mapped to a protocol claim")


def compactors(counter: Any) -> dict[str, Any]:
    from agentmill.methods.constraint_rot.compactors import (ExtractiveSummary, HeadAndTail, NoteFollowingSummary,
                                                             SlidingWindow, StructuredSummary, ToolResultClearing)

    return {"window": SlidingWindow(counter=counter), "head_tail": HeadAndTail(counter=counter),
            "tool_clear": ToolResultClearing(counter=counter), "extractive": ExtractiveSummary(counter=counter),
            "structured": StructuredSummary(counter=counter), "note_following": NoteFollowingSummary(counter=counter)}


CI_FLAG_WHY = ("a 0/1 flag read off a bootstrap CI: the criterion is about the interval itself, whose sampling "
               "uncertainty is already in it")


def ci_flag_claim(cid: str, statement: str, metric: str, source: str) -> Claim:
    """A ``ci_includes``/``ci_excludes`` criterion encoded as an exact 0/1 metric judged on the point."""
    return Claim(cid, statement, source, "—", metric, "in", 1.0, upper=1.0, judge_on="exact", exact_why=CI_FLAG_WHY)
