"""Phrasing swap: does the organism condition on the rule's *wording* or on the episode's *values*?

A diagnostic beside the gates (docs/LOG.md 2026-11-25, session 17 "crossed diagnostic"). It takes the ``present``
episodes of a finished validation of ``split`` — regenerated from the same seed, so they are the same episodes —
and rewrites only the rule sentence: the family's phrasing of the *other* split (``test_iid`` episodes get the
``train`` phrasings, alternating; ``train`` episodes get the ``test_iid`` ones), rendered with the episode's own
parameter values. Each new decision is paired with the same episode's ``absent`` row of that validation.

Reading the two paired counts side by side (:class:`~.validate.Paired`):

- test_iid episodes: if the training *sentences* were what the organism learned, the swap brings back the
  train-split conditioning (many more "obeys only with the rule"); if it learned the training *values*, nothing
  changes;
- train episodes: the test sentence removes sentence-bound conditioning but leaves value-bound conditioning.

Written to ``validation_swap_<split>.json`` and ``validation_rows_swap_<split>.jsonl`` beside the card; the card
and the validation files are never touched.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from agentmill.core.records import write_text_atomic
from agentmill.envs.office import OfficeSandbox
from agentmill.methods.constraint_rot.catalogue import Catalogue
from agentmill.methods.constraint_rot.conditions import full_context
from agentmill.methods.constraint_rot.generate import Episode
from agentmill.methods.constraint_rot.loop import AgentLoop
from agentmill.methods.constraint_rot.organism.validate import (
    ROWS_FILE, Paired, cell_episodes, paired_decisions, save_rows)
from agentmill.methods.constraint_rot.predicates import render_template

OTHER_SPLIT = {"test_iid": "train", "train": "test_iid"}


@dataclass(frozen=True)
class SwapReport:
    split: str
    phrasing_split: str
    n: int
    seed: int
    original: Paired
    swapped: Paired
    rows: list[dict[str, Any]]

    def to_dict(self) -> dict[str, Any]:
        return {"split": self.split, "phrasing_split": self.phrasing_split, "n": self.n, "seed": self.seed,
                "original": asdict(self.original), "swapped": asdict(self.swapped)}


def swap_phrasing(ep: Episode, index: int, phrasing_split: str) -> tuple[Episode, str, str]:
    """``ep`` with its rule sentence replaced by ``phrasing_split``'s phrasing number ``index`` (cycled) of the
    same family, rendered with the episode's own values; also returns the phrasing id and the new sentence."""
    inst = ep.instance
    options = inst.family.phrasings_for(phrasing_split)
    phr = options[index % len(options)]
    text = render_template(phr.text, inst.params, where=f"{inst.family.source}: phrasings[{phr.id}]")
    if inst.text not in ep.policy_frame:
        raise ValueError(f"episode {ep.episode_id}: its rule text is not in the policy frame; nothing to swap")
    return replace(ep, policy_frame=ep.policy_frame.replace(inst.text, text)), phr.id, text


def run_phrasing_swap(adapter_dir: str | Path, cat: Catalogue, *, split: str = "test_iid", n_per_cell: int,
                      seed: int = 1, actor: Any = None, counter: Any = None) -> SwapReport:
    """Re-run the ``present`` cell of the ``split`` validation with the other split's phrasings (module docstring).
    Needs that validation's rows beside the card, at the same ``n_per_cell`` and ``seed``."""
    if split not in OTHER_SPLIT:
        raise ValueError(f"split must be one of {sorted(OTHER_SPLIT)}, got {split!r}")
    adapter_dir = Path(adapter_dir)
    rows_file = adapter_dir / (ROWS_FILE if split == "test_iid" else f"validation_rows_{split}.jsonl")
    hint = (f"run `agentmill constraint-rot organism validate {adapter_dir} --n-per-cell {n_per_cell} "
            f"--seed {seed}{'' if split == 'test_iid' else ' --split ' + split}` first")
    if not rows_file.is_file():
        raise ValueError(f"{rows_file}: no {split} validation rows; {hint}")
    old = [json.loads(line) for line in rows_file.read_text(encoding="utf-8").splitlines() if line.strip()]
    by_cell = {c: [r for r in old if r.get("cell") == c] for c in ("present", "absent")}
    episodes = cell_episodes(cat, split, n_per_cell, seed, counter)
    ids = [ep.episode_id for ep in episodes]
    if [r["episode_id"] for r in by_cell["present"]] != ids:
        raise ValueError(f"{rows_file}: its present episodes are not those of n_per_cell={n_per_cell}, "
                         f"seed={seed}; {hint}")
    if actor is None:
        from agentmill.methods.constraint_rot.organism.actor import OrganismActor
        actor = OrganismActor(adapter_dir)
    other = OTHER_SPLIT[split]
    rows: list[dict[str, Any]] = []
    with OfficeSandbox(seed, smtp=False, http=False) as sb:
        loop = AgentLoop(actor, sb, max_steps_per_turn=1, counter=counter)
        for i, ep in enumerate(episodes):
            swapped, phrasing, text = swap_phrasing(ep, i, other)
            row = loop.run(swapped, full_context()).row
            if row.get("error"):
                raise RuntimeError(f"phrasing-swap episode {ep.episode_id} crashed: {row['error']}")
            rows.append({**row, "phrasing": phrasing, "rule_text": text})
    report = SwapReport(split, other, n_per_cell, seed, paired_decisions(by_cell["present"], by_cell["absent"]),
                        paired_decisions(rows, by_cell["absent"]), rows)
    save_rows(adapter_dir, {"present_swapped": rows}, f"validation_rows_swap_{split}.jsonl")
    write_text_atomic(adapter_dir / f"validation_swap_{split}.json", json.dumps(report.to_dict(), indent=2) + "\n")
    return report
