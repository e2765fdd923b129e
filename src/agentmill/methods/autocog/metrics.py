"""Metrics: scalars over choice data, with a per-subject variance ([C] ``src/metric.py``; templates [R]).

A :class:`MetricValue` is (value on the pooled data, population variance (ddof 0) of the same metric per subject,
the per-subject values). Every template is a share over a trial mask, so the per-subject value is always defined
when each subject sees the relevant trials; a subject without relevant trials makes the variance None (the gate
then rejects). Templates are frozen at proposal time (their arguments are theory *specs*), so re-evaluation on
backfill is exact.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import NamedTuple

import numpy as np

from agentmill.methods.autocog.simulate import Data
from agentmill.methods.autocog.theory import sha256


class MetricValue(NamedTuple):
    """A metric on one dataset (not :class:`agentmill.core.stats.Estimate`, which is a point with its interval)."""

    value: float | None
    variance: float | None
    per_subject: np.ndarray | None


def _share(hit: np.ndarray, mask: np.ndarray) -> MetricValue:
    # integer counts: the pooled total is the sum of the per-subject ones, so one masked reduction serves both
    per_hit, per_n = (hit & mask).sum(1), mask.sum(1)
    tot = per_n.sum()
    if tot == 0:
        return MetricValue(None, None, None)
    value = float(per_hit.sum() / tot)
    if (per_n == 0).any():
        return MetricValue(value, None, None)
    per = per_hit / per_n
    return MetricValue(value, _var(per), per)


def _var(x: np.ndarray) -> float:
    """``float(x.var())`` of a 1-D float array, bit for bit (numpy's own steps: pairwise-summed mean, squared
    deviations, pairwise sum, divide by n) without ``np.var``'s Python-level overhead."""
    n = x.shape[0]
    return float(np.square(x - x.sum() / n).sum() / n)


_CORE_CACHE: dict[tuple[str, str], np.ndarray] = {}


def _spec_key(spec: dict) -> str:
    return sha256({k: v for k, v in spec.items() if k != "label"})


def _core(spec: dict, data: Data, spec_key: str | None = None) -> np.ndarray:
    """Deterministic core choice per trial, computed once per (design, theory) on the unique pairs. ``spec_key``
    (``_spec_key(spec)``) may be passed precomputed: hashing the spec costs more than the lookup."""
    from agentmill.methods.autocog.library import theory_from_spec

    key = (data.design.content_id(), spec_key or _spec_key(spec))
    if key not in _CORE_CACHE:
        if len(_CORE_CACHE) > 20_000:
            _CORE_CACHE.clear()
        a, b = data.design.arrays()
        _CORE_CACHE[key] = theory_from_spec(spec).core_sign(a[None], b[None], data.design.context())[0]
    return _CORE_CACHE[key][data.pair_idx]


_PAIR_CACHE: dict[tuple[str, str], tuple[np.ndarray, np.ndarray]] = {}


def _per_pair(name: str, design) -> tuple[np.ndarray, np.ndarray]:
    """(key, mask) per unique pair of the stimulus-only templates, computed once per design: every per-trial value
    of these templates depends on the trial's pair alone, so indexing the per-pair values by ``pair_idx`` gives the
    per-trial ones exactly. top_cue_vs_majority: key = sgn TTB (A ↔ +1); low_range_advantage: key = 1 iff A has the
    lower-half advantage."""
    key = (name, design.content_id())
    got = _PAIR_CACHE.get(key)
    if got is not None:
        return got
    if len(_PAIR_CACHE) > 20_000:
        _PAIR_CACHE.clear()
    A, B = design.arrays()
    if name == "top_cue_vs_majority":
        from agentmill.methods.autocog.library import tally_delta, ttb_delta

        ctx = design.context()
        top, maj = np.sign(ttb_delta({}, A, B, ctx)), np.sign(tally_delta({}, A, B, ctx))
        got = (top, (top != 0) & (maj != 0) & (top != maj))
    else:
        # R > 1: among pairs where one option's advantage lies on cues rated in the lower half of the scale and the
        # other's in the upper half, the share choosing the lower-half-advantage option [R].
        R = design.rating_max
        d = A - B
        low = (np.minimum(A, B) < R / 2)
        adv_a_low = ((d > 0) & low).sum(-1) > ((d > 0) & ~low).sum(-1)
        adv_b_low = ((d < 0) & low).sum(-1) > ((d < 0) & ~low).sum(-1)
        got = (adv_a_low, adv_a_low ^ adv_b_low)
    _PAIR_CACHE[key] = got
    return got


def _follows(sign: np.ndarray, resp: np.ndarray) -> np.ndarray:
    return ((sign > 0) & (resp == 0)) | ((sign < 0) & (resp == 1))


@dataclass(frozen=True)
class TemplateMetric:
    """A frozen metric template: ``name`` plus JSON ``args`` (theory specs for agree/conflict)."""

    name: str
    args: dict = field(default_factory=dict)

    @property
    def content_id(self) -> str:
        return self._keys[0]

    @cached_property
    def _keys(self) -> tuple[str, dict[str, str]]:
        """content_id and the theory args' core keys, hashed once: metrics are evaluated hundreds of thousands of
        times per run and ``args`` is frozen at proposal time (module docstring)."""
        cores = {k: _spec_key(v) for k, v in self.args.items() if self.name in ("agree", "conflict")}
        return sha256({"name": self.name, "args": self.args})[:16], cores

    @property
    def description(self) -> str:
        return f"{self.name}({', '.join(str(v.get('label', v)) if isinstance(v, dict) else str(v) for v in self.args.values())})"

    def to_json(self) -> dict:
        return {"name": self.name, "args": self.args}

    @classmethod
    def from_json(cls, d: dict) -> TemplateMetric:
        return cls(d["name"], d.get("args", {}))

    def _core(self, arg: str, data: Data) -> np.ndarray:
        return _core(self.args[arg], data, self._keys[1][arg])

    def __call__(self, data: Data) -> MetricValue:
        resp = data.resp
        if self.name == "p_choose_a":
            return _share(resp == 0, np.ones_like(resp, bool))
        if self.name == "agree":
            sign = self._core("theory", data)
            return _share(_follows(sign, resp), sign != 0)
        if self.name == "conflict":
            s1, s2 = self._core("t1", data), self._core("t2", data)
            return _share(_follows(s1, resp), (s1 != 0) & (s2 != 0) & (s1 != s2))
        if self.name == "top_cue_vs_majority":
            top, mask = _per_pair(self.name, data.design)
            return _share(_follows(top[data.pair_idx], resp), mask[data.pair_idx])
        if self.name == "low_range_advantage":
            adv_a_low, mask = _per_pair(self.name, data.design)
            return _share(np.where(adv_a_low[data.pair_idx], resp == 0, resp == 1), mask[data.pair_idx])
        if self.name == "repeat_consistency":
            # within subject, for each pair, the share of repeat pairs (earlier occurrence, later occurrence) of
            # the same stimulus answered identically; computed via counts of A per pair.
            S = resp.shape[0]
            U = data.design.n_unique
            # per-(subject, pair) counts; bincount over flat cells is exact (integer sums) and ~10× np.add.at
            cell = (np.arange(S)[:, None] * U + data.pair_idx).ravel()
            nA = np.bincount(cell, weights=(resp == 0).ravel().astype(float), minlength=S * U).reshape(S, U)
            n = np.bincount(cell, minlength=S * U).reshape(S, U).astype(float)
            pairs = n * (n - 1) / 2
            same = nA * (nA - 1) / 2 + (n - nA) * (n - nA - 1) / 2
            if pairs.sum() == 0:
                return MetricValue(None, None, None)
            per = same.sum(1) / pairs.sum(1)
            return MetricValue(float(same.sum() / pairs.sum()), float(per.var()), per)
        if self.name == "lag1_repeat":
            hit = np.zeros_like(resp, bool)
            hit[:, 1:] = resp[:, 1:] == resp[:, :-1]
            mask = np.ones_like(resp, bool)
            mask[:, 0] = False
            return _share(hit, mask)
        raise ValueError(f"unknown metric template {self.name!r}; known: {', '.join(TEMPLATE_NAMES)}")


TEMPLATE_NAMES = ("p_choose_a", "agree", "conflict", "top_cue_vs_majority", "low_range_advantage",
                  "repeat_consistency", "lag1_repeat")


def templates_for(own, opponent, *, cardinal: bool) -> list[TemplateMetric]:
    """The metric template set for a pair of slot theories (history-dependent theories have no deterministic core)."""
    out = [TemplateMetric("p_choose_a")]
    cores = [t for t in (own, opponent) if not t.history_dependent]
    for t in cores:
        out.append(TemplateMetric("agree", {"theory": {**t.spec, "label": t.name}}))
    if len(cores) == 2:
        out.append(TemplateMetric("conflict", {"t1": {**own.spec, "label": own.name},
                                               "t2": {**opponent.spec, "label": opponent.name}}))
    out.append(TemplateMetric("top_cue_vs_majority"))
    if cardinal:
        out.append(TemplateMetric("low_range_advantage"))
    out += [TemplateMetric("repeat_consistency"), TemplateMetric("lag1_repeat")]
    return out


def data_columns(data: Data) -> tuple[dict, dict]:
    """Tidy per-trial columns (the repository's format [C]; one row per trial, subjects in order) and the design
    constants that an LLM-written metric sees as ``data[...]``: numpy arrays, not a DataFrame (pandas is not importable
    in the sandbox — a deviation from the repository, whose metrics take a ``pd.DataFrame``)."""
    A, B = data.stimuli()
    S, T = data.resp.shape
    cols = {"subject_id": np.repeat(np.arange(S), T), "trial_idx": np.tile(np.arange(T), S),
            "pair_idx": data.pair_idx.reshape(-1), "option_a_ratings": A.reshape(S * T, -1).astype(int),
            "option_b_ratings": B.reshape(S * T, -1).astype(int), "response": data.resp.reshape(-1)}
    return cols, {"validities": list(data.design.validities), "rating_max": data.design.rating_max}


METRIC_DATA_DOC = ("data is a dict of numpy arrays, one row per trial, subjects in order: subject_id (N,), "
                   "trial_idx (N,), pair_idx (N,), option_a_ratings (N, F), option_b_ratings (N, F), response (N,) "
                   "with 0 = chose A, 1 = chose B; plus validities (F,) and rating_max (int)")


@dataclass(frozen=True)
class CodeMetric:
    """An LLM-written ``metric(data) -> float`` (as in the repository [C]), run only in the sandbox
    (:func:`~agentmill.methods.autocog.sandbox.run_metric`): one child call evaluates the pooled data and every
    subject's rows. Value = the pooled call; variance = population variance (ddof 0) of the per-subject values,
    None if any per-subject call failed (the gate then rejects). Never raises on bad code: a failing pooled call
    gives MetricValue(None, None, None), scored as missing, like a failing theory [R]."""

    source: str
    rationale: str = ""
    name = "code"

    @property
    def content_id(self) -> str:
        return sha256({"name": "code", "source": self.source})[:16]

    @property
    def description(self) -> str:
        return f"code:{self.content_id[:8]}"

    def to_json(self) -> dict:
        return {"name": "code", "source": self.source, "rationale": self.rationale}

    def evaluate(self, data: Data) -> tuple[MetricValue, list]:
        """The MetricValue and the per-call errors (pooled first); a sandbox-level failure is one error string."""
        from agentmill.methods.autocog.sandbox import SandboxError, run_metric

        cols, const = data_columns(data)
        try:
            res = run_metric(self.source, cols, const)
        except SandboxError as e:
            return MetricValue(None, None, None), [f"{type(e).__name__}: {e}"]
        value, per = res["values"][0], res["values"][1:]
        errors = [e for e in res["errors"] if e]
        if value is None:
            return MetricValue(None, None, None), errors
        if not per or any(v is None for v in per):
            return MetricValue(value, None, None), errors
        arr = np.asarray(per, float)
        return MetricValue(float(value), float(arr.var()), arr), errors

    def __call__(self, data: Data) -> MetricValue:
        return self.evaluate(data)[0]


def metric_from_json(d: dict) -> TemplateMetric | CodeMetric:
    """A ledgered metric back: code metrics carry their ``source``, templates their ``name`` and ``args``."""
    if "source" in d:
        return CodeMetric(str(d["source"]), str(d.get("rationale", "")))
    return TemplateMetric.from_json(d)


_PRED_CACHE: dict[tuple, MetricValue] = {}
_PRED_CACHE_MAX = 20_000


def _pred_key(theory, design, metric, n_sim: int, seed) -> tuple | None:
    """The memo key of a pure prediction, or None when it may not be pure. Library and grammar theories are rebuilt
    from ``spec`` (``theory_from_spec``), so their content_id names their behaviour; code theories and code metrics
    run in the sandbox (time limits) and are never memoised. The seed is keyed by its keys' reprs, as
    ``derive_seed`` hashes them (1, 1.0 and True differ)."""
    from agentmill.methods.autocog.theory import LibraryTheory

    if type(theory) is not LibraryTheory or type(metric) is not TemplateMetric or "factory" not in theory.spec:
        return None
    key = seed if isinstance(seed, tuple) else (seed,)
    return theory.content_id, design, metric.content_id, n_sim, "\x1f".join(repr(k) for k in key)


def predicted_estimate(theory, design, metric: TemplateMetric | CodeMetric, n_sim: int, seed: tuple) -> MetricValue:
    """Simulate ``theory`` on ``design`` (``n_sim`` subjects, common random numbers keyed by ``seed``) and apply
    ``metric``. A failing theory yields MetricValue(None, None, None) (scored 1) [R].

    Memoised (``_pred_key``): the reviser re-scores the same grammar candidates on the same observations every
    round, and the result is a pure function of the key. Hits share the MetricValue, whose per-subject array is made
    read-only."""
    from agentmill.methods.autocog.simulate import simulate

    key = _pred_key(theory, design, metric, n_sim, seed)
    got = _PRED_CACHE.get(key) if key is not None else None
    if got is not None:
        return got
    try:
        est = metric(simulate(theory, design, n_sim, seed))
    except Exception:  # noqa: BLE001 - a failing (e.g. LLM-written) theory is logged and scored as missing
        return MetricValue(None, None, None)
    if key is not None:
        if est.per_subject is not None:
            est.per_subject.setflags(write=False)
        if len(_PRED_CACHE) >= _PRED_CACHE_MAX:
            _PRED_CACHE.clear()
        _PRED_CACHE[key] = est
    return est
