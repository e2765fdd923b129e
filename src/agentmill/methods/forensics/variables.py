"""Typed environment variables, interventions and arms, and the single-variable rule checked twice.

A :class:`Variable` renders into named template slots; rendering records the character span of every slot in every
model-visible document (:class:`Rendered`). An :class:`Arm` changes at most one variable from the control. The rule
is checked on the assignment (:func:`changed_variable`: exactly one variable differs, else
:class:`MultiVariableArmError`) and on the rendered text (:func:`check_span_locality`: every character that differs
between the control's and the arm's documents lies inside that variable's slot spans, else
:class:`ConfoundedArmError`, whose message names the document and the line that broke). The second check catches
what the first cannot: a template whose wording outside the slots depends on a variable.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Kind = Literal["categorical", "numeric", "bool"]
Role = Literal["control", "test", "dose", "positive_control"]


class MultiVariableArmError(ValueError):
    """An arm whose assignment differs from the control in more (or fewer) than one variable."""


class ConfoundedArmError(ValueError):
    """An arm whose rendered text differs from the control's outside the changed variable's slots.

    ``diff_outside_slots`` lists ``(document, line, control_text, arm_text)`` of the first offending lines."""

    def __init__(self, message: str, diff_outside_slots: list[tuple[str, int, str, str]]) -> None:
        super().__init__(message)
        self.diff_outside_slots = diff_outside_slots


@dataclass(frozen=True)
class Variable:
    """One manipulable property of an environment.

    ``domain`` lists the values (a dose grid for numeric ones); ``slots`` are the template slot ids its value
    renders into; ``role`` is documentation for the env author: ``cause`` (the planted cause), ``decoy`` (a CoT cue
    points at it, the planted agent ignores it), ``null`` (nothing points at it, nothing reads it), ``channel`` (the
    positive control: known to move behaviour)."""

    name: str
    kind: Kind
    domain: tuple[Any, ...]
    default: Any
    slots: tuple[str, ...]
    role: str = "null"

    def __post_init__(self) -> None:
        if self.default not in self.domain:
            raise ValueError(f"variable {self.name}: default {self.default!r} is not in its domain {self.domain}")
        if not self.slots:
            raise ValueError(f"variable {self.name}: needs at least one slot to render into")


@dataclass(frozen=True)
class Intervention:
    """Set ``variable`` to ``value``."""

    variable: str
    value: Any


@dataclass(frozen=True)
class Arm:
    """An arm of an investigation: the control's values with at most one intervention."""

    id: str
    base_values: tuple[tuple[str, Any], ...]
    intervention: Intervention | None = None
    role: Role = "test"

    @property
    def values(self) -> dict[str, Any]:
        v = dict(self.base_values)
        if self.intervention is not None:
            v[self.intervention.variable] = self.intervention.value
        return v


@dataclass
class Rendered:
    """The model-visible documents of one rendering (``docs[name] = text``) and where each variable's slots landed
    (``spans[variable] = [(doc, start, end), ...]``)."""

    docs: dict[str, str]
    spans: dict[str, list[tuple[str, int, int]]] = field(default_factory=dict)

    def exposed_in(self, doc: str) -> list[str]:
        """Variables with a slot in document ``doc`` (what a model reading it is exposed to)."""
        return sorted(v for v, sp in self.spans.items() if any(d == doc for d, _, _ in sp))


def changed_variable(control: Mapping[str, Any], arm: Mapping[str, Any]) -> str:
    """The one variable on which ``arm`` differs from ``control``; anything else raises
    :class:`MultiVariableArmError` naming the variables."""
    if set(control) != set(arm):
        raise MultiVariableArmError(f"arm and control assign different variables: {sorted(set(control) ^ set(arm))}")
    diff = sorted(k for k in control if control[k] != arm[k])
    if len(diff) != 1:
        raise MultiVariableArmError(f"an arm must change exactly one variable; this one changes {len(diff)}: {diff}")
    return diff[0]


def _masked(text: str, spans: list[tuple[int, int]]) -> str:
    """``text`` with each span replaced by one NUL character: what must be identical between control and arm."""
    out, pos = [], 0
    for s, e in sorted(spans):
        out.append(text[pos:s])
        out.append("\0")
        pos = e
    out.append(text[pos:])
    return "".join(out)


def check_span_locality(control: Rendered, arm: Rendered, variable: str) -> None:
    """Raise :class:`ConfoundedArmError` unless the two renderings are identical once the slot spans of
    ``variable`` are cut out of each (so every difference lies inside those spans). The message names the first
    document and line that broke, with both versions of the line."""
    if set(control.docs) != set(arm.docs):
        raise ConfoundedArmError(f"the arm shows other documents than the control: "
                                 f"{sorted(set(control.docs) ^ set(arm.docs))}", [])
    for doc in control.docs:
        a, b = control.docs[doc], arm.docs[doc]
        if a == b:
            continue
        ma = _masked(a, [(s, e) for d, s, e in control.spans.get(variable, []) if d == doc])
        mb = _masked(b, [(s, e) for d, s, e in arm.spans.get(variable, []) if d == doc])
        if ma == mb:
            continue
        i = next((k for k, (x, y) in enumerate(zip(ma, mb)) if x != y), min(len(ma), len(mb)))
        line = ma.count("\n", 0, i) + 1
        la = (ma.splitlines() or [""])[min(line, len(ma.splitlines() or [""])) - 1].replace("\0", "{" + variable + "}")
        lines_b = mb.splitlines() or [""]
        lb = lines_b[min(line, len(lines_b)) - 1].replace("\0", "{" + variable + "}")
        raise ConfoundedArmError(f"arm changing {variable!r} also changes text outside its slots: document {doc!r} "
                                 f"line {line}: control {la!r} vs arm {lb!r}", [(doc, line, la, lb)])


__all__ = ["Arm", "ConfoundedArmError", "Intervention", "MultiVariableArmError", "Rendered", "Variable",
           "changed_variable", "check_span_locality"]
