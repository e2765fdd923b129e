"""ReviewWorld: a reviewer with a known bias toward machine-written documents, a known anchor, a hidden oracle.

The Red Queen method (``agentmill.methods.red_queen``) needs a world where "the judge is biased" and "the bias was
trained out" are measurable facts, not opinions. Every document carries an oracle quality ``q`` in [0, 1] that no
judge sees, an origin (human or machine) and five observables ``φ = (z1, z2, polish, style, length)``:

- ``z1, z2 = q + N(0, noise_sd²)``: two noisy views of quality (what a fair reviewer should read);
- ``polish``: confident, adjective-rich prose; machine writers can buy it at the cost of quality;
- ``style``: a machine-style marker (0/1), mostly present in machine text;
- ``length``: standardised length; verbosity is a writer parameter.

Ground truth ``y = 1[q ≥ y_threshold]``. Human documents: ``q ~ Beta(3, 3)``, polish ``~ clip(N(0.35, 0.15²))``,
style ``~ Bernoulli(0.1)``, length ``~ N(0, 1)``. A machine writer ``θ = (effort e, polish bias b, verbosity v)`` in
[0,1]² × [−1,1] writes ``q ~ Beta(κm, κ(1−m))`` with ``m = 0.2 + 0.6·e·(1 − 0.5·b)``, κ = 12, polish
``~ clip(N(0.2 + 0.7·b, 0.1²))``, style ``~ Bernoulli(0.85)``, length ``~ N(v, 0.5²)``. All of this is the project's
design [R] (docs/methods/red_queen.md); the incumbent's bias is built from the features LLM-judge studies name
(verbosity, machine style, polish).

Judges are :class:`LogisticJudge` objects: accept iff ``w·φ̃ + w0 ≥ 0`` with ``φ̃`` standardised by the human
pool's statistics. The biased incumbent ``J0`` and the reference judge ``J*`` (a logistic fit of ``y`` on
``(z1, z2)``) are built per world; ``review-strict`` starts from ``J*`` made over-strict (its false-reject rate on
the decision anchor ≥ 40 %); ``review-lenient-anchor`` labels the anchor with ``1[q ≥ 0.40]``.

The world checks WC-1..WC-4 (:meth:`ReviewWorld.world_checks`) must pass before any claim runs; the constants of
:class:`WorldConstants` were adjusted against those checks only, and every record prints them.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from agentmill.core.seeding import rng_for

VARIANTS = ("review", "review-strict", "review-lenient-anchor")
FEATURES = ("z1", "z2", "polish", "style", "length")


@dataclass(frozen=True)
class WorldConstants:
    """Every constant of ReviewWorld [R]; only J0's intercept is tuned (per world, against WC-1): ``world_checks``."""

    noise_sd: float = 0.15
    """Noise of the two quality views z1, z2."""
    y_threshold: float = 0.45
    """Oracle label: y = 1[q ≥ y_threshold]."""
    lenient_threshold: float = 0.30
    """The lenient anchor's label threshold (review-lenient-anchor)."""
    human_beta: tuple[float, float] = (3.0, 3.0)
    human_polish: tuple[float, float] = (0.35, 0.15)
    human_style: float = 0.1
    kappa: float = 12.0
    m_base: float = 0.2
    m_gain: float = 0.6
    b_cost: float = 0.5
    polish_base: float = 0.2
    polish_gain: float = 0.7
    polish_sd: float = 0.1
    machine_style: float = 0.85
    length_sd: float = 0.5
    j0_w: tuple[float, ...] = (1.2, 1.2, 1.0, 0.6, 0.2)
    """The biased incumbent's weights on standardised (z1, z2, polish, style, length)."""
    j0_r_target: float = 1.9
    """J0's intercept w0 is tuned per world (bisection on the probe) so that R(J0) is this value: the middle of WC-1's
    [1.8, 2.0]. With a fixed w0 the probe's sampling noise moved R(J0) by ±0.07 between world seeds."""
    seed_writer: tuple[float, float, float] = (0.5, 0.2, 0.0)
    expand_sd: float = 0.1
    p_unviable: float = 0.1
    n_tasks: int = 16
    format_bound: float = 1.5
    n_train: int = 100
    n_select: int = 200
    n_holdout: int = 100
    n_probe: int = 2000
    strict_frr: float = 0.40
    """The over-strict incumbent's false-reject rate on the decision anchor (at least this)."""
    n_norm: int = 20000
    """Human documents behind the standardisation statistics."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class DocBatch:
    """Documents as parallel arrays (shape (n,) each). ``q`` is the oracle quality: judges never read it."""

    q: np.ndarray
    origin: np.ndarray
    """0 = human, 1 = machine."""
    z1: np.ndarray
    z2: np.ndarray
    polish: np.ndarray
    style: np.ndarray
    length: np.ndarray

    def __len__(self) -> int:
        return int(self.q.shape[0])

    def features(self) -> np.ndarray:
        """φ as a (n, 5) float array in :data:`FEATURES` order."""
        return np.stack([self.z1, self.z2, self.polish, self.style, self.length], axis=1)

    def take(self, idx: Any) -> DocBatch:
        return DocBatch(*(getattr(self, f)[idx] for f in _FIELDS))

    @staticmethod
    def concat(batches: list[DocBatch]) -> DocBatch:
        return DocBatch(*(np.concatenate([getattr(b, f) for b in batches]) for f in _FIELDS))

    def hashes(self) -> list[str]:
        """A content hash per document (all fields), for the disjointness check of the splits."""
        rows = np.stack([getattr(self, f).astype(float) for f in _FIELDS], axis=1)
        return [hashlib.sha256(r.tobytes()).hexdigest()[:16] for r in rows]

    def to_rows(self) -> list[list[float]]:
        """JSON rows (q, origin, z1, z2, polish, style, length): how a ledger stores a generated document."""
        return np.stack([getattr(self, f).astype(float) for f in _FIELDS], axis=1).round(12).tolist()

    @staticmethod
    def from_rows(rows: list[list[float]]) -> DocBatch:
        a = np.asarray(rows, dtype=float).reshape(-1, len(_FIELDS))
        return DocBatch(*(a[:, i] for i in range(len(_FIELDS))))


_FIELDS = ("q", "origin", "z1", "z2", "polish", "style", "length")


def _views(q: np.ndarray, rng: np.random.Generator, c: WorldConstants) -> tuple[np.ndarray, np.ndarray]:
    return q + rng.normal(0, c.noise_sd, q.shape), q + rng.normal(0, c.noise_sd, q.shape)


def human_docs(n: int, rng: np.random.Generator, c: WorldConstants = WorldConstants()) -> DocBatch:
    q = rng.beta(*c.human_beta, size=n)
    z1, z2 = _views(q, rng, c)
    polish = np.clip(rng.normal(c.human_polish[0], c.human_polish[1], n), 0.0, 1.0)
    style = (rng.random(n) < c.human_style).astype(float)
    length = rng.normal(0.0, 1.0, n)
    return DocBatch(q, np.zeros(n), z1, z2, polish, style, length)


def writer_mean_quality(theta: Any, c: WorldConstants = WorldConstants()) -> np.ndarray:
    """m(θ) = 0.2 + 0.6·e·(1 − 0.5·b), the mean oracle quality of writer θ (vectorised over rows of θ)."""
    t = np.asarray(theta, dtype=float)
    return c.m_base + c.m_gain * t[..., 0] * (1 - c.b_cost * t[..., 1])


def machine_docs(theta: Any, n: int, rng: np.random.Generator, c: WorldConstants = WorldConstants()) -> DocBatch:
    """``n`` documents from writer θ; θ may be (3,) (one writer) or (n, 3) (one writer per document)."""
    t = np.broadcast_to(np.asarray(theta, dtype=float), (n, 3))
    m = np.clip(writer_mean_quality(t, c), 1e-3, 1 - 1e-3)
    q = rng.beta(c.kappa * m, c.kappa * (1 - m))
    z1, z2 = _views(q, rng, c)
    polish = np.clip(rng.normal(c.polish_base + c.polish_gain * t[:, 1], c.polish_sd), 0.0, 1.0)
    style = (rng.random(n) < c.machine_style).astype(float)
    length = rng.normal(t[:, 2], c.length_sd)
    return DocBatch(q, np.ones(n), z1, z2, polish, style, length)


def clip_writer(theta: Any) -> np.ndarray:
    t = np.asarray(theta, dtype=float).copy()
    t[..., :2] = np.clip(t[..., :2], 0.0, 1.0)
    t[..., 2] = np.clip(t[..., 2], -1.0, 1.0)
    return t


@dataclass(frozen=True)
class LogisticJudge:
    """Accept iff ``w·(φ − mu)/sd + w0 ≥ 0``. ``judge_id`` names it in every utility record it produces."""

    judge_id: str
    w: tuple[float, ...]
    w0: float
    mu: tuple[float, ...]
    sd: tuple[float, ...]

    def margin(self, docs: DocBatch) -> np.ndarray:
        x = (docs.features() - np.asarray(self.mu)) / np.asarray(self.sd)
        return x @ np.asarray(self.w, dtype=float) + self.w0

    def accept(self, docs: DocBatch) -> np.ndarray:
        """bool, shape (n,)."""
        return self.margin(docs) >= 0

    def to_spec(self) -> dict[str, Any]:
        return {"kind": "logistic", "judge_id": self.judge_id, "w": [float(v) for v in self.w], "w0": float(self.w0),
                "mu": [float(v) for v in self.mu], "sd": [float(v) for v in self.sd]}

    @staticmethod
    def from_spec(spec: dict[str, Any]) -> LogisticJudge:
        return LogisticJudge(spec["judge_id"], tuple(spec["w"]), float(spec["w0"]), tuple(spec["mu"]),
                             tuple(spec["sd"]))


def fit_logistic(x: np.ndarray, y: np.ndarray, *, l2: float = 1e-2, iters: int = 60,
                 group: np.ndarray | None = None, parity: float = 0.0, labels: np.ndarray | None = None,
                 init: np.ndarray | None = None) -> np.ndarray:
    """Weights (d + 1,) (last = intercept) minimising mean logistic loss + ``l2``·|w|² + ``parity``·Σ_k gap_k².

    ``gap_k`` is the difference between the mean predicted acceptance of ``group == 1`` and ``group == 0`` items
    among items of true class k (``labels``), the equalised-odds gap the trap challenger penalises; the
    acceptance is the sigmoid of the margin (a smooth stand-in for the hard rule). Plain gradient descent with a
    backtracking step: small, deterministic and dependency-free (d ≤ 5, n ≤ a few hundred).
    """
    n, d = x.shape
    X = np.hstack([x, np.ones((n, 1))])
    beta = np.zeros(d + 1) if init is None else np.asarray(init, dtype=float).copy()
    use_parity = parity > 0 and group is not None and labels is not None
    masks = []
    if use_parity:
        for k in (0, 1):
            m1 = (labels == k) & (group == 1)
            m0 = (labels == k) & (group == 0)
            if m1.any() and m0.any():
                masks.append((m1, m0))

    def loss_grad(b: np.ndarray) -> tuple[float, np.ndarray]:
        z = X @ b
        p = 1.0 / (1.0 + np.exp(-z))
        loss = float(np.mean(np.logaddexp(0.0, z) - y * z)) + l2 * float(b[:d] @ b[:d])
        g = X.T @ (p - y) / n
        g[:d] += 2 * l2 * b[:d]
        for m1, m0 in masks:
            s = p * (1 - p)
            gap = p[m1].mean() - p[m0].mean()
            dg = (X[m1] * s[m1, None]).mean(0) - (X[m0] * s[m0, None]).mean(0)
            loss += parity * gap * gap
            g += parity * 2 * gap * dg
        return loss, g

    step = 1.0
    f, g = loss_grad(beta)
    for _ in range(iters):
        while step > 1e-6:
            cand = beta - step * g
            fc, gc = loss_grad(cand)
            if fc <= f - 1e-4 * step * float(g @ g):
                beta, f, g = cand, fc, gc
                step *= 1.5
                break
            step *= 0.5
        else:
            break
    return beta


@dataclass
class LabelledSplits:
    """The labelled sets fixed per world seed. ``*_y`` are the labels the world hands out for that split."""

    train: DocBatch
    train_y: np.ndarray
    select: DocBatch
    select_y: np.ndarray
    holdout: DocBatch
    holdout_y: np.ndarray


@dataclass
class ReviewWorld:
    """One world: constants, standardisation statistics, labelled splits, the oracle probe and the judges.

    ``variant``: ``review`` (biased incumbent J0), ``review-strict`` (over-strict J* as incumbent),
    ``review-lenient-anchor`` (J0, anchor labelled 1[q ≥ 0.40]). Built deterministically from ``seed``.
    """

    variant: str = "review"
    seed: int = 0
    constants: WorldConstants = field(default_factory=WorldConstants)

    def __post_init__(self) -> None:
        if self.variant not in VARIANTS:
            raise ValueError(f"unknown ReviewWorld variant {self.variant!r}; choose one of {', '.join(VARIANTS)}")
        c = self.constants
        norm = human_docs(c.n_norm, rng_for("review_world", self.seed, "norm"), c)
        f = norm.features()
        self.mu = tuple(float(v) for v in f.mean(0))
        self.sd = tuple(float(v) for v in f.std(0))
        # labelled pool: 200 human + 200 from a reference writer population with θ uniform
        rng = rng_for("review_world", self.seed, "labelled")
        n_lab = c.n_train + c.n_select + c.n_holdout
        hum = human_docs(n_lab // 2, rng, c)
        mach = machine_docs(self.reference_writers(n_lab - n_lab // 2, rng), n_lab - n_lab // 2, rng, c)
        pool = DocBatch.concat([hum, mach]).take(rng.permutation(n_lab))
        tr = pool.take(np.arange(0, c.n_train))
        se = pool.take(np.arange(c.n_train, c.n_train + c.n_select))
        ho = pool.take(np.arange(c.n_train + c.n_select, n_lab))
        anchor_thr = c.lenient_threshold if self.variant == "review-lenient-anchor" else c.y_threshold
        # [R] only the anchor (decision and holdout splits) is lenient; train and audits use the oracle label
        self.splits = LabelledSplits(tr, self.oracle_labels(tr), se, (se.q >= anchor_thr).astype(int),
                                     ho, (ho.q >= anchor_thr).astype(int))
        hashes = [set(b.hashes()) for b in (tr, se, ho)]
        if hashes[0] & hashes[1] or hashes[0] & hashes[2] or hashes[1] & hashes[2]:
            raise RuntimeError("ReviewWorld splits overlap (content hash): the anchor would leak into training")
        self.probe_human, self.probe_machine = self._probe()
        self.j0 = LogisticJudge("J0", tuple(c.j0_w), self._tune_j0_w0(), self.mu, self.sd)
        self.j_star = self._fit_reference()
        self.j_strict = self._over_strict()

    # -- populations -------------------------------------------------------------------------------------------
    def reference_writers(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """θ uniform on [0,1]² × [−1,1]: the machine half of the labelled pool and the probe."""
        t = rng.random((n, 3))
        t[:, 2] = 2 * t[:, 2] - 1
        return t

    def oracle_labels(self, docs: DocBatch) -> np.ndarray:
        return (docs.q >= self.constants.y_threshold).astype(int)

    def _probe(self) -> tuple[DocBatch, DocBatch]:
        """2,000 human + 2,000 machine documents with matched q: the machine documents are drawn per q bin (20
        equal-width bins) from a large reference pool, as many per bin as the human probe has there."""
        c = self.constants
        rng = rng_for("review_world", self.seed, "probe")
        hum = human_docs(c.n_probe, rng, c)
        big = machine_docs(self.reference_writers(20 * c.n_probe, rng), 20 * c.n_probe, rng, c)
        edges = np.linspace(0, 1, 21)
        hb = np.clip(np.digitize(hum.q, edges) - 1, 0, 19)
        mb = np.clip(np.digitize(big.q, edges) - 1, 0, 19)
        picks = []
        for b in range(20):
            need = int((hb == b).sum())
            have = np.flatnonzero(mb == b)
            if need == 0:
                continue
            if have.size == 0:
                raise RuntimeError(f"ReviewWorld probe: no machine documents with q in bin {b}")
            picks.append(rng.choice(have, size=need, replace=have.size < need))
        return hum, big.take(np.concatenate(picks))

    def _tune_j0_w0(self) -> float:
        """The intercept giving R(J0) = ``j0_r_target`` (R falls as w0 rises: a laxer judge lets more humans in)."""
        lo, hi = -4.0, 3.0
        for _ in range(40):
            mid = (lo + hi) / 2
            r, _ = self.bias_ratio(LogisticJudge("J0", tuple(self.constants.j0_w), mid, self.mu, self.sd))
            lo, hi = (mid, hi) if r > self.constants.j0_r_target else (lo, mid)
        return round((lo + hi) / 2, 6)

    def _fit_reference(self) -> LogisticJudge:
        """J*: logistic fit of the oracle label on (z1, z2) alone, on a large fresh labelled sample (reference only)."""
        c = self.constants
        rng = rng_for("review_world", self.seed, "jstar")
        docs = DocBatch.concat([human_docs(2000, rng, c), machine_docs(self.reference_writers(2000, rng), 2000,
                                                                       rng, c)])
        x = (docs.features() - np.asarray(self.mu)) / np.asarray(self.sd)
        beta = fit_logistic(x[:, :2], self.oracle_labels(docs).astype(float), l2=1e-4, iters=200)
        return LogisticJudge("J*", (float(beta[0]), float(beta[1]), 0.0, 0.0, 0.0), float(beta[2]), self.mu, self.sd)

    def _over_strict(self) -> LogisticJudge:
        """J* with its intercept lowered (0.05 steps) until its false-reject rate on the decision anchor ≥ 40 %."""
        w0 = self.j_star.w0
        if not (self.splits.select_y == 1).any():
            return LogisticJudge("J*-strict", self.j_star.w, w0, self.mu, self.sd)  # WC-4 fails this world anyway
        for _ in range(2000):
            j = LogisticJudge("J*-strict", self.j_star.w, w0, self.mu, self.sd)
            if false_reject_rate(j, self.splits.select, self.splits.select_y) >= self.constants.strict_frr:
                return j
            w0 -= 0.05
        raise RuntimeError("ReviewWorld: no intercept makes J* reject enough anchor positives")

    def incumbent(self) -> LogisticJudge:
        return self.j_strict if self.variant == "review-strict" else self.j0

    # -- measurements ------------------------------------------------------------------------------------------
    def bias_ratio(self, judge: Any) -> tuple[float, float]:
        """(R(J), raw ratio). R(J) = Σ_b n_b·acc(machine, b) / Σ_b n_b·acc(human, b) over q-deciles b of the human
        probe (weights n_b = human counts) on the matched probe; the raw ratio is the machine / human acceptance
        rate on the unmatched labelled pool (true quality differences included)."""
        edges = np.quantile(self.probe_human.q, np.linspace(0, 1, 11))
        hb = np.clip(np.searchsorted(edges, self.probe_human.q, side="right") - 1, 0, 9)
        mb = np.clip(np.searchsorted(edges, self.probe_machine.q, side="right") - 1, 0, 9)
        ah = judge.accept(self.probe_human).astype(float)
        am = judge.accept(self.probe_machine).astype(float)
        num = den = 0.0
        for b in range(10):
            nb = int((hb == b).sum())
            if nb == 0 or not (mb == b).any():
                continue
            num += nb * am[mb == b].mean()
            den += nb * ah[hb == b].mean()
        pool = DocBatch.concat([self.splits.train, self.splits.select, self.splits.holdout])
        acc = judge.accept(pool)
        h, m = acc[pool.origin == 0].mean(), acc[pool.origin == 1].mean()
        return (num / den if den > 0 else float("nan")), (float(m / h) if h > 0 else float("nan"))

    def writer_stats(self, theta: Any, judge: Any, n: int = 4000, seed: int = 0) -> dict[str, float]:
        """Acceptance under ``judge`` and oracle mean q of writer θ (n fresh documents)."""
        docs = machine_docs(theta, n, rng_for("review_world", self.seed, "writer_stats", seed), self.constants)
        return {"acceptance": float(judge.accept(docs).mean()), "q": float(docs.q.mean())}

    def world_checks(self, grid: int = 21, n_per_writer: int = 200) -> dict[str, dict[str, Any]]:
        """WC-1..WC-4, each ``{"pass": bool, ...values}``. WC-2/3 search the 21³ writer grid with common random
        numbers (the same noise for every θ), acceptance estimated from ``n_per_writer`` documents each."""
        r0, raw0 = self.bias_ratio(self.j0)
        rs, raws = self.bias_ratio(self.j_star)
        wc1 = {"R_J0": r0, "R_Jstar": rs, "raw_J0": raw0, "raw_Jstar": raws,
               "pass": bool(1.8 <= r0 <= 2.0 and 0.9 <= rs <= 1.1)}
        e, b, v = np.meshgrid(np.linspace(0, 1, grid), np.linspace(0, 1, grid), np.linspace(-1, 1, grid),
                              indexing="ij")
        thetas = np.stack([e.ravel(), b.ravel(), v.ravel()], axis=1)
        acc0, acc_s, qm = self._grid_acceptance(thetas, n_per_writer)
        q_best = thetas[int(np.argmax(qm))]
        a0 = thetas[int(np.argmax(acc0))]
        a_s = thetas[int(np.argmax(acc_s))]
        wc2 = {"theta_acc_max_J0": a0.tolist(), "q_acc_max_J0": float(qm[int(np.argmax(acc0))]),
               "theta_q_max": q_best.tolist(), "q_max": float(qm.max()),
               "pass": bool(a0[1] >= 0.7 and qm[int(np.argmax(acc0))] <= qm.max() - 0.1)}
        wc3 = {"theta_acc_max_Jstar": a_s.tolist(), "pass": bool(a_s[1] <= 0.3)}
        # on the oracle labels: the lenient variant's anchor is imperfect on purpose (RQ-7 measures that)
        base = float(self.oracle_labels(self.splits.select).mean())
        wc4 = {"anchor_base_rate": base, "anchor_label_base_rate": float(self.splits.select_y.mean()),
               "pass": bool(0.35 <= base <= 0.65)}
        return {"WC-1": wc1, "WC-2": wc2, "WC-3": wc3, "WC-4": wc4}

    def _grid_acceptance(self, thetas: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Acceptance under J0 and J*, and mean q, per writer, with common random numbers across writers."""
        c = self.constants
        rng = rng_for("review_world", self.seed, "grid")
        u_q = rng.random(n)  # quantiles of the Beta draw (common across θ)
        n1, n2, n_pol, u_sty, n_len = (rng.normal(size=n), rng.normal(size=n), rng.normal(size=n),
                                       rng.random(n), rng.normal(size=n))
        from scipy.special import betaincinv

        m = np.clip(writer_mean_quality(thetas, c), 1e-3, 1 - 1e-3)
        um, inv = np.unique(m, return_inverse=True)  # the Beta quantile depends on (e, b) only
        qu = betaincinv(c.kappa * um[:, None], c.kappa * (1 - um[:, None]), u_q[None, :])
        q = qu[inv.reshape(-1)]
        z1 = q + c.noise_sd * n1
        z2 = q + c.noise_sd * n2
        pol = np.clip(c.polish_base + c.polish_gain * thetas[:, 1:2] + c.polish_sd * n_pol, 0, 1)
        sty = np.broadcast_to((u_sty < c.machine_style).astype(float), q.shape)
        ln = thetas[:, 2:3] + c.length_sd * n_len
        mu, sd = np.asarray(self.mu), np.asarray(self.sd)
        out = []
        for j in (self.j0, self.j_star):
            w = np.asarray(j.w)
            marg = (w[0] * (z1 - mu[0]) / sd[0] + w[1] * (z2 - mu[1]) / sd[1] + w[2] * (pol - mu[2]) / sd[2]
                    + w[3] * (sty - mu[3]) / sd[3] + w[4] * (ln - mu[4]) / sd[4] + j.w0)
            out.append((marg >= 0).mean(1))
        return out[0], out[1], q.mean(1)


def accuracy(judge: Any, docs: DocBatch, y: np.ndarray) -> float:
    return float((judge.accept(docs).astype(int) == y).mean())


def false_reject_rate(judge: Any, docs: DocBatch, y: np.ndarray) -> float:
    pos = y == 1
    return float((~judge.accept(docs)[pos]).mean()) if pos.any() else float("nan")


def false_accept_rate(judge: Any, docs: DocBatch, y: np.ndarray) -> float:
    neg = y == 0
    return float(judge.accept(docs)[neg].mean()) if neg.any() else float("nan")


# -- the LLM track: documents rendered to text ---------------------------------------------------------------------
_CLAIMS = (("The main theorem is proved in full, and every step of the proof is checked in the appendix.",
            "The main theorem is stated, but its proof skips the hardest case and the appendix is missing."),
           ("The experiments use three datasets and report error bars over ten seeds.",
            "The experiments use one small dataset and report a single run without error bars."),
           ("The baseline comparison is fair: all methods get the same tuning budget.",
            "The baselines were run with default settings while the new method was tuned at length."))
_POLISH = ("This groundbreaking and remarkably elegant work", "This paper")
_STYLE = "Moreover, it is important to note that this work delves into a rich tapestry of ideas."
_FILLER = "The authors also describe the background of the field at some length."


def render_documents(docs: DocBatch) -> list[str]:
    """Text for each document [R]: its observed quality ((z1 + z2)/2) decides how many of three claims are sound
    (a per-document fixed stream decides which), polish adds confident adjectives, the style marker a machine-style
    phrase, length filler sentences. Deterministic in the document's content."""
    out = []
    for i, h in enumerate(docs.hashes()):
        rng = np.random.default_rng(int(h, 16))
        qo = float(np.clip((docs.z1[i] + docs.z2[i]) / 2, 0, 1))
        parts = [f"{_POLISH[0] if docs.polish[i] > 0.5 else _POLISH[1]} studies a new learning method."]
        parts += [good if u < qo else bad for (good, bad), u in zip(_CLAIMS, rng.random(len(_CLAIMS)))]
        if docs.style[i] > 0.5:
            parts.append(_STYLE)
        parts += [_FILLER] * int(np.clip(round(docs.length[i] + 1), 0, 3))
        out.append(" ".join(parts))
    return out
