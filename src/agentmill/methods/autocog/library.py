"""The theory library ([C] rules; [R] vectorisation): classic multi-attribute rules with exact formulas, vectorised over
subjects and trials, plus the typed program grammar of the LLM-free reviser [R].

Every factory accepts keyword overrides for any parameter (a float pins it; an Interval/Choice re-ranges it) and
``policy="sample"|"argmax"``. d_i = x_{A,i} - x_{B,i}. Rules use the repository's noise model [C] unless marked.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy.stats import rankdata

from agentmill.methods.autocog.theory import Bind, Interval, LibraryTheory, ParamSpace, Spec, VectorInterval, lapse_logistic

# [C theories/heuristic_decision_making/*.yaml]: beta in [0.1, 20], eps in [0, 0.5].
NOISE = {"beta": Interval(0.1, 20.0), "eps": Interval(0.0, 0.5)}


def _s(p: dict, name: str) -> np.ndarray:
    """Scalar parameter (S,) -> (S, 1) for broadcasting over trials."""
    return np.asarray(p[name], dtype=float)[:, None]


def _v(ctx: dict) -> np.ndarray:
    return np.asarray(ctx["validities"], dtype=float)


def _noisy(delta_fn: Callable[[dict, np.ndarray, np.ndarray, dict], np.ndarray]):
    def prob(p, A, B, ctx, prev):
        return lapse_logistic(delta_fn(p, A, B, ctx), _s(p, "beta"), _s(p, "eps"))
    return prob


def _ttb_delta(order: np.ndarray, d: np.ndarray) -> np.ndarray:
    d_ord = d[..., order]
    nz = d_ord != 0
    idx = np.argmax(nz, axis=-1)
    first = np.take_along_axis(d_ord, idx[..., None], axis=-1)[..., 0]
    return np.sign(first) * nz.any(axis=-1)


def ttb_delta(p, A, B, ctx):
    """TTB: first discriminating cue in descending-validity order (stable: ties -> lower index); Δ = sgn(d_j*)."""
    return _ttb_delta(np.argsort(-_v(ctx), kind="stable"), A - B)


def tally_delta(p, A, B, ctx):
    d = A - B
    return (d > 0).sum(-1) - (d < 0).sum(-1).astype(float)


def ew_delta(p, A, B, ctx):
    return (A - B).sum(-1)


def wadd_delta(p, A, B, ctx):
    return ((A - B) * _v(ctx)).sum(-1)


def logodds_delta(p, A, B, ctx):
    v = np.clip(_v(ctx), 0.5 + 1e-6, 1 - 1e-6)  # [C `_bayesian_normative_choice`]
    return ((A - B) * np.log(v / (1 - v))).sum(-1)


def dial_weights(v: np.ndarray, gamma: np.ndarray, normalise: bool) -> np.ndarray:
    """w_i = v_i^γ (raw) or v_i^γ / max_j v_j^γ (normalised, the project's default [R]); gamma (S,) -> (S, F)."""
    w = v[None, :] ** np.asarray(gamma, float)[:, None]
    return w / w.max(-1, keepdims=True) if normalise else w


def _dial_delta(normalise: bool):
    def delta(p, A, B, ctx):
        w = dial_weights(_v(ctx), p["gamma"], normalise)
        return ((A - B) * w[:, None, :]).sum(-1)
    return delta


_RANK_CACHE: dict[tuple, np.ndarray] = {}


def _validity_ranks(v: np.ndarray) -> np.ndarray:
    """rankdata(-v) (1 = best; ties -> average rank), once per validity vector: scipy's rankdata costs more than the
    weights themselves, and a run sees a handful of validity vectors."""
    key = (v.dtype.str, v.shape, v.tobytes())
    r = _RANK_CACHE.get(key)
    if r is None:
        if len(_RANK_CACHE) > 10_000:
            _RANK_CACHE.clear()
        r = _RANK_CACHE[key] = rankdata(-v, method="average")
        r.setflags(write=False)
    return r


def rank_weights(v: np.ndarray, lam: np.ndarray) -> np.ndarray:
    r = _validity_ranks(np.asarray(v))
    return np.asarray(lam, float)[:, None] ** (r[None, :] - 1)


def rank_decay_delta(p, A, B, ctx):
    w = rank_weights(_v(ctx), p["lam"])
    return ((A - B) * w[:, None, :]).sum(-1)


def power_shift(x: np.ndarray, alpha: np.ndarray, s: np.ndarray) -> np.ndarray:
    """u(x) = (x + s)^α - s^α; alpha, s broadcast (S, 1, 1)."""
    return (x + s) ** alpha - s ** alpha


def dr_wadd_delta(p, A, B, ctx):
    v = _v(ctx)
    w = v / v.sum()
    a, s = _s(p, "alpha")[..., None], _s(p, "s")[..., None]
    return ((power_shift(A, a, s) - power_shift(B, a, s)) * w).sum(-1)


def satisficing_delta(p, A, B, ctx):
    t = _s(p, "t")[..., None] * float(ctx.get("rating_max", 1))  # t as a fraction of R, so one prior fits every R
    return (((A >= t).astype(float) - (B >= t)) * _v(ctx)).sum(-1)


def wadd_weighted_delta(p, A, B, ctx):
    w = np.asarray(p["w"], float)[:, None, :]
    return ((A - B) * _v(ctx) * w).sum(-1)


def take_the_worst_delta(p, A, B, ctx):
    return _ttb_delta(np.argsort(_v(ctx), kind="stable"), A - B)


def single_cue_delta(p, A, B, ctx):
    j = int(np.argmin(_v(ctx)))
    return np.sign((A - B)[..., j])


def anti_majority_delta(p, A, B, ctx):
    votes = np.sign(ttb_delta(p, A, B, ctx)) + np.sign(tally_delta(p, A, B, ctx)) + np.sign(wadd_delta(p, A, B, ctx))
    return -np.sign(votes)


def cue_parity_delta(p, A, B, ctx):
    return np.where((A - B > 0).sum(-1) % 2 == 1, 1.0, -1.0)


def mixture_prob(p, A, B, ctx, prev):
    beta, eps, w = _s(p, "beta"), _s(p, "eps"), _s(p, "p")
    return w * lapse_logistic(ttb_delta(p, A, B, ctx), beta, eps) + (1 - w) * lapse_logistic(
        wadd_delta(p, A, B, ctx), beta, eps)


def perseveration_prob(p, A, B, ctx, prev):
    prev = np.broadcast_to(prev, A.shape[:2])
    return np.where(prev < 0, 0.5, np.where(prev == 0, 1.0, 0.0))


def alternating_prob(p, A, B, ctx, prev):
    prev = np.broadcast_to(prev, A.shape[:2])
    return np.where(prev < 0, 0.5, np.where(prev == 0, 0.0, 1.0))


def coin_flip_prob(p, A, B, ctx, prev):
    return np.full(A.shape[:2], 0.5)


# name -> (family, prose, delta or prob, mechanism prior, uses noise, history)
RULES: dict[str, tuple] = {
    "ttb": ("lexicographic", "Take-the-best: follow the most valid cue that discriminates.", ttb_delta,
            {"validities": Bind("validities")}, True, False),
    "tallying": ("tally", "Tallying: count cues favouring each option, ignore validities.", tally_delta, {}, True, False),
    "ew": ("equal-additive", "Equal weights: sum of rating differences.", ew_delta, {}, True, False),
    "wadd": ("validity-additive", "Weighted additive: validity-weighted sum of differences.", wadd_delta,
             {"validities": Bind("validities")}, True, False),
    "wadd_weighted": ("validity-additive-w", "WADD with a per-subject random weight w_i ~ U[0,1] per cue [C].",
                      wadd_weighted_delta, {"w": VectorInterval(0.0, 1.0)}, True, False),
    "logodds_wadd": ("logodds-additive", "Naive-Bayes WADD: log-odds-weighted sum of differences.", logodds_delta,
                     {}, True, False),
    "dial": ("dial-additive", "Weighting dial: weights v^γ (max-normalised), additive.", _dial_delta(True),
             {"gamma": Interval(0.0, 10.0)}, True, False),
    "dial_raw": ("dial-raw", "Weighting dial with raw weights v^γ [C pi_4].", _dial_delta(False),
                 {"gamma": Interval(0.0, 10.0), "beta": Interval(0.1, 15.0)}, True, False),
    "rank_decay": ("rank-additive", "Rank-decay dial: weights λ^(rank-1).", rank_decay_delta,
                   {"lam": Interval(0.0, 1.0)}, True, False),
    "dr_wadd": ("powershift-validity-additive", "Diminishing-returns WADD: concave utility (x+s)^α - s^α.",
                dr_wadd_delta, {"alpha": Interval(0.1, 1.0), "s": Interval(0.1, 5.0)}, True, False),
    "satisficing_wadd": ("threshold-validity-additive", "Satisficing WADD: binarise ratings at t, then WADD.",
                         satisficing_delta, {"t": Interval(0.0, 1.0)}, True, False),
    "take_the_worst": ("control", "Take-the-worst: TTB in ascending validity.", take_the_worst_delta, {}, True, False),
    "single_cue": ("control", "Single cue: only the least valid cue.", single_cue_delta, {}, True, False),
    "anti_majority": ("control", "Anti-majority: lean against the TTB/Tallying/WADD majority.", anti_majority_delta,
                      {}, True, False),
    "cue_parity": ("control", "Cue parity: prefer A iff an odd number of cues favour it.", cue_parity_delta, {},
                   True, False),
}


def _build(name: str, policy: str = "sample", **overrides: Spec) -> LibraryTheory:
    if name == "mixture_ttb_wadd":
        specs: dict[str, Spec] = {**NOISE, "p": Interval(0.0, 1.0)}
        family, prose, prob, hist = "mixture", "Mixture p·TTB + (1-p)·WADD.", mixture_prob, False
    elif name in ("perseveration", "alternating", "coin_flip"):
        specs = {}
        family, hist = "control", name != "coin_flip"
        prose = {"perseveration": "Repeat the previous response.", "alternating": "Alternate responses.",
                 "coin_flip": "Choose at random."}[name]
        prob = {"perseveration": perseveration_prob, "alternating": alternating_prob,
                "coin_flip": coin_flip_prob}[name]
    else:
        family, prose, delta, mech, noisy, hist = RULES[name]
        specs = {**(NOISE if noisy else {}), **mech}
        prob = _noisy(delta)
    for k, v in overrides.items():
        if k not in specs and k not in ("beta", "eps"):
            raise ValueError(f"theory {name} has no parameter {k!r}; it has {sorted(specs)}")
        specs[k] = float(v) if isinstance(v, (int, float)) else v
    spec = {"factory": name, "policy": policy,
            "overrides": {k: ParamSpace({k: v}).to_json()[k] for k, v in sorted(overrides.items())}}
    return LibraryTheory(name=name if not overrides else f"{name}({_fmt(overrides)})", family=family, prose=prose,
                         params=ParamSpace(specs), prob=prob, spec=spec, policy=policy, history_dependent=hist)


def _fmt(ov: dict) -> str:
    parts = []
    for k, v in sorted(ov.items()):
        parts.append(f"{k}={v:g}" if isinstance(v, (int, float)) else f"{k}=[{v.lo:g},{v.hi:g}]"
                     if isinstance(v, Interval) else f"{k}={v}")
    return ",".join(parts)


def ttb(**kw) -> LibraryTheory: return _build("ttb", **kw)
def tallying(**kw) -> LibraryTheory: return _build("tallying", **kw)
def ew(**kw) -> LibraryTheory: return _build("ew", **kw)
def wadd(**kw) -> LibraryTheory: return _build("wadd", **kw)
def wadd_weighted(**kw) -> LibraryTheory: return _build("wadd_weighted", **kw)
def logodds_wadd(**kw) -> LibraryTheory: return _build("logodds_wadd", **kw)
def dial(normalise: bool = True, **kw) -> LibraryTheory: return _build("dial" if normalise else "dial_raw", **kw)
def rank_decay(**kw) -> LibraryTheory: return _build("rank_decay", **kw)
def dr_wadd(**kw) -> LibraryTheory: return _build("dr_wadd", **kw)
def mixture_ttb_wadd(**kw) -> LibraryTheory: return _build("mixture_ttb_wadd", **kw)
def satisficing_wadd(**kw) -> LibraryTheory: return _build("satisficing_wadd", **kw)
def take_the_worst(**kw) -> LibraryTheory: return _build("take_the_worst", **kw)
def single_cue(**kw) -> LibraryTheory: return _build("single_cue", **kw)
def anti_majority(**kw) -> LibraryTheory: return _build("anti_majority", **kw)
def cue_parity(**kw) -> LibraryTheory: return _build("cue_parity", **kw)
def perseveration(**kw) -> LibraryTheory: return _build("perseveration", **kw)
def alternating(**kw) -> LibraryTheory: return _build("alternating", **kw)
def coin_flip(**kw) -> LibraryTheory: return _build("coin_flip", **kw)


REGISTRY: dict[str, Callable[..., LibraryTheory]] = {
    "ttb": ttb, "tallying": tallying, "ew": ew, "wadd": wadd, "wadd_weighted": wadd_weighted,
    "logodds_wadd": logodds_wadd, "dial": dial, "dial_raw": lambda **kw: dial(normalise=False, **kw),
    "rank_decay": rank_decay, "dr_wadd": dr_wadd, "mixture_ttb_wadd": mixture_ttb_wadd,
    "satisficing_wadd": satisficing_wadd, "take_the_worst": take_the_worst, "single_cue": single_cue,
    "anti_majority": anti_majority, "cue_parity": cue_parity, "perseveration": perseveration,
    "alternating": alternating, "coin_flip": coin_flip,
}

# ---------------------------------------------------------------------------------------------------------------
# [R] program grammar: (transform, weighting, comparison) + the noise model [C], plus one mixture family.

TRANSFORMS = ("identity", "power_shift", "threshold", "sat_exp")
WEIGHTINGS = ("equal", "validity", "logodds", "dial", "rank")
COMPARISONS = ("additive", "tally", "lexicographic")
MECH_PRIORS: dict[str, dict[str, Interval]] = {
    "identity": {}, "power_shift": {"alpha": Interval(0.1, 1.0), "s": Interval(0.1, 5.0)},
    "threshold": {"t": Interval(0.0, 1.0)},  # t as a fraction of R (t_abs = t·R) [R]
    "sat_exp": {"k": Interval(0.05, 5.0, log=True)},
    "equal": {}, "validity": {}, "logodds": {}, "dial": {"gamma": Interval(0.0, 10.0)},
    "rank": {"lam": Interval(0.0, 1.0)}, "mixture": {"p": Interval(0.0, 1.0)},
}


def _transform(kind: str, x: np.ndarray, p: dict, R: float) -> np.ndarray:
    if kind == "identity":
        return x
    if kind == "power_shift":
        return power_shift(x, _s(p, "alpha")[..., None], _s(p, "s")[..., None])
    if kind == "threshold":
        return (x >= _s(p, "t")[..., None] * R).astype(float)
    k = _s(p, "k")[..., None]
    return (1 - np.exp(-k * x)) / (1 - np.exp(-k * R))


def _weights(kind: str, v: np.ndarray, p: dict, S: int) -> np.ndarray:
    if kind == "equal":
        return np.ones((S, v.size))
    if kind == "validity":
        return np.broadcast_to(v, (S, v.size))
    if kind == "logodds":
        vc = np.clip(v, 0.5 + 1e-6, 1 - 1e-6)
        return np.broadcast_to(np.log(vc / (1 - vc)), (S, v.size))
    if kind == "dial":
        return dial_weights(v, p["gamma"], True)
    return rank_weights(v, p["lam"])


def program_delta(transform: str, weighting: str, comparison: str):
    def delta(p, A, B, ctx):
        v, R = _v(ctx), float(ctx.get("rating_max", 1))
        if comparison == "lexicographic":
            return _ttb_delta(np.argsort(-v, kind="stable"), _transform(transform, A, p, R) -
                              _transform(transform, B, p, R))
        S = len(p["beta"])
        w = _weights(weighting, v, p, S)[:, None, :]
        du = _transform(transform, A, p, R) - _transform(transform, B, p, R)
        return ((du if comparison == "additive" else np.sign(du)) * w).sum(-1)
    return delta


def program(transform: str, weighting: str, comparison: str, ranges: dict | None = None,
            policy: str = "sample") -> LibraryTheory:
    """One grammar point. ``ranges`` re-ranges any parameter (name -> (lo, hi)). ``comparison='mixture'`` is the
    p·lexicographic + (1-p)·additive-validity family (transform applies to both parts)."""
    ranges = ranges or {}
    if comparison == "lexicographic":
        weighting = "validity"  # lexicographic takes only the validity order [R]
    specs: dict[str, Spec] = dict(NOISE)
    specs.update(MECH_PRIORS[transform])
    if comparison == "mixture":
        specs.update(MECH_PRIORS["mixture"])
        weighting = "validity"
    elif comparison != "lexicographic":
        specs.update(MECH_PRIORS[weighting])
    for k, (lo, hi) in ranges.items():
        base = specs[k]
        specs[k] = Interval(lo, hi, log=getattr(base, "log", False))
    if comparison == "mixture":
        lex, add = program_delta(transform, "validity", "lexicographic"), program_delta(transform, "validity",
                                                                                        "additive")

        def prob(p, A, B, ctx, prev):
            beta, eps, w = _s(p, "beta"), _s(p, "eps"), _s(p, "p")
            return w * lapse_logistic(lex(p, A, B, ctx), beta, eps) + (1 - w) * lapse_logistic(
                add(p, A, B, ctx), beta, eps)
    else:
        prob = _noisy(program_delta(transform, weighting, comparison))
    family = f"{transform}/{weighting}/{comparison}"
    spec = {"factory": "program", "transform": transform, "weighting": weighting, "comparison": comparison,
            "ranges": {k: list(v) for k, v in sorted(ranges.items())}, "policy": policy}
    rtxt = ",".join(f"{k}∈[{lo:g},{hi:g}]" for k, (lo, hi) in sorted(ranges.items()))
    return LibraryTheory(name=f"prog:{family}" + (f"[{rtxt}]" if rtxt else ""), family=family,
                         prose=f"Program: transform={transform}, weighting={weighting}, comparison={comparison}.",
                         params=ParamSpace(specs), prob=prob, spec=spec, policy=policy)


def families(cardinal: bool) -> list[tuple[str, str, str]]:
    """Grammar families: 12 binary (transforms collapse to identity on binary cues [I]), 45 cardinal."""
    trs = TRANSFORMS if cardinal else ("identity",)
    out = []
    for t in trs:
        for w in WEIGHTINGS:
            for c in ("additive", "tally"):
                out.append((t, w, c))
        out.append((t, "validity", "lexicographic"))
    out.append(("identity", "validity", "mixture"))
    return out


def theory_from_spec(spec: dict) -> LibraryTheory:
    """Rebuild a library or program theory from its JSON recipe (ledger replay)."""
    from agentmill.methods.autocog.theory import spec_from_json

    if spec["factory"] == "code":
        from agentmill.methods.autocog.theory import CodeTheory, ParamSpace as PS

        return CodeTheory(spec["name"], spec["prose"], spec["source"], PS.from_json(spec["params"]),
                          spec.get("policy", "sample"))
    if spec["factory"] == "program":
        return program(spec["transform"], spec["weighting"], spec["comparison"],
                       {k: tuple(v) for k, v in spec["ranges"].items()}, policy=spec.get("policy", "sample"))
    ov = {k: spec_from_json(v) for k, v in spec.get("overrides", {}).items()}
    return _build(spec["factory"], policy=spec.get("policy", "sample"), **ov)
