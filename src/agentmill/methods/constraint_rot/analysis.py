"""Tables over ConstraintRot result rows and reports, for people to read: the crossing matrix V[s][a] with its η²
decomposition (``cross``), the organism's gate table and paired-decision lines (``organism validate``), and the decay
figures a report withholds for an unmet precondition (``report``). The statistics themselves are in
:mod:`.crossing`, :mod:`.metrics` and :mod:`agentmill.core.stats`; the commands are in docs/methods/constraint_rot.md
("Experiments and commands")."""

from __future__ import annotations

from typing import Any


def crossing_matrix(rows: list[dict[str, Any]], summarisers: list[str], actors: list[str], *, B: int,
                    seed: int) -> dict[str, Any]:
    """V[s][a] (Wilson 95 %), lenient survival per summariser and η²_S, η²_A over the cell means with cluster-
    bootstrap CIs — the crossing decomposition (``methods/constraint_rot/crossing``) on CLI labels."""
    from agentmill.core.stats import proportion_estimate
    from agentmill.methods.constraint_rot.crossing import cell_means, decomposition, eta
    from agentmill.methods.constraint_rot.metrics import split_summary_failed
    from agentmill.methods.constraint_rot.stats import WILSON_Z
    from agentmill.methods.constraint_rot.survival import SURVIVED

    # a row whose summary failed saw the uncompacted context: counted per cell, left out of V, survival and η²
    labelled = [{**r, "compactor": r["summariser"], "actor": r["actor_spec"]} for r in rows]
    cells, failed = split_summary_failed(labelled)
    V = []
    for s in summarisers:
        for a in actors:
            here = [r for r in cells if r["compactor"] == s and r["actor"] == a]
            k = sum(bool(r["violation"]) for r in here)
            # None: every summary of the cell failed
            w = proportion_estimate(k, len(here), z=WILSON_Z) if here else None
            V.append({"summariser": s, "actor": a, "n": len(here), "violations": k, **_vlh(w), "errors":
            sum(bool(r.get("error")) for r in here),
                      "summary_failed": sum(r["compactor"] == s and r["actor"] == a for r in failed)})
    survival = {}
    for s in summarisers:  # identical contexts across actors: one label per episode (the first actor's rows)
        here = [r for r in cells if r["compactor"] == s and r["actor"] == actors[0]]
        k = sum(r.get("survival_label") in SURVIVED for r in here)
        w = proportion_estimate(k, len(here), z=WILSON_Z) if here else None
        survival[s] = dict(zip(("survival", "lo", "hi"), _vlh(w).values()))
    complete = [s for s in summarisers if all(c["n"] for c in V if c["summariser"] == s)]
    point = (eta(cell_means(cells, complete, actors)) if len(complete) >= 2
             else dict.fromkeys(("eta2_S", "eta2_A", "margin", "ratio"), float("nan")))
    out: dict[str, Any] = {"V": V, "survival": survival, "summary_failed": len(failed),
                           "eta_summarisers": complete,
                           **{k: (None if v != v else v) for k, v in point.items()}}
    if point["eta2_S"] == point["eta2_S"]:  # NaN when every cell is equal: nothing to decompose
        est = decomposition(cells, complete, actors, B=B, seed=seed)
        out["ci"] = {k: [e.lo, e.hi] for k, e in est.items()}
    return out


def _vlh(w: Any) -> dict[str, float | None]:
    """An Estimate's value, lo, hi (all None when there is none: every summary of the cell failed)."""
    return {"v": None, "lo": None, "hi": None} if w is None else {"v": w.value, "lo": w.lo, "hi": w.hi}


def _cell(c: dict[str, Any]) -> str:
    if c["v"] is None:
        return "n/a (summary failed)"
    return f"{c['v']:.2f} [{c['lo']:.2f},{c['hi']:.2f}]"


def _fmt(x: float | None) -> str:
    return "n/a" if x is None or x != x else f"{x:.3f}"


def matrix_lines(m: dict[str, Any], summarisers: list[str], actors: list[str]) -> list[str]:
    """The V[s][a] table (rows = summarisers, with lenient survival) and the η² line, for stdout."""
    v = {(c["summariser"], c["actor"]): c for c in m["V"]}
    w = max(12, *(len(s) for s in summarisers))
    lines = ["V[s][a] violation rate (Wilson 95% CI); rows = summarisers, columns = actors",
             f"{'':<{w}}  {'survival':>8}  " + "  ".join(f"{a:>24}" for a in actors)]
    for s in summarisers:
        cells = "  ".join(f"{_cell(v[s, a]):>24}" for a in actors)
        surv = m["survival"][s]["survival"]
        lines.append(f"{s:<{w}}  {'n/a' if surv is None else f'{surv:.2f}':>8}  {cells}")
    ci = m.get("ci", {})
    lines.append(f"eta2_S = {_fmt(m['eta2_S'])} {ci.get('eta2_s', '')}  eta2_A = {_fmt(m['eta2_A'])} "
                 f"{ci.get('eta2_a', '')}  (margin eta2_S - 3 eta2_A = {_fmt(m['margin'])})")
    failed = {(c["summariser"], c["actor"]): c.get("summary_failed", 0) for c in m["V"]}
    if any(failed.values()):
        lines.append("failed LLM summaries (left out of V, survival and eta2): " + ", ".join(
            f"{s} x {a}: {k}" for (s, a), k in failed.items() if k))
    return lines


def gate_table(report: Any) -> list[str]:
    """The G1–G6 table of a :class:`ValidationReport`: k/n, rate, Wilson 95 % CI, pre-registered threshold, pass."""
    ops = {"le": "<=", "ge": ">=", "lt": "<", "gt": ">"}
    lines = [f"{'gate':<17} {'k/n':>9} {'rate':>7} {'Wilson 95% CI':>17} {'threshold':>10}  pass  metric"]
    for g in report.gates:
        lo, hi = g.ci
        lines.append(f"{g.id:<17} {f'{g.k}/{g.n}':>9} {g.value:>7.1%} {f'[{lo:.1%}, {hi:.1%}]':>17} "
                     f"{ops.get(g.direction, g.direction) + f' {g.threshold:.0%}':>10}  "
                     f"{'PASS' if g.passed else 'FAIL':<4}  {g.metric}")
    return lines


def paired_line(label: str, p: Any) -> str:
    """One line of a :class:`~agentmill.methods.constraint_rot.organism.validate.Paired`."""
    return (f"{label}: obeys only with the rule {p.obeys_only_with_rule}, violates only with it "
            f"{p.violates_only_with_rule} (of {p.n_pairs} pairs; exact sign test p = {p.p_value:.3g})")


def withheld(table: Any) -> list[str]:
    """Strata whose decay figure is withheld because the precondition is not met (exit code 3)."""
    out = [f"D {c.stratum}: {c.precondition.reason}" for c in table.contrasts
           if c.name == "D" and c.precondition is not None and not c.precondition.met]
    out += [f"soft/hard {x.stratum}: {x.precondition.reason}" for x in table.soft_hard if not x.precondition.met]
    return out
