"""The substrate every E171 organism experiment reads: a shipped tiny refusal organism, gate-checked.

``organism_or_precondition`` loads ``tiny-refusal-<variant>`` and returns it with its card's gate numbers, or the
"precondition not met" note when the card is not validated. The preferred substrate, the SmolLM2 refusal organism,
is trained and gated by ``e171.first_token_probe_organism_smollm2`` (full; ≈ 33–41 min of LoRA training, once, outside
this paper's 12-min full budget); every record notes what its card says on this machine (:func:`smollm2_note`) —
not trained, or its gate numbers — and the tiny organism, named in every setup and record, carries the verdicts.
"""

from __future__ import annotations

from typing import Any

from agentmill.experiments.protocol import PRECONDITION_NOT_MET

SMOLLM2_ORGANISM_NOTE = (f"{PRECONDITION_NOT_MET}: no validated SmolLM2 refusal organism (its LoRA training, "
                         "≈ 33–41 min on this CPU, is outside this paper's 12-min full budget; train and gate it with "
                         "e171.first_token_probe_organism_smollm2 at full) — the shipped tiny organism carries the "
                         "verdict")


def smollm2_note(variant: str) -> str:
    """What the SmolLM2 organism of ``variant`` is on this machine, for the note beside a tiny-organism verdict:
    not trained (:data:`SMOLLM2_ORGANISM_NOTE`), trained but not validated, or its gates (failed ones named, with
    numbers). Reads the newest cached card; loads nothing."""
    from agentmill.methods.first_token_probe.organism_smollm2 import cached_cards

    cards = cached_cards(variant)
    if not cards:
        return SMOLLM2_ORGANISM_NOTE
    path, card = cards[0]
    if not card.get("gates"):
        return (f"{PRECONDITION_NOT_MET}: SmolLM2 organism {path.name} is trained but not validated — the shipped "
                "tiny organism carries the verdict")
    g, ok = card["gates"], card.get("gate_pass", {})
    vals = ", ".join(f"{k} {float(g[k]):.3f}" for k in sorted(g))
    failed = [k for k in sorted(ok) if not ok[k]]
    if failed:
        return (f"{PRECONDITION_NOT_MET}: SmolLM2 organism {path.name}: gates failed ({', '.join(failed)}; {vals}) — "
                "the shipped tiny organism carries the verdict")
    return (f"SmolLM2 organism {path.name} passed its gates ({vals}) but this record reads the shipped tiny "
            "organism (its claims were not rerun on SmolLM2)")


def organism_or_precondition(variant: str, data: dict[str, Any], allow_unvalidated: bool = False) -> Any | None:
    """The validated tiny organism of ``variant`` (its gates noted in ``data``), or None with ``data
    ["precondition"]`` set when its card is missing or not validated. ``allow_unvalidated`` (smoke setups only,
    never judged) loads it anyway and stamps ``data["unvalidated_organism"]``."""
    from agentmill.methods.first_token_probe.organism import OrganismCard, OrganismNotValidated, load_organism, shipped_dir

    try:
        lm, card = load_organism(variant, allow_unvalidated=allow_unvalidated)
    except FileNotFoundError:
        data["precondition"] = f"{PRECONDITION_NOT_MET}: tiny-refusal-{variant} is not shipped (no card)"
        return None
    except OrganismNotValidated:
        card = OrganismCard.load(shipped_dir(variant))
        failed = ", ".join(k for k, ok in card.gate_pass.items() if not ok) or "not measured"
        data["precondition"] = (f"{PRECONDITION_NOT_MET}: tiny-refusal-{variant} failed its gates ({failed}); "
                                "no fallback organism remains")
        data.setdefault("organism_gates", {})[variant] = {"values": card.gates, "pass": card.gate_pass,
                                                          "validated": False}
        return None
    data.setdefault("organism_gates", {})[variant] = {"values": card.gates, "pass": card.gate_pass,
                                                      "validated": card.validated}
    if not card.validated:
        failed = ", ".join(k for k, ok in card.gate_pass.items() if not ok) or "not measured"
        note = (f"{PRECONDITION_NOT_MET}: tiny-refusal-{variant} failed its gates ({failed}); its numbers are "
                "recorded as observed only, never judged")
        prev = data.get("unvalidated_organism")
        data["unvalidated_organism"] = note if not prev or note in prev else f"{prev}; {note}"
    notes = data.setdefault("smollm2_organisms", {})
    notes[variant] = smollm2_note(variant)
    data["smollm2_organism"] = (notes[variant] if len(notes) == 1
                                else "; ".join(f"{v}: {n}" for v, n in notes.items()))
    return lm


def recheck_gates(rollouts: list[Any], data: dict[str, Any], variant: str) -> dict[str, float]:
    """R1, R5 and R6 recomputed on this run's own rollouts (reported beside the card's)."""
    from agentmill.methods.first_token_probe.organism import gate_values

    vals = gate_values(rollouts)
    out = {k: round(vals[k], 4) for k in ("R1", "R5", "R6")}
    data.setdefault("gates_recheck", {})[variant] = out
    return out


def finish(out: dict[str, Any], claims: Any, data: dict[str, Any]) -> dict[str, Any]:
    """``out`` as the record keeps it: when the run read an unvalidated organism, every claim metric becomes
    ``<metric>_observed`` with the precondition note as its reason (verdict "inconclusive", never judged)."""
    from agentmill.experiments.protocol import unjudged

    note = data.get("unvalidated_organism")
    if not note:
        return out
    return unjudged(out, [c.metric for c in claims], note, data)
