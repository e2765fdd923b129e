"""LLM-free roles [R] (budgets in docs/papers.md E176): SearchAdvocate, RuleArbiter, ProgramSpaceReviser, LossCritic.

These make the whole loop run offline. The programmatic advocates are symmetric discriminators, not partisans;
the programmatic reviser searches a typed grammar that *contains* every ground-truth family, so recovery with it
measures the loop's design and scoring machinery given an adequate hypothesis space, not creativity [R].
"""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np

from agentmill.methods.autocog import library as L
from agentmill.methods.autocog.agents.base import Critique, PoolView, Proposal, Revision, Verdict
from agentmill.methods.autocog.design import random_design
from agentmill.methods.autocog.gate import welch_gate
from agentmill.methods.autocog.metrics import predicted_estimate, templates_for
from agentmill.methods.autocog.scoring import aggregate_loss, normalized_distances
from agentmill.methods.autocog.theory import Interval


class SearchAdvocate:
    """Draw ``n_designs`` random valid designs, simulate both slot theories with common random numbers, evaluate
    every template, return the (design, metric) with the smallest gate p (ties -> lower index)."""

    def __init__(self, *, n_designs: int = 200, n_sim: int = 50, n_real: int = 25, alpha: float = 0.01,
                 rating_max: int = 1, n_features: int = 4) -> None:
        self.n_designs, self.n_sim, self.n_real, self.alpha = n_designs, n_sim, n_real, alpha
        self.rating_max, self.n_features = rating_max, n_features

    def propose(self, own, opponent, pool: PoolView, rng: np.random.Generator) -> Proposal:
        from agentmill.methods.autocog.simulate import simulate

        best, cands = None, []
        tmpl = templates_for(own, opponent, cardinal=self.rating_max > 1)
        for i in range(self.n_designs):
            d = random_design(rng, n_features=self.n_features, rating_max=self.rating_max,
                              exclude_pairs=pool.exclude_pairs)
            crn = (int(rng.integers(2**62)),)
            da, db = simulate(own, d, self.n_sim, crn), simulate(opponent, d, self.n_sim, crn)
            for j, m in enumerate(tmpl):
                g = welch_gate(m(da), m(db), n_real=self.n_real, alpha=self.alpha)
                cands.append((g.p, i, j, d, m, g))
        cands.sort(key=lambda c: (c[0], c[1], c[2]))
        p, i, j, d, m, g = cands[0]
        top = [{"design_idx": c[1], "metric": c[4].description, "p": c[0], "t": c[5].t} for c in cands[:10]]
        return Proposal(d, m, rationale=f"min gate p over {self.n_designs} random designs × {len(tmpl)} templates",
                        extra={"top10": top})


class RuleArbiter:
    """Target = the slot theory with the larger mean normalised distance over all observations (tie -> the older);
    ``new_theory`` if the target has n >= 0.5 on at least half of the last two rounds' observations."""

    def judge(self, slot1, slot2, pool: PoolView) -> Verdict:
        ids = pool.slots
        obs = [o for o in pool.observations if o["real"] is not None]
        dist = {t: [] for t in ids}
        for o in obs:
            n = normalized_distances(o["real"], {t: o["preds"].get(t) for t in ids})
            for t in ids:
                dist[t].append(n[t])
        mean = {t: (sum(v) / len(v) if v else 0.0) for t, v in dist.items()}
        order = list(pool.theories)
        target = max(ids, key=lambda t: (mean[t], -order.index(t)))
        slot = ids.index(target) + 1
        last_rounds = sorted({o["round"] for o in obs})[-2:]
        recent = [dist[target][k] for k, o in enumerate(obs) if o["round"] in last_rounds]
        kind = "new_theory" if recent and sum(x >= 0.5 for x in recent) >= len(recent) / 2 else "new_model"
        return Verdict(kind, slot, interpretation=f"mean normalised distance {mean}",
                       recommendation=f"{kind} for slot {slot}")


# Library rule -> grammar family (up to a rescaling of β), for new_model variants of a library seed.
LIBRARY_FAMILY = {"ttb": ("identity", "validity", "lexicographic"), "tallying": ("identity", "equal", "tally"),
                  "ew": ("identity", "equal", "additive"), "wadd": ("identity", "validity", "additive"),
                  "logodds_wadd": ("identity", "logodds", "additive"), "dial": ("identity", "dial", "additive"),
                  "rank_decay": ("identity", "rank", "additive"),
                  "dr_wadd": ("power_shift", "validity", "additive"),
                  "satisficing_wadd": ("threshold", "validity", "additive"),
                  "mixture_ttb_wadd": ("identity", "validity", "mixture")}

# Range variants [R]: full range or one of two halves; log-scale split for γ and k [R: γ split at 1 = the
# geometric midpoint of [0.1, 10], since γ's range starts at 0].
SPLITS = {"gamma": 1.0, "k": 0.5, "alpha": 0.55, "s": 2.55, "t": 0.5, "lam": 0.5, "p": 0.5}
BETA_VARIANTS = (None, (0.1, 3.0), (3.0, 20.0))
EPS_VARIANTS = (None, (0.0, 0.1), (0.1, 0.5))


def range_variants(family: tuple[str, str, str]) -> list:
    """The family's grammar points with every range variant, in grammar order. Built once per family and shared:
    the theories are frozen, and rebuilding (and re-hashing) them every revision cost more than scoring some."""
    return list(_range_variants(tuple(family)))


@functools.cache
def _range_variants(family: tuple[str, str, str]) -> tuple:
    t, w, c = family
    base = L.program(t, w, c)
    mech = [k for k, s in base.params.specs.items() if k not in ("beta", "eps") and isinstance(s, Interval)]
    opts = []
    for k in mech:
        s = base.params.specs[k]
        opts.append([(k, None), (k, (s.lo, SPLITS[k])), (k, (SPLITS[k], s.hi))])
    out = []
    for combo in itertools.product(*opts, [("beta", b) for b in BETA_VARIANTS], [("eps", e) for e in EPS_VARIANTS]):
        ranges = {k: r for k, r in combo if r is not None}
        out.append(L.program(t, w, c, ranges))
    return tuple(out)


class ProgramSpaceReviser:
    """Search the typed grammar: candidates scored by aggregate loss on all observations (common random numbers),
    the top 5 re-scored with ``rescore_n`` fresh subjects, lowest loss wins (ties -> fewer free parameters ->
    grammar order). The replacement always happens; ``improved_over_target`` is logged."""

    def __init__(self, *, n_sim: int = 50, max_candidates: int = 600, rescore_n: int = 200, rescore_top: int = 5,
                 exclude_families: tuple = ()) -> None:
        self.n_sim, self.max_candidates, self.rescore_n, self.rescore_top = n_sim, max_candidates, rescore_n, rescore_top
        self.exclude_families = {tuple(f) for f in exclude_families}

    def _family(self, theory) -> tuple[str, str, str] | None:
        sp = theory.spec
        if sp.get("factory") == "program":
            return (sp["transform"], sp["weighting"], sp["comparison"])
        return LIBRARY_FAMILY.get(sp.get("factory"))

    def candidates(self, verdict: Verdict, target, other, pool: PoolView, rng) -> list:
        cardinal = any(o["design"].rating_max > 1 for o in pool.observations)
        fam = self._family(target)
        if verdict.kind == "new_model" and fam is not None and fam not in self.exclude_families:
            fams = [fam]
        else:
            fams = [f for f in L.families(cardinal) if f not in self.exclude_families]
        registered = {t.content_id for t in pool.theories.values()} | {other.content_id}
        by_fam = [[c for c in range_variants(f) if c.content_id not in registered] for f in fams]
        cands = [c for grp in by_fam for c in grp]
        if len(cands) > self.max_candidates:  # stratified random subsample by family
            per = max(1, self.max_candidates // len(by_fam))
            picked = []
            for grp in by_fam:
                idx = sorted(rng.choice(len(grp), min(per, len(grp)), replace=False)) if grp else []
                picked += [grp[i] for i in idx]
            cands = picked[: self.max_candidates]
        return cands

    def _loss(self, theory, pool: PoolView, n: int, key: str) -> tuple[float, list]:
        preds = []
        for o in pool.observations:
            est = predicted_estimate(theory, o["design"], o["metric"], n, (o["seed"], key))
            preds.append(est.value)
        return aggregate_loss(preds, pool.scoring_rows()), preds

    def revise(self, verdict: Verdict, target, other, pool: PoolView, rng) -> Revision:
        cands = self.candidates(verdict, target, other, pool, rng)
        scored = []
        for k, c in enumerate(cands):
            loss, _ = self._loss(c, pool, self.n_sim, "cand")
            scored.append((loss, c.params.n_free(), k, c))
        scored.sort(key=lambda s: (s[0], s[1], s[2]))
        rescored = []
        for loss0, nf, k, c in scored[: self.rescore_top]:
            loss, _ = self._loss(c, pool, self.rescore_n, "rescore")
            rescored.append((loss, nf, k, c, loss0))
        rescored.sort(key=lambda s: (round(s[0], 12), s[1], s[2]))
        best = rescored[0]
        target_loss, _ = self._loss(target, pool, self.rescore_n, "rescore")
        recs = [{"name": c.name, "content_id": c.content_id, "loss": loss, "n_free": nf}
                for loss, nf, k, c in scored]
        return Revision(best[3], best[0], best[0] < target_loss,
                        candidates=recs + [{"rescored": [{"name": r[3].name, "loss": r[0], "loss_nsim": r[4]}
                                                         for r in rescored], "target_loss": target_loss}])


class LossCritic:
    """The programmatic critic of the LLM reviser's inner loop (the LLM critic's fallback) [R: no source has a
    programmatic critic]. ``continue`` iff the candidate was accepted (strictly below the best loss so far) and
    its aggregate loss is strictly below the replaced theory's (same observations, same simulation budget);
    otherwise ``regenerate``, naming the observations the candidate fits worst."""

    def __init__(self, *, n_worst: int = 2) -> None:
        self.n_worst = n_worst

    def critique(self, verdict: Verdict, target, candidate, pool: PoolView, attempt: dict,
                 history: list[dict]) -> Critique:
        loss, tl = attempt["loss"], attempt.get("target_loss", math.inf)
        if attempt.get("accepted") and loss < tl:
            return Critique("continue", f"loss {loss:.3f} beats the replaced theory's {tl:.3f}")
        errs = [(e, o["obs_id"]) for e, o in zip(attempt.get("obs_errors", []), pool.observations) if e is not None]
        worst = ", ".join(f"{oid} (|error| {e:.3f})"
                          for e, oid in sorted(errs, key=lambda x: (-x[0], x[1]))[: self.n_worst])
        why = ("not better than the best so far" if not attempt.get("accepted")
               else f"not better than the replaced theory ({tl:.3f})")
        return Critique("regenerate", f"loss {loss:.3f} is {why}; worst-fit observations: {worst or 'none'}")
