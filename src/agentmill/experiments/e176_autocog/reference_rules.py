"""An independent, loop-by-loop reference for the decision rules of the AutoCog library, and the cue-validity vectors
and binary option pairs it is checked on.

The library computes choice probabilities vectorised; AC-1 (``library``), the human-fixture check (``fixture``)
and the speed claims (``perf``) compare it with this plain re-derivation from the rule definitions."""

from __future__ import annotations

import itertools
import math

import numpy as np

VECTORS = ((0.9, 0.7, 0.6), (0.8, 0.75, 0.55), (0.9, 0.8, 0.7, 0.6), (0.9, 0.7, 0.6, 0.5),
           (0.9, 0.8, 0.7, 0.6, 0.55), (0.95, 0.85, 0.7, 0.65, 0.6))


def binary_pairs(F: int) -> tuple[np.ndarray, np.ndarray]:
    vecs = list(itertools.product((0, 1), repeat=F))
    pairs = [(a, b) for a in vecs for b in vecs if a != b]
    return np.array([p[0] for p in pairs], float), np.array([p[1] for p in pairs], float)


def ref_prob(name: str, p: dict, a, b, v, R) -> float:
    F = len(v)
    d = [a[i] - b[i] for i in range(F)]
    if name in ("ttb", "mixture_ttb_wadd"):
        order = sorted(range(F), key=lambda i: (-v[i], i))
        dttb = 0.0
        for i in order:
            if d[i] != 0:
                dttb = 1.0 if d[i] > 0 else -1.0
                break
        if name == "ttb":
            delta = dttb
    if name == "tallying":
        delta = sum(1 for x in d if x > 0) - sum(1 for x in d if x < 0)
    elif name == "ew":
        delta = sum(d)
    elif name in ("wadd", "mixture_ttb_wadd"):
        delta = sum(v[i] * d[i] for i in range(F))
    elif name == "logodds_wadd":
        delta = 0.0
        for i in range(F):
            vc = min(max(v[i], 0.5 + 1e-6), 1 - 1e-6)
            delta += math.log(vc / (1 - vc)) * d[i]
    elif name == "dial":
        w = [v[i] ** p["gamma"] for i in range(F)]
        delta = sum(w[i] / max(w) * d[i] for i in range(F))
    elif name == "rank_decay":
        ranks = []
        for i in range(F):
            greater = sum(1 for j in range(F) if v[j] > v[i])
            equal = sum(1 for j in range(F) if v[j] == v[i])
            ranks.append(greater + (equal + 1) / 2)
        delta = sum(p["lam"] ** (ranks[i] - 1) * d[i] for i in range(F))
    elif name == "dr_wadd":
        def u(x):
            return (x + p["s"]) ** p["alpha"] - p["s"] ** p["alpha"]
        delta = sum(v[i] / sum(v) * (u(a[i]) - u(b[i])) for i in range(F))
    elif name == "satisficing_wadd":
        t = p["t"] * R
        delta = sum(v[i] * ((1.0 if a[i] >= t else 0.0) - (1.0 if b[i] >= t else 0.0)) for i in range(F))
    beta, eps = p["beta"], p["eps"]
    if name == "mixture_ttb_wadd":
        pt = (1 - eps) * _sig(beta * dttb) + eps / 2
        pw = (1 - eps) * _sig(beta * delta) + eps / 2
        return p["p"] * pt + (1 - p["p"]) * pw
    return (1 - eps) * _sig(beta * delta) + eps / 2


def _sig(z: float) -> float:
    return 1 / (1 + math.exp(-max(min(z, 500), -500)))
