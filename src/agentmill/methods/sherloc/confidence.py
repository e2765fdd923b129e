"""A deployable confidence filter: P(case file localizes every gold file) from what exists at inference time [R].

It never reads the gold patch. Features of one case file (from its k runs on the same issue):

1. ``agree_files`` / ``agree_lines``: mean pairwise Jaccard of the runs' predicted file sets, and mean pairwise
   line IoU of their ranges within shared files (k-sample agreement; 1 run -> 1.0);
2. ``grounding``: mean share of the cited lines that were displayed to the model in its episode (by ``view_file``
   or a search window); a range never seen is a guess;
3. ``anchoring``: share of cited ranges whose enclosing function or class contains an identifier from the issue;
4. ``clean_exit``: success without the forced final turn, length retries or loop interventions;
5. ``n_files``, ``log_lines``: spread (more is less confident).

:class:`ConfidenceModel` combines them by L2-regularised logistic regression (Newton steps, numpy) or, with
``method="naive_bayes"``, by per-feature binned likelihood ratios summed in log-odds. Thresholds are chosen on a
calibration split, never on the evaluation instances. The gold-patch ("oracle") filter is only a ceiling and is
labelled non-deployable wherever it is reported.
"""

from __future__ import annotations

import ast
import itertools
import math
import re
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np

FEATURES = ("agree_files", "agree_lines", "grounding", "anchoring", "clean_exit", "n_files", "log_lines")
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]{2,}")
STOP = frozenset("""self none true false return assert def class import from not and for while with the that this
test tests failed error line file python""".split())


def _locs(res: Any) -> list[tuple[str, int, int]]:
    cf = getattr(res, "case_file", None) or {}
    return [(loc["file"], int(loc["start"]), int(loc["end"])) for loc in cf.get("locations", [])]


def _line_set(locs: Sequence[tuple[str, int, int]], f: str) -> set[int]:
    out: set[int] = set()
    for p, s, e in locs:
        if p == f:
            out.update(range(s, e + 1))
    return out


def _spans(text: str) -> list[tuple[int, int, str]]:
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    return [(n.lineno, n.end_lineno or n.lineno, ast.get_source_segment(text, n) or "") for n in ast.walk(tree)
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]


def features(runs: Sequence[Any], issue: str, snapshot: Any) -> dict[str, float]:
    """The feature vector of the first run's case file, using all ``runs`` (same issue) for agreement."""
    if not runs:
        raise ValueError("features need at least one localization run")
    main = runs[0]
    locs = _locs(main)
    files = [{p for p, _, _ in _locs(r)} for r in runs]
    pairs = list(itertools.combinations(range(len(runs)), 2))
    if pairs:
        jac = [len(files[a] & files[b]) / len(files[a] | files[b]) if files[a] | files[b] else 1.0 for a, b in pairs]
        ious = []
        for a, b in pairs:
            for f in files[a] & files[b]:
                la, lb = _line_set(_locs(runs[a]), f), _line_set(_locs(runs[b]), f)
                ious.append(len(la & lb) / len(la | lb) if la | lb else 1.0)
        agree_files, agree_lines = float(np.mean(jac)), float(np.mean(ious)) if ious else 0.0
    else:
        agree_files = agree_lines = 1.0
    viewed = getattr(main, "viewed", None)
    ground = [viewed.covers(p, s, e) for p, s, e in locs] if viewed is not None and locs else [0.0]
    ids = {w for w in IDENT.findall(issue) if w.lower() not in STOP}
    anch = []
    for p, s, e in locs:
        if not snapshot.is_text(p):
            anch.append(0.0)
            continue
        spans = [sp for sp in _spans(snapshot.text(p)) if sp[0] <= s and sp[1] >= e]
        seg = min(spans, key=lambda sp: sp[1] - sp[0])[2] if spans else "\n".join(snapshot.lines(p)[s - 1:e])
        anch.append(float(any(w in seg for w in ids)))
    n_lines = sum(e - s + 1 for _, s, e in locs)
    return {"agree_files": agree_files, "agree_lines": agree_lines, "grounding": float(np.mean(ground)),
            "anchoring": float(np.mean(anch)) if anch else 0.0, "clean_exit": float(bool(main.clean_exit)),
            "n_files": float(len({p for p, _, _ in locs})), "log_lines": math.log1p(n_lines)}


class ConfidenceModel:
    """Logistic (default) or naive-Bayes combination of :data:`FEATURES` into P(all gold files localized)."""

    def __init__(self, l2: float = 1.0, bins: int = 3) -> None:
        self.l2, self.bins = l2, bins
        self.method: str | None = None
        self.w: np.ndarray | None = None
        self.mu = self.sd = None
        self.edges: list[np.ndarray] = []
        self.llr: list[np.ndarray] = []
        self.prior = 0.0

    @staticmethod
    def matrix(rows: Sequence[dict[str, float]]) -> np.ndarray:
        return np.array([[float(r[f]) for f in FEATURES] for r in rows], dtype=float)

    def fit(self, X: Any, y: Sequence[int], method: Literal["logistic", "naive_bayes"] = "logistic"
            ) -> ConfidenceModel:
        X = self.matrix(X) if len(X) and isinstance(X[0], dict) else np.asarray(X, dtype=float)
        y = np.asarray(y, dtype=float)
        if X.shape[0] != y.shape[0] or X.shape[0] < 2:
            raise ValueError(f"fit needs >= 2 labelled rows with matching X and y, got {X.shape[0]} and {len(y)}")
        if method not in ("logistic", "naive_bayes"):
            raise ValueError(f"method must be 'logistic' or 'naive_bayes', got {method!r}")
        self.method = method
        if method == "logistic":
            self.mu, self.sd = X.mean(0), X.std(0) + 1e-9
            Z = np.hstack([np.ones((len(X), 1)), (X - self.mu) / self.sd])
            w = np.zeros(Z.shape[1])
            reg = self.l2 * np.eye(Z.shape[1])
            reg[0, 0] = 0.0
            for _ in range(50):  # Newton steps on the penalised log-likelihood
                p = 1 / (1 + np.exp(-Z @ w))
                g = Z.T @ (p - y) + reg @ w
                H = (Z * (p * (1 - p))[:, None]).T @ Z + reg + 1e-9 * np.eye(len(w))
                step = np.linalg.solve(H, g)
                w -= step
                if np.abs(step).max() < 1e-10:
                    break
            self.w = w
        else:
            pos = y.mean()
            self.prior = math.log((pos + 0.5 / len(y)) / (1 - pos + 0.5 / len(y)))
            self.edges, self.llr = [], []
            for j in range(X.shape[1]):
                edges = np.unique(np.quantile(X[:, j], np.linspace(0, 1, self.bins + 1)[1:-1]))
                b = np.searchsorted(edges, X[:, j], side="right")
                llr = np.zeros(len(edges) + 1)
                for k in range(len(edges) + 1):
                    a1 = ((b == k) & (y == 1)).sum() + 0.5
                    a0 = ((b == k) & (y == 0)).sum() + 0.5
                    llr[k] = math.log(a1 / ((y == 1).sum() + 1)) - math.log(a0 / ((y == 0).sum() + 1))
                self.edges.append(edges)
                self.llr.append(llr)
        return self

    def predict(self, x: dict[str, float] | Sequence[float]) -> float:
        v = np.array([float(x[f]) for f in FEATURES]) if isinstance(x, dict) else np.asarray(x, dtype=float)
        if self.method is None:
            raise RuntimeError("ConfidenceModel.predict before fit")
        if self.method == "logistic":
            z = self.w[0] + ((v - self.mu) / self.sd) @ self.w[1:]
        else:
            z = self.prior + sum(self.llr[j][np.searchsorted(self.edges[j], v[j], side="right")]
                                 for j in range(len(v)))
        return float(1 / (1 + math.exp(-max(-50.0, min(50.0, z)))))


def injection_decision(p: float, tau_full: float, tau_loc: float) -> Literal["full", "locations", "none"]:
    """Inject the full case file if p ≥ τ_full, only its locations if τ_loc ≤ p < τ_full, nothing otherwise."""
    if not (0 <= tau_loc <= tau_full <= 1):
        raise ValueError(f"need 0 <= tau_loc <= tau_full <= 1, got tau_loc={tau_loc}, tau_full={tau_full}")
    if not 0 <= p <= 1:
        raise ValueError(f"p must be in [0, 1], got {p}")
    return "full" if p >= tau_full else ("locations" if p >= tau_loc else "none")
