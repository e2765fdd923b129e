"""Loading, validating and instantiating the rule catalogue (docs/methods/constraint_rot.md "Use it" 1, "Use it" 2; the
package README, "Map of the package"; the package README, "Faults").

``load_catalogue`` reads ``catalogue/{soft,hard}/*.yaml`` (one family per file, file stem = family id), parses
each with :func:`.schema.parse_family`, then runs the behavioural self-checks the spec requires before any episode
is generated: for every parameter combination of every split, the canonical violating call and every trigger's own
call satisfy the forbidden predicate, while the canonical compliant call, every allowed near-miss call and the
compliant alternative do not; and no rule sentence of one split shares an 8-gram with another split's (pitfall 14).
A catalogue that fails any check is refused with the file and field named.
"""

from __future__ import annotations

import hashlib
import itertools
import random
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.core.extras import MissingExtraError
from agentmill.core.types import ToolCall
from agentmill.methods.constraint_rot.predicates import Predicate, compile_predicate, render_template
from agentmill.methods.constraint_rot.schema import (KINDS, MAX_CARD_WORDS, POOL_SPLITS, SPLITS, CallTemplate,
                                                     CatalogueError, RuleFamily, derivation_order, parse_family)

SCHEMA_VERSION = "cr-catalogue-1"
DEFAULT_PATH = Path(__file__).with_name("catalogue")
MAX_COMBOS_CHECKED = 256
"""Self-checks enumerate every parameter combination of a split up to this many (then a seeded sample)."""


def _yaml() -> Any:
    """PyYAML, from the ``constraint-rot`` extra (imported on first use so the core install can import this module)."""
    try:
        import yaml
    except ImportError as e:
        raise MissingExtraError("constraint-rot", "reading the ConstraintRot rule catalogue (YAML)") from e
    return yaml



@dataclass(frozen=True)
class RuleInstance:
    """``r = (F, θ, φ)`` (docs/methods/constraint_rot.md "Use it" 1) plus which trigger / allowed template the episode
    uses.

    Everything an episode needs is derived from here: the rule text, the trigger request and the call that
    performs it (``requested_call``; the scripted AlwaysComply actor and the organism's training targets use it),
    the allowed near-miss request and its call, the compliant alternative, the card text and the matcher anchors.
    """

    family: RuleFamily
    params: Mapping[str, str]
    phrasing_id: str
    text: str
    split: str
    trigger_index: int = 0
    allowed_index: int = 0

    @property
    def rule_id(self) -> str:
        return self.family.id

    @property
    def kind(self) -> str:
        return self.family.kind

    @cached_property
    def predicate(self) -> Predicate:
        return compile_predicate(self.family.forbidden, self.params, allowed_tools=self.family.tools,
                                 where=f"{self.family.source}: forbidden")

    def _render(self, template: str, where: str) -> str:
        return render_template(template, self.params, where=f"{self.family.source}: {where}")

    @property
    def trigger_text(self) -> str:
        return self._render(self.family.triggers[self.trigger_index].text, f"triggers[{self.trigger_index}].text")

    def _call(self, tmpl: CallTemplate, name: str, where: str) -> ToolCall:
        return tmpl.render(self.params, self.family.param_types, call_id=f"{self.rule_id}:{name}",
                           where=f"{self.family.source}: {where}")

    @property
    def requested_call(self) -> ToolCall:
        """The call that performs the forbidden trigger request, with exact arguments."""
        i = self.trigger_index
        return self._call(self.family.triggers[i].call, "requested", f"triggers[{i}].call")

    @property
    def allowed_text(self) -> str:
        return self._render(self.family.allowed[self.allowed_index].text, f"allowed[{self.allowed_index}].text")

    @property
    def allowed_call(self) -> ToolCall:
        """The call that performs the allowed near-miss request (must not violate)."""
        i = self.allowed_index
        return self._call(self.family.allowed[i].call, "allowed", f"allowed[{i}].call")

    @property
    def alternative_call(self) -> ToolCall:
        """The compliant alternative to the trigger request (what an obeying agent does instead of refusing)."""
        return self._call(self.family.alternative, "alternative", "alternative")

    @property
    def target_argument(self) -> str:
        """The requested call's first key argument as text (e.g. the outside address): what a compacted context
        that still carries the forbidden request as a pending task would mention (survival ``carryover``)."""
        t = self.family.triggers[self.trigger_index].call
        value = self.requested_call.arguments.get(t.key_args[0], "")
        return ", ".join(map(str, value)) if isinstance(value, list) else str(value)

    @property
    def card_text(self) -> str:
        return self._render(self.family.card, "card")

    @property
    def matcher_values(self) -> tuple[str, ...]:
        return tuple(self._render(v, "matcher.values") for v in self.family.matcher.values)

    @property
    def matcher_cues(self) -> tuple[str, ...]:
        return self.family.matcher.cues

    def violates(self, call: ToolCall) -> bool:
        return self.predicate.matches(call)


def instantiate(family: RuleFamily, split: str, rng: int | random.Random | np.random.Generator, *,
                trigger_index: int | None = None, allowed_index: int | None = None) -> RuleInstance:
    """Draw θ from ``split``'s pools and φ from its phrasings (docs/methods/constraint_rot.md "Use it" 2),
    deterministically from ``rng``.

    A held-out family (``split: test_ood_family``) is instantiated only for ``test_ood_family`` and then draws from
    the union of its pools and phrasings; any other family only for train/dev/test_iid."""
    _check_split_for(family, split)
    pick = _picker(rng)
    params = {}
    for name in sorted(n for n, p in family.params.items() if p.pools is not None):
        pool = family.pool(name, split)
        params[name] = pool[pick(len(pool))]
    params = _derive(family, params)
    phrasings = family.phrasings_for(split)
    phr = phrasings[pick(len(phrasings))]
    t = pick(len(family.triggers)) if trigger_index is None else trigger_index
    a = pick(len(family.allowed)) if allowed_index is None else allowed_index
    if not 0 <= t < len(family.triggers) or not 0 <= a < len(family.allowed):
        raise ValueError(f"{family.id}: trigger_index {t} / allowed_index {a} out of range "
                         f"({len(family.triggers)} triggers, {len(family.allowed)} allowed)")
    text = render_template(phr.text, params, where=f"{family.source}: phrasings[{phr.id}]")
    return RuleInstance(family, params, phr.id, text, split, t, a)


def with_params(inst: RuleInstance, params: Mapping[str, str]) -> RuleInstance:
    """``inst`` with other values for its pool parameters ``params`` (every one of them): derived parameters and the
    rule text are rendered again; the phrasing, trigger and allowed request stay (recipe v4's fresh values,
    ``organism/values.py``)."""
    fam = inst.family
    names = {n for n, p in fam.params.items() if p.pools is not None}
    if set(params) != names:
        raise ValueError(f"{fam.id}: with_params needs exactly the pool parameters {sorted(names)}, "
                         f"got {sorted(params)}")
    full = _derive(fam, {n: str(v) for n, v in params.items()})
    phr = next(p for p in fam.phrasings if p.id == inst.phrasing_id)
    text = render_template(phr.text, full, where=f"{fam.source}: phrasings[{phr.id}]")
    return RuleInstance(fam, full, phr.id, text, inst.split, inst.trigger_index, inst.allowed_index)


def _check_split_for(family: RuleFamily, split: str) -> None:
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r} (splits: {SPLITS})")
    if (family.split == "test_ood_family") != (split == "test_ood_family"):
        raise ValueError(f"family {family.id!r} (split {family.split or 'in-distribution'}) cannot be instantiated "
                         f"for split {split!r}")


def _picker(rng: int | random.Random | np.random.Generator):  # type: ignore[no-untyped-def]
    if isinstance(rng, (int, np.integer)) and not isinstance(rng, bool):
        rng = random.Random(int(rng))
    if isinstance(rng, random.Random):
        return lambda n: rng.randrange(n)
    if isinstance(rng, np.random.Generator):
        return lambda n: int(rng.integers(n))
    raise TypeError(f"rng must be an int seed, random.Random or numpy Generator, got {type(rng).__name__}")


def _derive(family: RuleFamily, params: Mapping[str, str]) -> dict[str, str]:
    out = dict(params)
    for name in derivation_order(family.params):
        spec = family.params[name]
        if spec.derive is not None:
            out[name] = render_template(spec.derive, out, where=f"{family.source}: params.{name}.derive")
    return out


# -- catalogue ------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Catalogue:
    """All families of one catalogue directory, with the content hash that versions every episode and result."""

    all_families: tuple[RuleFamily, ...]
    path: Path
    sha256: str
    version: str

    def families(self, kind: str | None = None, split: str | None = None) -> list[RuleFamily]:
        """Families of ``kind`` usable in ``split`` (train/dev/test_iid: the in-distribution families;
        test_ood_family: the held-out ones; None: all)."""
        if kind is not None and kind not in KINDS:
            raise ValueError(f"unknown kind {kind!r} (kinds: {KINDS})")
        if split is not None and split not in SPLITS:
            raise ValueError(f"unknown split {split!r} (splits: {SPLITS})")
        out = [f for f in self.all_families if kind is None or f.kind == kind]
        if split is not None:
            out = [f for f in out if (f.split == "test_ood_family") == (split == "test_ood_family")]
        return out

    def family(self, family_id: str) -> RuleFamily:
        for f in self.all_families:
            if f.id == family_id:
                return f
        raise KeyError(f"no family {family_id!r} in catalogue {self.path}")


_LOADED: dict[tuple[str, str], Catalogue] = {}
"""Validated catalogues by (directory, content hash): an experiment generates several episode batteries and each
called ``load_catalogue`` (YAML parsing and the load-time self-check, ~2 s a time). The files are read and hashed
on every call, so an edited catalogue is loaded afresh; a catalogue is frozen, so sharing it is safe."""


def load_catalogue(path: str | Path | None = None) -> Catalogue:
    """Load and validate a catalogue directory (default: the packaged one). Raises :class:`CatalogueError`."""
    root = Path(path) if path is not None else DEFAULT_PATH
    if not root.is_dir():
        raise CatalogueError(f"{root}: catalogue directory not found")
    files = sorted(p for kind in KINDS for p in (root / kind).glob("*.yaml"))
    if not files:
        raise CatalogueError(f"{root}: no family files under soft/*.yaml or hard/*.yaml")
    digest = hashlib.sha256()
    contents = []
    for f in files:
        rel = f.relative_to(root).as_posix()
        raw = f.read_bytes()
        digest.update(rel.encode() + b"\0" + raw + b"\0")
        contents.append((f, rel, raw))
    sha = digest.hexdigest()
    cached = _LOADED.get((str(root), sha))
    if cached is not None:
        return cached
    families: list[RuleFamily] = []
    for f, rel, raw in contents:
        try:
            data = _yaml().safe_load(raw)
        except _yaml().YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            line = f" line {mark.line + 1}" if mark is not None else ""
            raise CatalogueError(f"{rel}:{line}: malformed YAML: {exc}") from exc
        fam = parse_family(data, rel)
        if fam.kind != f.parent.name:
            raise CatalogueError(f"{rel} [{fam.id}]: kind: {fam.kind!r} but the file is under {f.parent.name}/")
        if fam.id != f.stem:
            raise CatalogueError(f"{rel}: id: {fam.id!r} must equal the file name stem {f.stem!r}")
        self_check(fam)
        families.append(fam)
    check_leakage(families)
    cat = _LOADED[(str(root), sha)] = Catalogue(tuple(families), root, sha, f"{SCHEMA_VERSION}+{sha[:12]}")
    return cat


def param_combinations(family: RuleFamily, split: str, *, limit: int = MAX_COMBOS_CHECKED) -> list[dict[str, str]]:
    """Every θ of ``split`` (or a seeded sample of ``limit`` when there are more)."""
    names = sorted(n for n, p in family.params.items() if p.pools is not None)
    pools = [family.pool(n, split) for n in names]
    total = int(np.prod([len(p) for p in pools]))
    if total <= limit:
        combos = [dict(zip(names, vals)) for vals in itertools.product(*pools)]
    else:
        rnd = random.Random(0)
        combos = [{n: rnd.choice(p) for n, p in zip(names, pools)} for _ in range(limit)]
    return [_derive(family, c) for c in combos]


def self_check(family: RuleFamily) -> None:
    """The load-time checks on one family (docs/methods/constraint_rot.md "Use it" 1; the package README, "Faults");
    raises :class:`CatalogueError` naming the field."""
    src = f"{family.source} [{family.id}]"
    types = family.param_types
    splits = POOL_SPLITS if family.split is None else ("test_ood_family",)
    for split in splits:
        for theta in param_combinations(family, split):
            try:
                pred = compile_predicate(family.forbidden, theta, allowed_tools=family.tools,
                                         where=f"{src}: forbidden")
            except ValueError as exc:
                raise CatalogueError(str(exc)) from None
            must = [("canonical.violating", family.canonical_violating, True),
                    ("canonical.compliant", family.canonical_compliant, False),
                    ("alternative", family.alternative, False)]
            must += [(f"triggers[{i}].call", t.call, True) for i, t in enumerate(family.triggers)]
            must += [(f"allowed[{i}].call", a.call, False) for i, a in enumerate(family.allowed)]
            for name, tmpl, expect in must:
                call = tmpl.render(theta, types, call_id="check", where=f"{src}: {name}")
                if pred.matches(call) != expect:
                    what = "does not satisfy" if expect else "satisfies"
                    raise CatalogueError(f"{src}: {name}: {what} the forbidden predicate with θ={theta} "
                                         f"(split {split}): {call.name}({call.arguments})")
            card = render_template(family.card, theta, where=f"{src}: card")
            if len(card.split()) > MAX_CARD_WORDS:
                raise CatalogueError(f"{src}: card: {len(card.split())} words rendered (max {MAX_CARD_WORDS}): "
                                     f"{card!r}")
            values = [render_template(v, theta, where=f"{src}: matcher.values").lower()
                      for v in family.matcher.values]
            _check_anchors(family, "card", card.lower(), values)
            for p in family.phrasings:
                text = render_template(p.text, theta, where=f"{src}: phrasings[{p.id}]").lower()
                if "[policy" in text or "[/policy" in text:
                    raise CatalogueError(f"{src}: phrasings[{p.id}]: rendered text contains a card delimiter")
                _check_anchors(family, f"phrasings[{p.id}]", text, values)


def _check_anchors(family: RuleFamily, field: str, text: str, values: list[str]) -> None:
    """A scripted rule reader finds the rule (or its card) by the matcher's anchors, so each text must carry every
    value anchor and at least one modality cue."""
    src = f"{family.source} [{family.id}]"
    missing = [v for v in values if v not in text]
    if missing:
        raise CatalogueError(f"{src}: {field}: lacks matcher value(s) {missing}: {text!r}")
    if not any(re.search(r"\b" + re.escape(c), text) for c in family.matcher.cues):
        raise CatalogueError(f"{src}: {field}: contains none of the matcher cues {list(family.matcher.cues)}: "
                             f"{text!r}")


_WORD = re.compile(r"[a-z0-9{}@._-]+")


def _ngrams(text: str, n: int) -> set[tuple[str, ...]]:
    toks = [t for t in (w.strip("._-") for w in _WORD.findall(text.lower())) if t]  # "b." is "b", "a.com" stays
    return {tuple(toks[i:i + n]) for i in range(len(toks) - n + 1)}


def shared_ngrams(train_texts: Iterable[str], test_texts: Iterable[str], n: int = 8) -> set[tuple[str, ...]]:
    """Word n-grams (lower-cased) occurring in both a train text and a test text (spec pitfall 14: must be empty
    between SFT rule sentences and test rule sentences)."""
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    train: set[tuple[str, ...]] = set()
    for t in train_texts:
        train |= _ngrams(t, n)
    out: set[tuple[str, ...]] = set()
    for t in test_texts:
        out |= _ngrams(t, n) & train
    return out


def check_leakage(families: Sequence[RuleFamily], n: int = 8) -> None:
    """Refuse duplicate ids and phrasing templates that share an ``n``-gram across splits.

    Train-split rule templates (of in-distribution families) are compared with every dev/test_iid template and
    with every template of a held-out family; dev with test likewise."""
    ids = [f.id for f in families]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise CatalogueError(f"duplicate family id(s) {dupes}")

    def texts(split: str) -> list[tuple[str, str]]:
        out = []
        for f in families:
            for p in f.phrasings:
                held_out = f.split == "test_ood_family"
                if (split == "test_ood_family" and held_out) or (not held_out and p.split == split):
                    out.append((f"{f.source} [{f.id}] phrasings[{p.id}]", p.text))
        return out

    by_split = {s: texts(s) for s in SPLITS}
    for a, b in [("train", "dev"), ("train", "test_iid"), ("train", "test_ood_family"), ("dev", "test_iid"),
                 ("dev", "test_ood_family")]:
        grams_a = {g: w for w, t in by_split[a] for g in _ngrams(t, n)}
        for where, text in by_split[b]:
            hit = _ngrams(text, n) & set(grams_a)
            if hit:
                g = sorted(hit)[0]
                raise CatalogueError(f"{where} ({b}) shares the {n}-gram {' '.join(g)!r} with {grams_a[g]} ({a}) "
                                     "(train/test leakage)")
