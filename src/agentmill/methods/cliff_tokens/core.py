"""Cliff tokens, top to bottom: sample a trace → scan its potential → detect cliffs → type them → (replicate |
intervene | build pairs). ``study_trace`` runs the detection half on one trace of any policy; ``oracle_study`` runs
it over many traces of the planted chained-addition oracle and keeps the planted truth beside each result."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from agentmill.methods.cliff_tokens.planted import ChainAddOracle, grade_text, prompt_ids, sample_problem
from agentmill.methods.cliff_tokens.potential import PotentialConfig, PotentialEstimator
from agentmill.methods.cliff_tokens.taxonomy import classify
from agentmill.methods.cliff_tokens.ztest import CliffTest, detect, expected_false_cliffs


@dataclass(frozen=True)
class CliffConfig:
    """One detection run."""

    potential: PotentialConfig = PotentialConfig()
    """How potentials are estimated."""
    test: CliffTest = CliffTest()
    """The cliff test."""


def chainadd_verifier(ops: Sequence[int]):
    """Grades token ids of a chained-addition trace (+ continuation) against the sum of ``ops``."""
    def verify(ids: Sequence[int]) -> bool:
        return bool(grade_text(bytes(int(i) for i in ids if int(i) < 256).decode("ascii", errors="replace"), ops))
    return verify


def study_trace(lm: Any, est: PotentialEstimator, prompt: Sequence[int], trace: Sequence[int], test: CliffTest,
                seed_key: Sequence[int]) -> dict[str, Any]:
    """Scan, detect and type one trace; types under the rollout policy with full entropy and the paper's top-20
    partial entropy of the raw distribution."""
    pt = est.scan(prompt, trace, seed_key=seed_key)
    cliffs = detect(pt.k, pt.n, pt.trace_ids, test)
    pos = [c.pos for c in cliffs]
    full = classify(lm, prompt, trace, pos, entropy="full", dist="policy", temperature=est.cfg.temperature)
    top20 = classify(lm, prompt, trace, pos, entropy="top20", dist="raw")
    return {"scan": pt, "cliffs": cliffs, "types": [t.kind for t in full], "types_top20": [t.kind for t in top20],
            "type_info": full, "expected_false": expected_false_cliffs(pt.k, pt.n, test)}


def oracle_study(n_traces: int, cfg: CliffConfig = CliffConfig(), *, seed: int = 0,
                 oracle: ChainAddOracle | None = None, progress=None) -> list[dict[str, Any]]:
    """``n_traces`` traces of the planted oracle, each scanned, its cliffs detected and typed, with the planted
    sites and the exact potential at every position."""
    oracle = oracle or ChainAddOracle()
    rng = np.random.default_rng([seed, 172])
    out = []
    for i in range(n_traces):
        ops = sample_problem(rng)
        leaf = oracle.sample_trace(ops, rng)
        q, tr = prompt_ids(ops), leaf.ids.tolist()
        est = PotentialEstimator(oracle, chainadd_verifier(ops), cfg.potential)
        res = study_trace(oracle, est, q, tr, cfg.test, seed_key=(seed, i))
        exact = np.asarray([oracle.exact_potential(ops, tr[:t]) for t in range(len(tr) + 1)])
        out.append({"i": i, "ops": ops, "prompt": q, "trace": tr, "correct": leaf.correct, "sites": leaf.sites,
                    "exact_v": exact, **res})
        if progress is not None and i % 100 == 0:
            progress(i, n_traces)
    return out
