"""Text specs of the bench's parts, as ``agentmill constraint-rot`` flags write them, turned into objects: an attack
(``none``, ``fixed``, ``template:A1``, a frozen attack file…), a compactor's ``name:key=value,...`` options and the
LLM summariser's ``lm=`` spec (:class:`SummariserLM`, loaded only once every flag is valid), an actor
(``scripted:NAME``, ``organism:DIR``, ``endpoint:URL#MODEL``), a pin (``none`` | ``card[:placement=P]``), the comma
list of conditions, and the operator registry YAML of ``pin-hook``. Bad text raises ``ValueError`` naming the flag
or file (docs/methods/constraint_rot.md, "Experiments and commands"). :func:`load_summary_lm` and
:func:`load_organism_base` are the only places a model is loaded, so tests can hand them small fakes.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any


CONDITION_WORDS = ("full", "never", "compacted", "pinned", "cf_keep", "cf_drop", "rounds:K", "impersonation")
COUNTERS = ("smollm2", "whitespace")
"""The token counters ``--counter`` names: SmolLM2's tokenizer (the default) or whitespace words (no model)."""


def token_counter(name: str) -> Any:
    from agentmill.methods.constraint_rot.messages import WhitespaceCounter, as_counter

    if name == "whitespace":
        return WhitespaceCounter()
    if name == "smollm2":
        return as_counter(None)
    raise ValueError(f"unknown token counter {name!r} (counters: {', '.join(COUNTERS)})")


def episode_counter(episodes: list[Any]) -> tuple[str, Any]:
    """(name, counter) the episodes were generated with (``generate --counter``), so budgets and lengths agree."""
    name = episodes[0].generator_config.get("counter", "smollm2")
    return name, token_counter(name if name in COUNTERS else "smollm2")


def parse_attack(text: str, *, channel: str = "http_page", position: str = "end") -> Any:
    """``--attack``: ``none``, ``fixed`` (A2), ``filler`` (F0 matched to A2), ``template:A1``..``template:A6``,
    ``forged_card`` (A7), or a JSON file written by the optimiser / an ``AttackSpec`` dict. None for ``none``."""
    from agentmill.methods.constraint_rot.attacks import AttackSpec

    where = f"--attack {text}"
    try:
        if text == "none":
            return None
        if text in ("fixed", "filler", "forged_card"):
            return AttackSpec(text, channel=channel, position=position)
        if text.startswith("template:"):
            return AttackSpec("template", template_id=text.split(":", 1)[1], channel=channel, position=position)
        path = Path(text)
        if path.suffix == ".json":
            if not path.is_file():
                raise ValueError(f"{path}: attack file not found")
            d = json.loads(path.read_text())
            from agentmill.methods.constraint_rot.attacks.optimise import SCHEMA, load_attack

            if isinstance(d, dict) and d.get("schema") == SCHEMA:  # written by `attack optimise` (hash re-checked)
                spec = load_attack(path).spec
                return AttackSpec.from_dict({**spec.to_dict(), "channel": channel})
            d = d.get("spec", d) if isinstance(d, dict) else d
            if not isinstance(d, dict):
                raise ValueError(f"{path}: expected an AttackSpec mapping")
            return AttackSpec.from_dict({**d, "channel": d.get("channel", channel),
                                         "position": d.get("position", position)})
    except (ValueError, TypeError, json.JSONDecodeError) as e:
        raise ValueError(f"{where}: {e}") from None
    raise ValueError(f"{where}: expected none, fixed, filler, forged_card, template:A1..A6 or an attack .json file")


def _value(v: str) -> Any:
    low = v.lower()
    if low in ("true", "false"):
        return low == "true"
    if low == "null":
        return None
    for conv in (int, float):
        try:
            return conv(v)
        except ValueError:
            pass
    return v


def parse_options(text: str, flag: str) -> tuple[str, dict[str, Any]]:
    name, _, rest = text.partition(":")
    opts: dict[str, Any] = {}
    for item in filter(None, (x.strip() for x in rest.split(","))):
        k, eq, v = item.partition("=")
        if not eq or not k.strip():
            raise ValueError(f"{flag} {text}: expected key=value options, got {item!r}")
        opts[k.strip()] = _value(v.strip())
    return name.strip(), opts


def compactor_classes() -> dict[str, Any]:
    from agentmill.methods.constraint_rot import compactors as c

    return {"window": c.SlidingWindow, "head_tail": c.HeadAndTail, "tool_clear": c.ToolResultClearing,
            "extractive": c.ExtractiveSummary, "structured": c.StructuredSummary,
            "note_following": c.NoteFollowingSummary, "none": c.NoCompaction}


SUMMARY_OPTIONS = ("style", "lm", "ratio", "keep_last", "trim_input_tokens", "prompt_source")


def summary_lm_spec(value: Any, where: str) -> str:
    """``lm=`` of a summary compactor → an ``agentmill.lm`` spec; a bare name is ``hf:<name>`` (the spec's
    ``lm=smollm2``)."""
    from agentmill.lm import parse_spec

    if value is None or not str(value).strip():
        raise ValueError(f"{where}: the LLM summariser needs lm=SPEC (e.g. lm=hf:smollm2, lm=openai:MODEL@URL, "
                         f"lm=scripted:echo)")
    spec = str(value).strip()
    spec = spec if ":" in spec else f"hf:{spec}"
    try:
        parse_spec(spec)
    except ValueError as e:
        raise ValueError(f"{where}: lm={value}: {e}") from None
    return spec


def parse_pin(text: str) -> str | None:
    """``--pin none`` → None; ``--pin card[:placement=P]`` → the placement."""
    from agentmill.methods.constraint_rot.pinning.middleware import PLACEMENTS

    name, opts = parse_options(text, "--pin")
    if name == "none" and not opts:
        return None
    if name != "card" or set(opts) - {"placement"}:
        raise ValueError(f"--pin {text}: expected none or card[:placement=P] (placements: {', '.join(PLACEMENTS)})")
    placement = opts.get("placement", "after_summary")
    if placement not in PLACEMENTS:
        raise ValueError(f"--pin {text}: unknown placement {placement!r} (placements: {', '.join(PLACEMENTS)})")
    return str(placement)


def build_conditions(words: str, compactors: list[Any], pins: list[str | None], gate: bool) -> list[Any]:
    """The condition list of ``agentmill constraint-rot run``: ``full`` and ``never`` once; ``compacted``,
    ``rounds:K``, ``cf_keep``, ``cf_drop`` once per compactor; ``pinned`` once per compactor and card pin (default
    placement ``after_summary``); ``impersonation`` once per compactor and pin (``None`` = unpinned); ``gate`` adds
    the policy-gate arm per compactor (``gate:impersonation`` too when ``impersonation`` is asked)."""
    from agentmill.methods.constraint_rot import conditions as C

    items = [w.strip() for w in words.split(",") if w.strip()]
    if not items:
        raise ValueError("--conditions: empty list")
    needs_compactor = [w for w in items if w not in ("full", "never")] + (["--gate"] if gate else [])
    if needs_compactor and not compactors:
        raise ValueError(f"--conditions {words}: {needs_compactor} compact(s); give at least one --compactor")
    placements = [p for p in pins if p is not None] or ["after_summary"]
    out: list[Any] = []
    for w in items:
        if w == "full":
            out.append(C.full_context())
        elif w == "never":
            out.append(C.never_stated())
        elif w in ("compacted", "cf_keep", "cf_drop") or w.startswith("rounds:"):
            for m in compactors:
                if w.startswith("rounds:"):
                    k = w.split(":", 1)[1]
                    if not k.isdigit():
                        raise ValueError(f"--conditions: bad condition {w!r} (rounds:K with K in 1..5)")
                    try:
                        out.append(C.rounds(m, int(k)))
                    except ValueError as e:
                        raise ValueError(f"--conditions: bad condition {w!r}: {e}") from None
                else:
                    out.append({"compacted": C.compacted, "cf_keep": C.cf_keep, "cf_drop": C.cf_drop}[w](m))
        elif w == "pinned":
            out += [C.pinned(m, p) for m in compactors for p in placements]
        elif w == "impersonation":
            out += [C.impersonation(pin=p is not None, compactor=m) for m in compactors for p in pins]
        else:
            raise ValueError(f"--conditions: unknown condition {w!r} (choose from {', '.join(CONDITION_WORDS)})")
    if gate:
        out += [C.gate(m, impersonation=imp) for m in compactors for imp in
                ((False, True) if "impersonation" in items else (False,))]
    return out


def load_registry(path: Path) -> Any:
    """A frozen :class:`PolicyRegistry` from a registry YAML file: ``version`` (optional) and ``rules``, a list of
    ``{rule_id, text, issuer, kind: soft|hard, scope_tools: [...]}``."""
    import yaml

    from agentmill.methods.constraint_rot.pinning import PolicyRegistry

    if not path.is_file():
        raise ValueError(f"{path}: registry file not found")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise ValueError(f"{path}: malformed YAML: {e}") from None
    if not isinstance(data, dict) or not isinstance(data.get("rules"), list) or not data["rules"]:
        raise ValueError(f"{path}: expected a mapping with a non-empty 'rules' list")
    reg = PolicyRegistry(version=str(data.get("version", "1")))
    for i, r in enumerate(data["rules"]):
        where = f"{path}: rules[{i}]"
        if not isinstance(r, dict):
            raise ValueError(f"{where}: expected a mapping")
        missing = [k for k in ("rule_id", "text", "issuer", "kind") if k not in r]
        unknown = sorted(set(r) - {"rule_id", "text", "issuer", "kind", "scope_tools"})
        if missing or unknown:
            raise ValueError(f"{where}: missing {missing} / unknown {unknown} fields")
        try:
            reg.register(str(r["rule_id"]), str(r["text"]), issuer=str(r["issuer"]), kind=r["kind"],
                         scope_tools=list(r.get("scope_tools") or ()))
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None
    reg.freeze()
    return reg


BACKENDS = ("transformers", "llamacpp")


def load_summary_lm(spec: str) -> Any:
    """The summariser LM for ``spec`` through :func:`agentmill.lm.load_lm`. The one place the CLI loads a
    summariser, so tests can hand it a scripted model instead."""
    from agentmill.lm import load_lm

    return load_lm(spec)


class SummariserLM:
    """The LM of ``--compactor summary:...,lm=SPEC``: one per spec, shared by every compactor naming it, and
    loaded by :meth:`load` only once every flag is valid (a typo never costs a model load). ``spec`` is what
    ``LLMSummary`` hashes into its config, so summaries cached under one spec are found again."""

    def __init__(self, spec: str):
        self.spec = spec
        self._lm: Any = None

    def load(self) -> Any:
        if self._lm is None:
            self._lm = load_summary_lm(self.spec)
        return self._lm

    def generate(self, prompts: Any, config: Any) -> Any:
        return self.load().generate(prompts, config)


def check_backend(backend: str) -> str:
    if backend != "transformers":
        raise ValueError(f"--backend {backend}: only the transformers backend is implemented (llamacpp exposes no "
                         f"hidden states and is not wired into this command)")
    return backend


def summary_cache_dir(text: str | None) -> Path:
    """``--summary-cache DIR`` or ``cache_root()/"summaries"`` (checked, not created: bad input writes nothing)."""
    from agentmill.core.paths import cache_root

    path = Path(text) if text else cache_root() / "summaries"
    if path.exists() and not path.is_dir():
        raise ValueError(f"--summary-cache {path}: exists and is not a directory")
    return path


def parse_compactor(text: str, counter: Any, *, lms: dict[str, SummariserLM] | None = None, cache: Any = None,
                    flag: str = "--compactor") -> Any:
    """``--compactor name[:key=value,...]`` → a compactor (options are the constructor's keyword arguments).
    ``summary:style=S,lm=SPEC[,ratio=R,keep_last=K,trim_input_tokens=N,prompt_source=P]`` is the LLM summariser;
    its LM is a :class:`SummariserLM` from ``lms`` (shared per spec; not loaded here) and its summaries go through
    ``cache`` (a ``SummaryCache``; None while flags are being checked)."""
    from agentmill.methods.constraint_rot.specs import (SUMMARY_OPTIONS, compactor_classes, parse_options,
                                                        summary_lm_spec)

    name, opts = parse_options(text, flag)
    classes = compactor_classes()
    if name in ("summary", "llm_summary"):
        from agentmill.methods.constraint_rot.compactors import LLMSummary

        unknown = sorted(set(opts) - set(SUMMARY_OPTIONS))
        if unknown:
            raise ValueError(f"{flag} {text}: unknown option(s) {unknown} for summary (options: "
                             f"{', '.join(SUMMARY_OPTIONS)})")
        spec = summary_lm_spec(opts.pop("lm", None), f"{flag} {text}")
        lms = {} if lms is None else lms
        lm = lms.setdefault(spec, SummariserLM(spec))
        try:
            return LLMSummary(lm, **opts, cache=cache, counter=counter)
        except (ValueError, TypeError) as e:
            raise ValueError(f"{flag} {text}: {e}") from None
    if name not in classes:
        raise ValueError(f"{flag} {text}: unknown compactor {name!r} (choose from summary, {', '.join(classes)})")
    cls = classes[name]
    known = [p for p in inspect.signature(cls.__init__).parameters if p not in ("self", "counter", "lm")]
    unknown = sorted(set(opts) - set(known))
    if unknown:
        raise ValueError(f"{flag} {text}: unknown option(s) {unknown} for {name} (options: "
                         f"{', '.join(known) or 'none'})")
    try:
        return cls(**opts, counter=counter)
    except (ValueError, TypeError, NotImplementedError) as e:
        raise ValueError(f"{flag} {text}: {e}") from None


def open_summariser_lms(lms: dict[str, SummariserLM], cache_dir: Path | None) -> Any:
    """Load every summariser LM (after all flags are valid) and open the summary cache; None without LLM
    summaries."""
    from agentmill.methods.constraint_rot.summary_cache import SummaryCache

    if not lms or cache_dir is None:
        return None
    for lm in lms.values():
        lm.load()
    return SummaryCache(cache_dir)


def stamp_summary(row: dict[str, Any], compactor: Any, compactions: list[Any]) -> dict[str, Any]:
    """Fill the row's ``summariser_lm`` and ``summary_failed`` for an LLM summary compactor (the package README,
    "Faults": a failed summary is recorded, never mistaken for a compaction)."""
    lm = getattr(compactor, "lm", None) or getattr(getattr(compactor, "inner", None), "lm", None)
    if isinstance(lm, SummariserLM):
        row["summariser_lm"] = lm.spec
        row["summary_failed"] = any(bool(c.details.get("summary_failed")) for c in compactions)
    return row


def load_organism_base(spec: str) -> Any:
    """A fresh organism ``Base`` for ``spec`` (SmolLM2 from its GGUF for ``hf:smollm2``). The one place the CLI
    loads an organism base, so tests can hand it a tiny model instead."""
    from agentmill.methods.constraint_rot.organism.train import load_base

    return load_base(spec)


def organism_dir(text: str, where: str) -> Path:
    """An adapter directory holding a readable ``organism_card.json`` (checked before any model is loaded)."""
    from agentmill.methods.constraint_rot.organism.train import CARD_FILE, OrganismCard

    path = Path(text)
    if not path.is_dir() or not (path / CARD_FILE).is_file():
        raise ValueError(f"{where}: not an organism adapter directory (no {CARD_FILE}); train one with "
                         f"`agentmill constraint-rot organism train`")
    try:
        OrganismCard.load(path)
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None
    return path


def organism_actor(adapter_dir: Path, *, dtype: str = "fp32", max_new_tokens: int = 160) -> Any:
    """The organism as an actor: its card's base (through :func:`load_organism_base`) with the LoRA merged.
    Raises ``OrganismMismatch`` (a ``ValueError``) when the adapter does not fit the loaded base (the package README,
    "Faults")."""
    from agentmill.methods.constraint_rot.organism.actor import OrganismActor
    from agentmill.methods.constraint_rot.organism.train import OrganismCard

    if max_new_tokens < 1:
        raise ValueError(f"--max-new-tokens must be >= 1, got {max_new_tokens}")

    spec = OrganismCard.load(adapter_dir).base
    return OrganismActor(adapter_dir, dtype=dtype, max_new_tokens=max_new_tokens,  # type: ignore[arg-type]
                         base=lambda: load_organism_base(spec))


def endpoint_target(text: str) -> tuple[str, str]:
    """``endpoint:URL#MODEL`` → (base URL, model); the URL must be http(s) with a host."""
    from urllib.parse import urlparse

    url, sep, model = text.partition(":")[2].rpartition("#")
    u = urlparse(url)
    if not sep or not model.strip() or u.scheme not in ("http", "https") or not u.netloc:
        raise ValueError(f"--actor {text}: expected endpoint:URL#MODEL with an http(s) URL, e.g. "
                         f"endpoint:http://127.0.0.1:8000/v1#my-model")
    return url, model.strip()


def parse_actor(text: str, seed: int, *, dtype: str = "fp32", max_new_tokens: int = 160, tool_format: str = "auto",
                api_key_env: str = "AGENTMILL_API_KEY") -> Callable[[], Any]:
    """``--actor`` → a zero-argument builder of the actor. The text is checked now (scripted actors are built,
    an organism directory must hold a card, an endpoint needs ``URL#MODEL``); the builder loads the organism or
    opens the endpoint client, so a typo in another flag fails before a model is loaded. ``dtype`` and
    ``max_new_tokens`` apply to the organism, ``tool_format`` and ``api_key_env`` to the endpoint."""
    from agentmill.methods.constraint_rot import actors as a

    kind, _, rest = text.partition(":")
    if kind == "organism":
        path = organism_dir(rest, f"--actor {text}")
        if max_new_tokens < 1:
            raise ValueError(f"--max-new-tokens must be >= 1, got {max_new_tokens}")
        return lambda: organism_actor(path, dtype=dtype, max_new_tokens=max_new_tokens)
    if kind == "endpoint":
        url, model = endpoint_target(text)

        def endpoint() -> Any:
            try:
                return a.EndpointActor(url, model, tool_format=tool_format, api_key_env=api_key_env)  # type: ignore
            except ValueError as e:
                raise ValueError(f"--actor {text}: {e}") from None
        return endpoint
    if kind != "scripted":
        raise ValueError(f"--actor {text}: expected scripted:NAME, endpoint:URL#MODEL or organism:DIR")
    name, _, arg = rest.partition(":")
    actor: Any = None
    try:
        if name == "rule-reader":
            actor = a.RuleReader(arg or "semantic")
        elif name == "random":
            p, _, s = arg.partition(":")
            actor = a.RandomActor(float(p), int(s) if s else seed)
        else:
            fixed = {"always-comply": a.AlwaysComply, "always-refuse": a.AlwaysRefuse,
                     "latest-wins": a.LatestInstructionWins}
            if name in fixed and arg:
                raise ValueError(f"{name} takes no argument, got {arg!r}")
            if name in fixed:
                actor = fixed[name]()
    except ValueError as e:
        raise ValueError(f"--actor {text}: {e}") from None
    if actor is None:
        raise ValueError(f"--actor {text}: unknown scripted actor {name!r} (choose from rule-reader[:verbatim|"
                         f"semantic|card_only], always-comply, always-refuse, latest-wins, random:P)")
    return lambda: actor


def organism_refusal(actor_text: str, allow_unvalidated: bool) -> str | None:
    """An organism that failed a gate (or was never validated) is not an instrument (docs/methods/constraint_rot.md
    "Deviations from the paper" 5). The one-line reason ``run``/``cross`` refuse it with exit 3 unless
    ``--allow-unvalidated``; None when it may run. Read from the card, so a refused run loads no model."""
    from agentmill.methods.constraint_rot.organism.train import OrganismCard

    kind, _, rest = actor_text.partition(":")
    if kind != "organism" or allow_unvalidated or OrganismCard.load(Path(rest)).validated:
        return None
    return (f"agentmill: precondition not met: organism {rest} is not validated (gates G1-G6 failed or never run: "
            f"`agentmill constraint-rot organism validate`); pass --allow-unvalidated to run it anyway")
