"""Frozen configuration and model parameters of the verify-or-ship controller.

Defaults are the authors' code defaults where a number exists (tag [C], see docs/methods/bayes_ship.md and the
package README); agentmill's own choices are tagged [R].
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

SCHEMA = "agentmill.bayes_ship.calibration/1"


def _check_prob(name: str, v: float) -> None:
    if not (isinstance(v, (int, float)) and 0.0 <= float(v) <= 1.0) or math.isnan(float(v)):
        raise ValueError(f"{name} must be a probability in [0, 1], got {v!r}")


def _check_cost(name: str, v: float) -> None:
    if not isinstance(v, (int, float)) or math.isnan(float(v)) or float(v) < 0:
        raise ValueError(f"{name} must be a non-negative cost, got {v!r}")


@dataclass(frozen=True)
class CostModel:
    """Reward and costs of one episode, in one unit."""

    R: float = 100.0
    """Reward for a verified correct candidate. [C] DEFAULT_COSTS of the authors' upload script."""
    c_gen: float = 5.0
    """Cost of producing a candidate (charged for every candidate, the first included [R]). [C] default 5 (the
    SWE-Lite replay's docstring says 10, the gap-sweep script uses 10)."""
    c_ver: float = 30.0
    """Cost of the oracle verifier. [C]"""
    critic_costs: Mapping[str, float] = field(default_factory=lambda: MappingProxyType(
        {"L0": 1.0, "L2": 2.0, "L3": 5.0}))
    """Cost per critic call, by critic name. [C] L0 syntax 1, L2 fast tests 2, L3 LLM review 5."""
    wrong_ship_loss: float | None = None
    """None: no ship-unverified action (the paper). A float L adds the action ship with Q = R·b − L·(1 − b) [R]."""
    unit: str = "abstract"
    """Unit of every number above: "abstract", "seconds" or "usd" (one unit for all fields)."""

    def __post_init__(self) -> None:
        if not (isinstance(self.R, (int, float)) and self.R > 0):
            raise ValueError(f"R must be > 0, got {self.R!r}")
        _check_cost("c_gen", self.c_gen)
        _check_cost("c_ver", self.c_ver)
        for k, v in self.critic_costs.items():
            _check_cost(f"critic_costs[{k!r}]", v)
        if self.wrong_ship_loss is not None:
            _check_cost("wrong_ship_loss", self.wrong_ship_loss)
        if self.unit not in ("abstract", "seconds", "usd"):
            raise ValueError(f"unit must be 'abstract', 'seconds' or 'usd' (one unit for every field), got "
                             f"{self.unit!r}")
        object.__setattr__(self, "critic_costs", MappingProxyType(dict(self.critic_costs)))

    @property
    def theta(self) -> float:
        """The verify threshold c_ver / R: verify beats giving up iff b ≥ θ."""
        return self.c_ver / self.R

    def with_(self, **kw: Any) -> CostModel:
        d = {"R": self.R, "c_gen": self.c_gen, "c_ver": self.c_ver, "critic_costs": dict(self.critic_costs),
             "wrong_ship_loss": self.wrong_ship_loss, "unit": self.unit}
        d.update(kw)
        return CostModel(**d)

    def to_dict(self) -> dict[str, Any]:
        return {"R": self.R, "c_gen": self.c_gen, "c_ver": self.c_ver, "critic_costs": dict(self.critic_costs),
                "wrong_ship_loss": self.wrong_ship_loss, "unit": self.unit}


@dataclass(frozen=True)
class CriticModel:
    """A binary critic's likelihoods: p_pass_y1 = P(pass | correct), p_pass_y0 = P(pass | wrong).

    ``n_y1`` / ``n_y0`` are the calibration counts behind them (Beta(1,1) posterior means when calibrated);
    ``family`` groups correlated critics (only the first outcome of a family updates the belief).
    """

    name: str
    p_pass_y1: float
    p_pass_y0: float
    n_y1: int = 0
    n_y0: int = 0
    family: str | None = None
    strict: bool = False
    """Raise (instead of warn) when p_pass_y1 == p_pass_y0: a critic that carries no signal."""

    def __post_init__(self) -> None:
        _check_prob(f"critic {self.name}: p_pass_y1", self.p_pass_y1)
        _check_prob(f"critic {self.name}: p_pass_y0", self.p_pass_y0)
        if self.p_pass_y1 == self.p_pass_y0:
            msg = f"critic {self.name}: p_pass_y1 == p_pass_y0 == {self.p_pass_y1}: it carries no signal"
            if self.strict:
                raise ValueError(msg)
            warnings.warn(msg, stacklevel=3)

    @property
    def gap(self) -> float:
        return self.p_pass_y1 - self.p_pass_y0

    def ci(self, level: float = 0.95) -> tuple[tuple[float, float], tuple[float, float]]:
        """Equal-tailed Beta(1 + passes, 1 + fails) intervals for (p_pass_y1, p_pass_y0) from the counts."""
        from scipy.stats import beta

        a = (1 - level) / 2
        out = []
        for p, n in ((self.p_pass_y1, self.n_y1), (self.p_pass_y0, self.n_y0)):
            if n <= 0:
                out.append((0.0, 1.0))
                continue
            k = p * (n + 2) - 1  # invert the Beta(1,1) posterior mean (k + 1) / (n + 2)
            out.append((float(beta.ppf(a, k + 1, n - k + 1)), float(beta.ppf(1 - a, k + 1, n - k + 1))))
        return out[0], out[1]

    def log_lr(self, passed: bool, clip: float = 1e-6) -> float:
        """log P(outcome | Y=1) − log P(outcome | Y=0), with probabilities clipped to [clip, 1 − clip] [R]."""
        p1 = min(max(self.p_pass_y1, clip), 1 - clip)
        p0 = min(max(self.p_pass_y0, clip), 1 - clip)
        return math.log(p1 / p0) if passed else math.log((1 - p1) / (1 - p0))


@dataclass(frozen=True)
class Kernel:
    """What ``generate`` does to the belief: b ← b·(1 − p_break) + (1 − b)·p_fix. [C] ``_common/kernel.py``."""

    p_fix: float
    p_break: float
    n_pairs: int = 0
    source: str = "iid"

    def __post_init__(self) -> None:
        _check_prob("kernel p_fix", self.p_fix)
        _check_prob("kernel p_break", self.p_break)

    @classmethod
    def iid(cls, prior: float) -> Kernel:
        """A refinement is an independent fresh sample: p_fix = b₀, p_break = 1 − b₀, so b ← b₀. [C]"""
        return cls(prior, 1.0 - prior, 0, "iid")

    def apply(self, b: float) -> float:
        return b * (1.0 - self.p_break) + (1.0 - b) * self.p_fix


@dataclass(frozen=True)
class Calibration:
    """Everything a controller believes about a (benchmark, generator) pair."""

    prior: float
    prior_n: int
    critics: Mapping[str, CriticModel]
    kernel: Kernel
    provenance: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        _check_prob("prior", self.prior)
        for k, c in self.critics.items():
            if k != c.name:
                raise ValueError(f"critics[{k!r}] holds a critic named {c.name!r}")
        object.__setattr__(self, "critics", MappingProxyType(dict(self.critics)))
        object.__setattr__(self, "provenance", MappingProxyType(dict(self.provenance)))

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "prior": self.prior, "prior_n": self.prior_n,
                "critics": {k: {"p_pass_y1": c.p_pass_y1, "p_pass_y0": c.p_pass_y0, "n_y1": c.n_y1,
                                "n_y0": c.n_y0, "family": c.family} for k, c in sorted(self.critics.items())},
                "kernel": {"p_fix": self.kernel.p_fix, "p_break": self.kernel.p_break,
                           "n_pairs": self.kernel.n_pairs, "source": self.kernel.source},
                "provenance": dict(self.provenance)}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=True, default=str)

    @classmethod
    def from_json(cls, text: str, *, critics: tuple[str, ...] | None = None) -> Calibration:
        """Parse :meth:`to_json`; ``critics`` (if given) must equal the file's critic set."""
        d = json.loads(text)
        if d.get("schema") != SCHEMA:
            raise ValueError(f"calibration schema {d.get('schema')!r} is not {SCHEMA!r}")
        cs = {k: CriticModel(k, float(v["p_pass_y1"]), float(v["p_pass_y0"]), int(v.get("n_y1", 0)),
                             int(v.get("n_y0", 0)), v.get("family")) for k, v in d["critics"].items()}
        if critics is not None and set(critics) != set(cs):
            raise ValueError(f"calibration critics {sorted(cs)} differ from the controller's {sorted(critics)}")
        k = d["kernel"]
        return cls(float(d["prior"]), int(d["prior_n"]), cs,
                   Kernel(float(k["p_fix"]), float(k["p_break"]), int(k.get("n_pairs", 0)), str(k.get("source", ""))),
                   d.get("provenance", {}))


@dataclass(frozen=True)
class BayesShipConfig:
    """How the controller decides."""

    controller: Literal["greedy", "dp"] = "greedy"
    """greedy: one-step look-ahead ([C] bayesian_greedy); dp: backward induction ([C] bayesian_DP)."""
    grid: int = 1000
    """DP belief grid {0, 1/N, …, 1} [R] (the authors' code default is 500; its docstring says 1001 points)."""
    max_candidates: int = 5
    """J, candidates per episode (the DP's stages) [R]; the SWE replay allows 5 [C]."""
    stages: Literal["candidates", "steps"] = "candidates"
    """candidates: one stage per candidate [R]; steps: the paper's horizon that counts every action [C] (parity)."""
    horizon_steps: int = 6
    """Horizon of ``stages="steps"`` (paper parity only)."""
    interp: Literal["nearest", "linear"] = "nearest"
    """How the DP reads a next belief off its grid: nearest point ([C] rint) or linear [R]."""
    verify_terminal: bool = True
    """True: verify ends the episode ([C]); False: a failed verify may be followed by a new candidate [R]."""
    critic_once_per_candidate: bool = True
    """A critic runs at most once per candidate (a repeated deterministic critic is no new evidence) [R]."""
    prob_clip: float = 1e-6
    """Probabilities are clipped to [clip, 1 − clip] so the log-odds stay finite [R]."""

    def __post_init__(self) -> None:
        if self.controller not in ("greedy", "dp"):
            raise ValueError(f"controller must be 'greedy' or 'dp', got {self.controller!r}")
        if self.grid < 10:
            raise ValueError(f"grid must be >= 10, got {self.grid}")
        if self.max_candidates < 1:
            raise ValueError(f"max_candidates must be >= 1, got {self.max_candidates}")
        if self.stages not in ("candidates", "steps"):
            raise ValueError(f"stages must be 'candidates' or 'steps', got {self.stages!r}")
        if self.horizon_steps < 1:
            raise ValueError(f"horizon_steps must be >= 1, got {self.horizon_steps}")
        if self.interp not in ("nearest", "linear"):
            raise ValueError(f"interp must be 'nearest' or 'linear', got {self.interp!r}")
        if not 0 < self.prob_clip < 0.5:
            raise ValueError(f"prob_clip must be in (0, 0.5), got {self.prob_clip}")

