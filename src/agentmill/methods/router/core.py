"""The learned router, top to bottom: features → outcome matrices → soft targets → L-BFGS head (stage A) →
sep-CMA-ES (stage B) → λ choice on validation → masked argmax at inference.

``Router.fit`` reads an :class:`~agentmill.methods.router.table.OutcomeTable`; ``Router.route`` needs only the
query text (the features are computed from it) and an optional set of allowed workers (per-tenant opt-out, outage
fallback: masked workers get −∞). ``fallback`` in a decision says the unmasked favourite was not allowed.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agentmill.methods.router.config import LAMBDA_GRID, RouterConfig
from agentmill.methods.router.features import make_features
from agentmill.methods.router.head import (ESReport, evolve, fit_soft_targets, objective, route_argmax,
                                           soft_targets)


@dataclass
class FitReport:
    lam: float
    val_acc: float
    val_cost: float
    val_acc_sft: float
    per_lambda: dict[str, dict[str, float]] = field(default_factory=dict)
    es: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0


@dataclass(frozen=True)
class RouteDecision:
    worker: str
    scores: dict[str, float]
    feature_ms: float
    fallback: bool
    ranked: tuple[str, ...] = ()


def cost_matrix(table: Any, ids: Sequence[str], workers: Sequence[str], cost: str) -> tuple[np.ndarray, np.ndarray]:
    """(Y, cost) for ``ids`` × ``workers``: cost is the latency column for ``cost="latency"``, else the cost column."""
    Y, C, L = table.matrices(ids, workers)
    return Y, (L if cost == "latency" else C)


class Router:
    """A bias-free linear head over query features, one row per worker (:mod:`agentmill.methods.router.head`)."""

    def __init__(self, config: RouterConfig, workers: Sequence[str]) -> None:
        if len(workers) < 2:
            raise ValueError(f"a router needs at least 2 workers, got {list(workers)}")
        if len(set(workers)) != len(workers):
            raise ValueError(f"duplicate workers in {list(workers)}")
        self.config, self.workers = config, list(workers)
        self.features = make_features(config.features)
        self.W: np.ndarray | None = None
        self.lam: float = 0.0
        self.fingerprints: dict[str, str] = {}
        self.cost_scale: float = 1.0

    # ------------------------------------------------------------------------------------------------ training
    def fit(self, table: Any, train_ids: Sequence[str], val_ids: Sequence[str], texts: Mapping[str, str]) -> FitReport:
        X = self.features.transform([texts[q] for q in train_ids])
        Xv = self.features.transform([texts[q] for q in val_ids])
        Y, C = cost_matrix(table, train_ids, self.workers, self.config.cost)
        Yv, Cv = cost_matrix(table, val_ids, self.workers, self.config.cost)
        self.fingerprints = {w: table.fingerprint(w) or "" for w in self.workers}
        return self.fit_arrays(X, Y, C, Xv, Yv, Cv)

    def fit_arrays(self, X: np.ndarray, Y: np.ndarray, C: np.ndarray, Xv: np.ndarray, Yv: np.ndarray,
                   Cv: np.ndarray) -> FitReport:
        """Fit from precomputed features (X, Xv) and outcome/cost matrices (train, validation)."""
        cfg, t0 = self.config, time.perf_counter()
        # Ĉ = cost / the pool's maximum mean cost (on training), so λ is in "accuracy per max-worker cost" units.
        self.cost_scale = float(max(C.mean(axis=0).max(), 1e-12))
        Ch, Cvh = C / self.cost_scale, Cv / self.cost_scale
        lambdas = LAMBDA_GRID if cfg.cost_lambda == "auto" else (float(cfg.cost_lambda),)
        fits: dict[float, tuple[np.ndarray, float, float, float, ESReport | None]] = {}
        for lam in lambdas:
            W_sft = np.zeros((len(self.workers), X.shape[1]))
            acc_sft = float("nan")
            if cfg.sft:  # stage A: soft-target KL fit, convex, L-BFGS
                P = soft_targets(Y, Ch, lam, cfg.tau)
                W_sft = fit_soft_targets(X, P, cfg.l2)
                acc_sft = objective(route_argmax(Xv, W_sft), Yv, np.zeros_like(Yv), 0.0, 0.0)
            W, rep = W_sft, None
            if cfg.es and cfg.es_generations > 0:  # stage B: sep-CMA-ES on vec(W), best-on-validation kept
                rms = float(np.sqrt(np.mean(W_sft.astype(np.float64) ** 2))) if cfg.sft else 1.0
                W, rep = evolve(W_sft, X, Y, Ch, Xv, Yv, Cvh, lam=lam, w_div=cfg.diversity_bonus,
                                generations=cfg.es_generations, sigma0=cfg.es_sigma0 * rms, popsize=cfg.es_popsize,
                                batch=cfg.es_batch, seed=cfg.seed, patience=cfg.es_patience)
            choice = route_argmax(Xv, W)
            acc = float(Yv[np.arange(len(choice)), choice].mean())
            cost = float(Cv[np.arange(len(choice)), choice].mean())
            fits[lam] = (W, acc, cost, acc_sft, rep)
        if cfg.cost_lambda == "auto":  # the largest λ within 1 point of λ = 0 on validation
            base = fits[0.0][1]
            lam = max(lam for lam in lambdas if fits[lam][1] >= base - 0.01)
        else:
            lam = lambdas[0]
        self.W, self.lam = fits[lam][0], lam
        rep = fits[lam][4]
        return FitReport(lam=lam, val_acc=fits[lam][1], val_cost=fits[lam][2], val_acc_sft=fits[lam][3],
                         per_lambda={str(k): {"val_acc": v[1], "val_cost": v[2]} for k, v in fits.items()},
                         es=asdict(rep) if rep is not None else {}, seconds=time.perf_counter() - t0)

    # ------------------------------------------------------------------------------------------------ inference
    def _mask(self, allowed: set[str] | None) -> np.ndarray | None:
        if allowed is None:
            return None
        unknown = set(allowed) - set(self.workers)
        if unknown:
            raise ValueError(f"allowed workers {sorted(unknown)} are not in this router's pool {self.workers}")
        mask = np.array([w in allowed for w in self.workers])
        if not mask.any():
            raise ValueError("every worker is masked: allow at least one")
        return mask

    def route_features(self, X: np.ndarray, allowed: set[str] | None = None) -> np.ndarray:
        """Worker indices for precomputed features (batch form of :meth:`route`)."""
        if self.W is None:
            raise RuntimeError("the router is not fitted: call fit() or Router.load()")
        return route_argmax(X, self.W, self._mask(allowed))

    def route(self, query: str, *, allowed: set[str] | None = None) -> RouteDecision:
        if self.W is None:
            raise RuntimeError("the router is not fitted: call fit() or Router.load()")
        t0 = time.perf_counter()
        x = self.features.transform([query])
        feature_ms = 1000 * (time.perf_counter() - t0)
        z = np.asarray(x @ self.W.T).ravel()
        mask = self._mask(allowed)
        order = np.argsort(-z, kind="stable")
        ranked = [self.workers[i] for i in order if mask is None or mask[i]]
        return RouteDecision(worker=ranked[0], scores={w: float(v) for w, v in zip(self.workers, z)},
                             feature_ms=feature_ms, fallback=ranked[0] != self.workers[int(order[0])],
                             ranked=tuple(ranked))

    # ------------------------------------------------------------------------------------------------ files
    def save(self, path: str | os.PathLike[str]) -> None:
        if self.W is None:
            raise RuntimeError("nothing to save: the router is not fitted")
        from agentmill.core.records import write_json_atomic
        write_json_atomic(path, {"format": "agentmill.router/1", "config": asdict(self.config),
                                 "features": self.features.config(), "workers": self.workers,
                                 "fingerprints": self.fingerprints, "lambda": self.lam,
                                 "cost_scale": self.cost_scale, "W": np.round(self.W, 7).tolist()})

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Router:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
        if doc.get("format") != "agentmill.router/1":
            raise ValueError(f"{path}: not a router file (format {doc.get('format')!r})")
        r = cls(RouterConfig(**doc["config"]), doc["workers"])
        W = np.asarray(doc["W"], dtype=np.float64)
        if W.shape[0] != len(r.workers) or not np.all(np.isfinite(W)):
            raise ValueError(f"{path}: W has shape {W.shape} for {len(r.workers)} workers or non-finite entries")
        r.W, r.lam = W, float(doc.get("lambda", 0.0))
        r.fingerprints, r.cost_scale = dict(doc.get("fingerprints", {})), float(doc.get("cost_scale", 1.0))
        return r

    def check_pool(self, available: Sequence[str]) -> None:
        """Raise when a worker of this router is absent from the pool it is served with."""
        missing = [w for w in self.workers if w not in set(available)]
        if missing:
            raise ValueError(f"router workers {missing} are absent from the pool {list(available)}")


