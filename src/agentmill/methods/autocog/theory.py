"""Theories as programs with parameter priors ([C] theory programs and noise model).

A theory maps (sampled parameters, stimulus, history) to choice probabilities. Parameters are never fitted: every
simulated subject draws its own parameters from the theory's :class:`ParamSpace` (the prior), so a theory is judged
on the behaviour its whole prior produces [C `src/theory.py`, `src/sample_parameters.py`].

Shapes: a batch of stimuli is ``A, B`` of shape (S, T, F) (subjects, trials, features); parameters are a dict of
arrays of shape (S,) (scalars) or (S, F) (vectors); ``prob_a`` returns P(choose A) of shape (S, T).
"""

from __future__ import annotations

import ast
import hashlib
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

import numpy as np

from agentmill.core.ledger import canonical

BOUND_NAMES = ("validities", "n_features", "rating_max")


@dataclass(frozen=True)
class Interval:
    """Uniform on [lo, hi] (log-uniform when ``log``); lo > hi is an error (the repository swaps silently)."""

    lo: float
    hi: float
    log: bool = False

    def __post_init__(self) -> None:
        if not (math.isfinite(self.lo) and math.isfinite(self.hi)):
            raise ValueError(f"Interval bounds must be finite, got [{self.lo}, {self.hi}]")
        if self.lo > self.hi:
            raise ValueError(f"Interval lo > hi: [{self.lo}, {self.hi}]; write it as [{self.hi}, {self.lo}]")
        if self.log and self.lo <= 0:
            raise ValueError(f"log Interval needs lo > 0, got {self.lo}")


@dataclass(frozen=True)
class Choice:
    """Uniform over a finite, non-empty set of values."""

    values: tuple

    def __post_init__(self) -> None:
        if len(self.values) == 0:
            raise ValueError("Choice needs at least one value")


@dataclass(frozen=True)
class Bind:
    """A value bound from the experiment context: validities, n_features or rating_max."""

    name: str

    def __post_init__(self) -> None:
        if self.name not in BOUND_NAMES:
            raise ValueError(f"unknown bound name {self.name!r}; accepted: {', '.join(BOUND_NAMES)}")


@dataclass(frozen=True)
class VectorInterval:
    """One independent uniform draw in [lo, hi] per feature (``length`` = 'n_features' or an int)."""

    lo: float
    hi: float
    length: str | int = "n_features"

    def __post_init__(self) -> None:
        if self.lo > self.hi:
            raise ValueError(f"VectorInterval lo > hi: [{self.lo}, {self.hi}]")


Spec = Interval | Choice | Bind | VectorInterval | float


def _spec_json(s: Spec) -> Any:
    if isinstance(s, Interval):
        return {"interval": [s.lo, s.hi], "log": s.log}
    if isinstance(s, Choice):
        return {"choice": list(s.values)}
    if isinstance(s, Bind):
        return {"bind": s.name}
    if isinstance(s, VectorInterval):
        return {"vector": [s.lo, s.hi], "length": s.length}
    return float(s)


def spec_from_json(d: Any) -> Spec:
    if isinstance(d, (int, float)):
        return float(d)
    if "interval" in d:
        return Interval(*d["interval"], log=d.get("log", False))
    if "choice" in d:
        return Choice(tuple(d["choice"]))
    if "bind" in d:
        return Bind(d["bind"])
    return VectorInterval(*d["vector"], length=d["length"])


_VEC = re.compile(r"^\s*\[\s*\(\s*([-+0-9.eE]+)\s*,\s*([-+0-9.eE]+)\s*\)\s*\]\s*\*\s*n_features\s*$")
ACCEPTED_FORMS = '"[lo, hi]", "{a, b, c}", "validities" | "n_features" | "rating_max", "[(lo, hi)] * n_features"'


@dataclass(frozen=True)
class ParamSpace:
    """A typed prior: parameter name -> spec. Sampling is batched: one independent draw per subject."""

    specs: dict[str, Spec] = field(default_factory=dict)

    def sample(self, rng: np.random.Generator, context: dict, n: int) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        for name in sorted(self.specs):  # sorted: the draw order (and so the stream) is independent of dict order
            s = self.specs[name]
            if isinstance(s, Interval):
                if s.log:
                    out[name] = np.exp(rng.uniform(np.log(s.lo), np.log(s.hi), n))
                else:
                    out[name] = rng.uniform(s.lo, s.hi, n)
            elif isinstance(s, Choice):
                out[name] = np.asarray(s.values)[rng.integers(0, len(s.values), n)]
            elif isinstance(s, Bind):
                v = np.asarray(context[s.name], dtype=float)
                out[name] = np.broadcast_to(v, (n,) + v.shape).copy()
            elif isinstance(s, VectorInterval):
                length = int(context["n_features"]) if s.length == "n_features" else int(s.length)
                if s.length != "n_features" and length != int(context["n_features"]):
                    raise ValueError(f"parameter {name}: vector length {length} != n_features "
                                     f"{context['n_features']}")
                out[name] = rng.uniform(s.lo, s.hi, (n, length))
            else:
                out[name] = np.full(n, float(s))
        return out

    def midpoint(self, context: dict) -> dict[str, np.ndarray]:
        """One 'typical' subject (interval midpoints, first choice): the deterministic core's parameters."""
        out: dict[str, np.ndarray] = {}
        for name, s in self.specs.items():
            if isinstance(s, Interval):
                m = float(np.sqrt(s.lo * s.hi)) if s.log else (s.lo + s.hi) / 2
                out[name] = np.array([m])
            elif isinstance(s, Choice):
                out[name] = np.asarray(s.values[:1])
            elif isinstance(s, Bind):
                out[name] = np.asarray(context[s.name], dtype=float)[None]
            elif isinstance(s, VectorInterval):
                out[name] = np.full((1, int(context["n_features"])), (s.lo + s.hi) / 2)
            else:
                out[name] = np.array([float(s)])
        return out

    def n_free(self) -> int:
        return sum(isinstance(s, (Interval, VectorInterval)) or (isinstance(s, Choice) and len(s.values) > 1)
                   for s in self.specs.values())

    def to_json(self) -> dict:
        return {k: _spec_json(v) for k, v in sorted(self.specs.items())}

    @classmethod
    def from_json(cls, d: dict) -> ParamSpace:
        return cls({k: spec_from_json(v) for k, v in d.items()})

    @classmethod
    def from_repo_strings(cls, d: dict[str, str]) -> ParamSpace:
        """Parse the repository's spec strings with ``ast.literal_eval`` plus one regex; never ``eval``."""
        specs: dict[str, Spec] = {}
        for name, text in d.items():
            t = str(text).strip()
            if t in BOUND_NAMES:
                specs[name] = Bind(t)
                continue
            m = _VEC.match(t)
            if m:
                specs[name] = VectorInterval(float(m.group(1)), float(m.group(2)))
                continue
            try:
                val = ast.literal_eval(t)
            except (ValueError, SyntaxError):
                raise ValueError(f"parameter {name}: cannot parse {t!r}; accepted forms: {ACCEPTED_FORMS}") from None
            if isinstance(val, list) and len(val) == 2 and all(isinstance(x, (int, float)) for x in val):
                specs[name] = Interval(float(val[0]), float(val[1]))
            elif isinstance(val, set):
                specs[name] = Choice(tuple(sorted(val, key=repr)))
            elif isinstance(val, (int, float)):
                specs[name] = float(val)
            else:
                raise ValueError(f"parameter {name}: cannot parse {t!r}; accepted forms: {ACCEPTED_FORMS}")
        return cls(specs)


def sha256(obj: Any) -> str:
    return hashlib.sha256(canonical(obj)).hexdigest()


def lapse_logistic(delta: np.ndarray, beta: np.ndarray, eps: np.ndarray) -> np.ndarray:
    """Shared noise model [C]: P(A) = (1 - ε)·σ(β·Δ) + ε/2. ``beta``/``eps`` broadcast as (S, 1)."""
    # maximum/minimum is what np.clip computes (NaN passes through), without np.clip's Python-level dispatch
    z = np.minimum(np.maximum(beta * delta, -500.0), 500.0)
    return (1 - eps) / (1 + np.exp(-z)) + eps / 2


ProbFn = Callable[[dict, np.ndarray, np.ndarray, dict, np.ndarray | None], np.ndarray]


@dataclass(frozen=True)
class LibraryTheory:
    """A vectorised theory. ``prob(params, A, B, ctx, prev)`` -> P(A) of shape (S, T); ``prev`` (S, T) holds the
    previous response (-1 on the first trial) and is given only to ``history_dependent`` theories.

    ``spec`` is the JSON recipe that rebuilds this theory (``theory_from_spec``); ``content_id`` hashes it.
    """

    name: str
    family: str
    prose: str
    params: ParamSpace
    prob: ProbFn = field(repr=False, compare=False)
    spec: dict = field(default_factory=dict)
    policy: Literal["sample", "argmax"] = "sample"
    history_dependent: bool = False

    @cached_property
    def content_id(self) -> str:
        """Hashed once per (frozen) theory: every simulation keys its parameter stream by it."""
        return sha256({"spec": self.spec, "params": self.params.to_json(), "policy": self.policy})[:16]

    def prob_batch(self, params: dict, A: np.ndarray, B: np.ndarray, ctx: dict,
                   prev: np.ndarray | None = None) -> np.ndarray:
        return self.prob(params, A, B, ctx, prev)

    def predict(self, params: dict, stimulus: np.ndarray, history: dict) -> np.ndarray:
        """Per-trial reference interface [C]: stimulus (2, F), history dict of lists -> probabilities (2,)."""
        p1 = {k: np.asarray(v)[None] for k, v in params.items()}
        A = np.asarray(stimulus[0], float)[None, None]
        B = np.asarray(stimulus[1], float)[None, None]
        resp = history.get("response", [])
        prev = np.array([[resp[-1] if resp else -1]])
        pa = float(self.prob(p1, A, B, history.get("_ctx", {}), prev)[0, 0])
        return np.array([pa, 1 - pa])

    def core_sign(self, A: np.ndarray, B: np.ndarray, ctx: dict) -> np.ndarray:
        """The deterministic core (β → ∞, ε = 0, mechanism parameters at prior midpoints): +1 A, -1 B, 0 tie."""
        p = self.params.midpoint(ctx)
        p = {k: v for k, v in p.items()}
        p["beta"] = np.array([1e6])
        p["eps"] = np.array([0.0])
        pa = self.prob(p, A, B, ctx, None)
        return np.where(pa > 0.5 + 1e-9, 1, np.where(pa < 0.5 - 1e-9, -1, 0))


@dataclass(frozen=True)
class CodeTheory:
    """A theory whose ``predict(params, stimulus, history) -> (2,)`` source comes from an LLM or a file. Every call
    runs in the sandbox (:mod:`agentmill.methods.autocog.sandbox`); ``simulate`` runs the whole batch in one child.
    Randomness stays on the project's generator: the child receives the uniforms and applies the policy."""

    name: str
    prose: str
    source: str
    params: ParamSpace
    policy: Literal["sample", "argmax"] = "sample"
    history_dependent: bool = True
    family: str = "code"

    @property
    def spec(self) -> dict:
        return {"factory": "code", "name": self.name, "prose": self.prose, "source": self.source,
                "params": self.params.to_json(), "policy": self.policy}

    @property
    def content_id(self) -> str:
        return sha256(self.spec)[:16]

    def prob_batch(self, params: dict, A: np.ndarray, B: np.ndarray, ctx: dict, prev=None) -> np.ndarray:
        from agentmill.methods.autocog.sandbox import run_batch

        res = run_batch(self.source, A, B, params)  # history-free evaluation (empty history per trial)
        return np.asarray(res["probs"], float)

    def simulate_in_sandbox(self, params: dict, A: np.ndarray, B: np.ndarray, u: np.ndarray) -> tuple:
        from agentmill.methods.autocog.sandbox import run_batch

        res = run_batch(self.source, A, B, params, u=u, policy=self.policy)
        return np.asarray(res["probs"], float), np.asarray(res["resps"], int)

    def core_sign(self, A, B, ctx):
        p = self.params.midpoint(ctx)
        pa = self.prob_batch({k: np.repeat(v, A.shape[0], 0) for k, v in p.items()}, A, B, ctx)
        return np.where(pa > 0.5 + 1e-9, 1, np.where(pa < 0.5 - 1e-9, -1, 0))


REPO_FIELDS = {"name": ("name",), "prose": ("theory", "description"), "predict": ("predict", "predict_source"),
               "policy": ("policy", "policy_source"), "parameters": ("parameters",)}
"""The repository's theory record [C]: YAML keys first, then the keys of ``state.json``'s theory sources
as the fixture's ``observations.json`` keeps them (``description``, ``predict_source``, ``policy_source``)."""


def _policy_kind(source: str) -> Literal["sample", "argmax"]:
    """Map the repository's ``policy(probabilities)`` source to the project's policy [C: policies are
    ``np.random.choice`` on the probabilities or ``argmax``]. Only the called names are read; the code never runs
    (the project applies the policy itself, with its own seeded uniforms: deviation 8)."""
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        raise ValueError(f"theory field 'policy': syntax error: {e.msg} (line {e.lineno})") from None
    called = {(n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", ""))
              for n in ast.walk(tree) if isinstance(n, ast.Call)}
    kinds = {k for k, names in (("argmax", {"argmax"}), ("sample", {"choice", "binomial", "uniform", "rand",
                                                                   "random"})) if called & names}
    if len(kinds) != 1:
        raise ValueError("theory field 'policy': expected an argmax policy (np.argmax) or a sampling policy "
                         f"(np.random.choice), found calls {sorted(called) or 'none'}")
    return kinds.pop()


def _uses_history(tree: ast.Module) -> bool:
    """True iff ``predict``'s third argument (the history, whatever it is called) is read in its body."""
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "predict")
    if len(fn.args.args) < 3:
        return False
    hist = fn.args.args[2].arg
    return any(isinstance(n, ast.Name) and n.id == hist for n in ast.walk(fn))


def theory_from_repo_record(record: dict, *, name: str | None = None) -> CodeTheory:
    """A :class:`CodeTheory` from one repository theory record (YAML or ``state.json`` keys, see ``REPO_FIELDS``).
    ``parameters`` become a typed :class:`ParamSpace` (``from_repo_strings``: never ``eval``); ``predict`` must pass
    the sandbox's static policy here, so a source that could never run is refused at load time, not mid-simulation;
    ``policy`` maps to ``sample``/``argmax``. Bad input raises ValueError naming the field."""
    from agentmill.methods.autocog.sandbox import SandboxError, check_source

    if not isinstance(record, dict):
        raise ValueError(f"theory: expected a mapping of fields, got {type(record).__name__}")
    got: dict[str, Any] = {}
    for f, keys in REPO_FIELDS.items():
        val = next((record[k] for k in keys if record.get(k) is not None), None)
        if f == "name" and val is None:
            val = name
        if f != "parameters" and (not isinstance(val, str) or not val.strip()):
            raise ValueError(f"theory field {keys[0]!r}: missing or not a non-empty string")
        got[f] = val
    if not isinstance(got["parameters"], dict) or not got["parameters"]:
        raise ValueError("theory field 'parameters': expected a non-empty mapping of name -> spec string")
    try:
        params = ParamSpace.from_repo_strings({str(k): str(v) for k, v in got["parameters"].items()})
    except ValueError as e:
        raise ValueError(f"theory field 'parameters': {e}") from None
    try:
        tree = check_source(got["predict"])
    except SandboxError as e:
        raise ValueError(f"theory field 'predict': {type(e).__name__}: {e}") from None
    return CodeTheory(name=name or got["name"].strip(), prose=got["prose"].strip(), source=got["predict"],
                      params=params, policy=_policy_kind(got["policy"]), history_dependent=_uses_history(tree))


def load_theory_yaml(path_or_text: str | Path) -> CodeTheory:
    """The repository's theory YAML ([C]: ``name``, ``theory``, ``predict``, ``policy``,
    ``parameters``) as a sandboxed :class:`CodeTheory`. A :class:`~pathlib.Path` (or a string naming an existing
    ``.yaml``/``.yml`` file) is read; any other string is the YAML text. Parsed with ``yaml.safe_load`` (no tags,
    no objects). Needs the ``autocog`` extra (pyyaml)."""
    try:
        import yaml
    except ImportError:
        raise ImportError("load_theory_yaml needs pyyaml: install agentmill[autocog]") from None
    text = path_or_text
    if isinstance(path_or_text, Path) or (isinstance(path_or_text, str) and "\n" not in path_or_text
                                          and path_or_text.endswith((".yaml", ".yml"))):
        p = Path(path_or_text)
        if not p.is_file():
            raise ValueError(f"theory YAML {p}: no such file")
        text = p.read_text()
    try:
        record = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ValueError(f"theory YAML: not parseable: {str(e).splitlines()[0]}") from None
    return theory_from_repo_record(record)
