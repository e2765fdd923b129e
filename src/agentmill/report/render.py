"""Render the HTML report: ``report/index.html`` (one row per paper) and ``report/<paper>.html`` (its experiments).

The first screen answers "which papers hold up here?": per paper its headline claim, our verdict counts (supported,
not supported, inconclusive and not judged each in its own column, failed experiments apart), a key figure and the
model(s). Each paper's page then shows every experiment's claims beside their own plots, with this run's verdict
(and, for a claim not judged or inconclusive, why) next to the committed full profile's verdict from
``results/full/`` (``report.results``), so a quick run is always read against the published reproduction.

The pages are static and self-contained (inline CSS, PNG plots and record JSON beside them), so they open from disk,
attach to an issue, or serve from any web server, and they fit a 1,280-px laptop screen: fixed-layout tables whose
long words wrap, images scaled to their column.
"""

from __future__ import annotations

import datetime as _dt
import html
import multiprocessing as mp
import os
import shutil
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agentmill.core.records import RunRecord, write_text_atomic
from agentmill.experiments.protocol import Claim, Experiment
from agentmill.report.markdown import NOT_JUDGED, RULES
from agentmill.report.papers import Paper, group_by_paper, is_composition
from agentmill.report.results import (LM_PREFIXES, claim_entry, claim_result, claim_rule, counts, fmt_value,
                                      load_summaries, missing_reason, model_label, rule_counts)

__all__ = ["render_report", "model_label", "missing_reason", "LM_PREFIXES"]

_CSS = """
*{box-sizing:border-box}
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0 auto;padding:1rem 1.5rem;
color:#1d1d1f;max-width:1400px;line-height:1.4}
h1{margin:.3rem 0 .2rem;font-size:1.6rem} h2{font-size:1.15rem;margin:0 0 .3rem} .sub{color:#555;margin-top:0}
a{color:#0b57d0}
table{border-collapse:collapse;width:100%;table-layout:fixed;margin:.5rem 0 1rem;font-size:.88rem}
th,td{border-bottom:1px solid #ddd;padding:.4rem .45rem;text-align:left;vertical-align:top;overflow-wrap:anywhere}
th{background:#f5f5f7}
code{font-size:.85em;overflow-wrap:anywhere}
.v{display:inline-block;font-weight:600;padding:.05rem .4rem;border-radius:.3rem;margin:.1rem 0;font-size:.82rem}
.supported{background:#d8f5df;color:#17663a} .not_supported{background:#fde2e1;color:#a1251b}
.inconclusive{background:#fff3cd;color:#7a5b00} .not_judged{background:#e8e8ea;color:#444}
.error{background:#fde2e1;color:#a1251b} .not_run{background:#f0f0f0;color:#666}
.small,.how,.src,.rule,.meta{color:#555;font-size:.8rem} .why{font-size:.8rem;color:#333;margin-top:.15rem}
.num{font-variant-numeric:tabular-nums}
.counts{list-style:none;margin:0;padding:0} .counts li{margin:.1rem 0}
.counts.inline{margin:.6rem 0} .counts.inline li{display:inline-block;margin:0 1.1rem .3rem 0}
.rules{background:#f8f9fb;border:1px solid #e3e6ec;border-radius:.4rem;padding:.5rem .9rem;font-size:.88rem}
.rules ul{margin:.3rem 0;padding-left:1.2rem}
.thumb{width:100%;max-width:260px;max-height:200px;object-fit:contain;object-position:left top;border:1px solid #eee}
section.exp{border-top:2px solid #b8c7e0;padding-top:.6rem;margin-top:1.4rem}
.exp-body{display:grid;gap:1rem;grid-template-columns:minmax(0,1fr)}
@media (min-width:1100px){.exp-body.has-plots{grid-template-columns:minmax(0,1fr) minmax(0,340px)}}
figure{margin:0 0 .8rem} figure img{width:100%;height:auto;border:1px solid #eee}
figcaption{font-size:.78rem;color:#555}
pre{white-space:pre-wrap;overflow-wrap:anywhere;background:#f8f8f8;padding:.5rem;font-size:.8rem}
nav{font-size:.9rem}
"""

_LABELS = {"supported": "supported", "not_supported": "not supported", "inconclusive": "inconclusive",
           "not_judged": "not judged"}


def _e(s: object) -> str:
    return html.escape("" if s is None else str(s))


def _badge(verdict: str, text: str | None = None) -> str:
    return f"<span class='v {_e(verdict)}'>{_e(text or _LABELS.get(verdict, verdict))}</span>"


def _page(title: str, body: str) -> str:
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>
<meta name="viewport" content="width=device-width, initial-scale=1"><link rel="icon" href="data:,">
<style>{_CSS}</style></head>
<body>
{body}
</body></html>
"""


def _rules_box(n_rules: Mapping[str, int], scope: str) -> str:
    """The judging rules with how many claims (``scope``: "" or " of this paper") each judges."""
    def n(key: str) -> str:
        k = n_rules.get(key, 0)
        return f"{k} claim{'s' * (k != 1)}{scope}"

    items = "".join(f"<li><b>{_e(name)}</b> ({n(key)}): {_e(text)}.</li>" for key, (name, text) in RULES.items())
    return (f"<div class=rules><b>How a claim is judged</b> (threshold and direction pre-registered in code before "
            f"any run; never rounded up):<ul>{items}<li><b>not judged</b>: {_e(NOT_JUDGED)}.</li></ul></div>")


class _Tally:
    """Verdict counts of one paper (or the whole run): claims per verdict, failed and missing experiments."""

    def __init__(self) -> None:
        self.claims: list[dict[str, Any]] = []
        self.errors: list[str] = []
        self.not_run: list[str] = []

    def add(self, other: _Tally) -> None:
        self.claims += other.claims
        self.errors += other.errors
        self.not_run += other.not_run

    def html(self, inline: bool = False) -> str:
        c = counts(self.claims)
        items = [f"<li>{_badge(k)} {c[k]}</li>" for k in c]
        if self.errors:
            items.append(f"<li>{_badge('error', 'error')} {len(self.errors)} experiment"
                         f"{'s' * (len(self.errors) != 1)}</li>")
        if self.not_run:
            items.append(f"<li>{_badge('not_run', 'not run')} {len(self.not_run)} experiment"
                         f"{'s' * (len(self.not_run) != 1)}</li>")
        return f"<ul class='counts{' inline' * inline}'>{''.join(items)}</ul>"


def _result_html(entry: Mapping[str, Any], detail: bool = True) -> str:
    """This run's result for one claim: verdict, value [CI], how it was estimated, and why when it is neither
    supported nor not supported (a not-judged claim shows the value it observed)."""
    verdict = entry["verdict"]
    how = ", ".join(x for x in (entry.get("method") or "", f"n={entry['n']}" if entry.get("n") else "",
                                f"{entry['dropped']} dropped" if entry.get("dropped") else "") if x)
    value = fmt_value(entry) if entry.get("value") is not None else None
    out = _badge(verdict)
    if verdict == "not_judged":
        if value is not None:
            out += f"<div><span class=small>observed</span> <span class=num>{_e(value)}</span></div>"
    elif value is not None:
        out += f" <span class=num>{_e(value)}</span>"
    if value is not None and how and detail:
        out += f"<div class=how>{_e(how)}</div>"
    if entry.get("reason"):
        out += f"<div class=why>{_e(entry['reason'])}</div>"
    return out


def _rule_text(claim: Claim) -> str:
    """The claim's rule by name; an exact claim adds why it needs no interval (``Claim.exact_why``)."""
    rule = claim_rule(claim)
    why = getattr(claim, "exact_why", "") if rule == "exact" else ""
    return _e(RULES.get(rule, (rule,))[0]) + (f": {_e(why)}" if why else "")


def _full_html(claim: Claim, full: Mapping[str, Any] | None) -> str:
    if full is None:
        return "<span class=small>no committed full record</span>"
    if full.get("status") != "ok":
        return f"{_badge('error', 'error')}<div class=why>{_e(full.get('error'))}</div>"
    entry = claim_entry(full, claim.id)
    if entry is None:
        return "<span class=small>not in the committed full record</span>"
    return _result_html(entry, detail=False)


def _full_label(full: Mapping[str, Any] | None) -> str:
    if full is None:
        return "no committed full record"
    return (f"committed full record: commit <code>{_e(full.get('git_commit') or '?')}</code>, "
            f"{_e(str(full.get('date') or '?')[:10])}, model {_e(full.get('model') or 'none')}")


def _plots(exp: Experiment, rec: RunRecord, out: Path) -> tuple[list[str], list[str]]:
    """Render ``exp``'s plots from ``rec.data`` into ``plots/<id>/``: (relative paths, error notes)."""
    if exp.plots is None or not rec.data or rec.status != "ok":
        return [], []
    pdir = out / "plots" / exp.id
    if pdir.exists():
        shutil.rmtree(pdir)
    pdir.mkdir(parents=True)
    try:
        paths = exp.plots(rec.data, pdir)
    except Exception as e:  # noqa: BLE001 - a broken plot must not take the report down
        return [], [f"plot error: {e}"]
    return [Path(p).resolve().relative_to(out.resolve()).as_posix() for p in paths], []


_FORKED: list[tuple[list[tuple[Experiment, RunRecord]], Path]] = []
"""What a forked plot worker reads (the pairs, the report dir): forked, so experiments a caller built in memory
(tests, notebooks) need be neither importable nor picklable."""


def _forked_plots(i: int) -> tuple[list[str], list[str]]:
    work, out = _FORKED[0]
    exp, rec = work[i]
    return _plots(exp, rec, out)


def _render_plots(work: list[tuple[Experiment, RunRecord]], out: Path,
                  jobs: int | None) -> dict[str, tuple[list[str], list[str]]]:
    """Every experiment's plots (paths relative to ``out``, error notes), drawn by ``jobs`` forked processes
    (default: the CPU count).

    Matplotlib drew the main job's ~60 figures one after another in ~45 s, the only serial work after the
    experiments; two processes halve that. Each experiment's figures are written by one process into its own
    ``plots/<id>/``, so the pages do not depend on ``jobs``. With one job, no ``fork`` or a pool that broke, they
    are drawn here."""
    jobs = min(jobs or os.cpu_count() or 1, len(work))
    if jobs > 1 and "fork" in mp.get_all_start_methods():
        _FORKED[:] = [(work, out)]
        try:
            with ProcessPoolExecutor(max_workers=jobs, mp_context=mp.get_context("fork")) as pool:
                return {exp.id: res for (exp, _), res in zip(work, pool.map(_forked_plots, range(len(work))))}
        except BrokenProcessPool:
            pass  # a worker died (out of memory, a crashed backend): draw them here instead
        finally:
            _FORKED.clear()
    return {exp.id: _plots(exp, rec, out) for exp, rec in work}


def _experiment_section(exp: Experiment, rec: RunRecord | None, full: Mapping[str, Any] | None, out: Path,
                        tally: _Tally, plots: tuple[list[str], list[str]] = ([], [])) -> tuple[str, str | None]:
    """One experiment's section of its paper page, and its first plot (the paper's key-figure candidate)."""
    head = f"<h2 id='{_e(exp.id)}'>{_e(exp.id)} — {_e(exp.title)}</h2>"
    scale = f"<b>scale:</b> {_e(exp.scale_note)}"
    figs: list[str] = []
    notes: list[str] = []
    if rec is None:
        tally.not_run.append(exp.id)
        meta = f"<div class=meta>{_badge('not_run', 'not run')} {scale}</div>"
    else:
        rec_name = f"{exp.id}.{rec.profile}.json"
        rec.write(out / "records" / rec_name)
        meta = (f"<div class=meta>{scale} · profile {_e(rec.profile)} · {rec.wall_seconds:.1f} s · model "
                f"{_e(model_label(rec))} · commit <code>{_e(rec.git_commit or '?')}</code> · "
                f"<a href='records/{_e(rec_name)}'>record</a></div>")
        figs, notes = list(plots[0]), list(plots[1])
    meta += f"<div class=meta>{_full_label(full)}</div>"
    if rec is not None and rec.status != "ok":
        tally.errors.append(exp.id)
        this = {c.id: f"{_badge('error', 'error')}" for c in exp.claims}
        notes.insert(0, f"error: {rec.error}")
    elif rec is None:
        this = {c.id: "<span class=small>not run</span>" for c in exp.claims}
    else:
        this = {}
        for c in exp.claims:
            entry = claim_result(rec, c)
            tally.claims.append(entry)
            this[c.id] = _result_html(entry)
    profile = f" ({rec.profile})" if rec is not None else ""
    rows = "".join(
        f"<tr><td><b>{_e(c.id)}</b> {_e(c.statement)}<div class=src>paper: {_e(c.paper_value)} · source: "
        f"{_e(c.source)}</div></td><td><code>{_e(c.metric)}</code> {_e(c.threshold_text)}"
        f"<div class=rule>{_rule_text(c)}</div></td>"
        f"<td>{this[c.id]}</td><td>{_full_html(c, full)}</td></tr>" for c in exp.claims)
    table = (f"<table class=claims><colgroup><col style='width:37%'><col style='width:17%'><col style='width:24%'>"
             f"<col style='width:22%'></colgroup><thead><tr><th>claim (paraphrased)</th><th>pre-registered test</th>"
             f"<th>this run{_e(profile)}</th><th>committed full</th></tr></thead><tbody>{rows}</tbody></table>")
    note_html = "".join(f"<pre>{_e(n)}</pre>" for n in notes)
    fig_html = "".join(f"<figure><a href='{_e(p)}'><img src='{_e(p)}' alt='{_e(exp.id)}: {_e(Path(p).stem)}'></a>"
                       f"<figcaption>{_e(Path(p).stem.replace('_', ' '))}</figcaption></figure>" for p in figs)
    body = (f"<div class='exp-body{' has-plots' if figs else ''}'><div>{note_html}{table}</div>"
            + (f"<div class=plots>{fig_html}</div>" if figs else "") + "</div>")
    return f"<section class=exp>{head}{meta}{body}</section>", (figs[0] if figs else None)


def _models(paper: Paper, by_id: Mapping[str, RunRecord]) -> list[str]:
    seen: list[str] = []
    for exp in paper.experiments:
        rec = by_id.get(exp.id)
        if rec is not None and (label := model_label(rec)) != "none" and label not in seen:
            seen.append(label)
    return seen


def render_report(records: Sequence[RunRecord], experiments: Mapping[str, Experiment], out_dir: str | Path, *,
                  title: str = "agentmill reproduction report", results_dir: str | Path | None = None,
                  jobs: int | None = None) -> Path:
    """Write ``out_dir/index.html``, one ``out_dir/<paper>.html`` per paper (+ ``plots/``, ``records/``); return the
    index's path.

    ``records`` are the newest record per experiment; an experiment with no record is shown as not run.
    ``results_dir`` holds the committed result summaries (``results/``): each claim shows the verdict of
    ``results_dir/full`` beside this run's (``None``: no committed full records). ``jobs`` processes draw the
    plots (default: the CPU count).
    """
    out = Path(out_dir)
    (out / "plots").mkdir(parents=True, exist_ok=True)
    (out / "records").mkdir(parents=True, exist_ok=True)
    by_id = {r.experiment_id: r for r in records}
    full = load_summaries(results_dir, "full") if results_dir is not None else {}
    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    profiles = ", ".join(sorted({r.profile for r in records})) or "none"
    total, rows, comp_rows = _Tally(), [], []
    papers = group_by_paper(experiments)
    plots = _render_plots([(exp, by_id[exp.id]) for paper in papers for exp in paper.experiments
                           if exp.id in by_id], out, jobs)
    for paper in papers:
        tally, sections, key_figure = _Tally(), [], None
        for exp in paper.experiments:
            section, fig = _experiment_section(exp, by_id.get(exp.id), full.get(exp.id), out, tally,
                                               plots.get(exp.id, ([], [])))
            sections.append(section)
            key_figure = key_figure or fig
        total.add(tally)
        page = f"{paper.slug}.html"
        n_claims = sum(len(e.claims) for e in paper.experiments)
        body = (f"<nav><a href='index.html'>← all papers</a></nav><h1>{_e(paper.label)} — {_e(paper.citation)}</h1>"
                f"<p class=sub>{_e(paper.headline)}</p><p class=sub>Generated {now}; profile(s): {_e(profiles)}; "
                f"{len(paper.experiments)} experiments, {n_claims} claims.</p>{tally.html(inline=True)}"
                f"{_rules_box(rule_counts(paper.experiments), ' of this paper')}{''.join(sections)}")
        write_text_atomic(out / page, _page(f"{paper.label}: {paper.citation} — {title}", body))
        thumb = (f"<a href='{_e(page)}'><img class=thumb src='{_e(key_figure)}' alt='{_e(paper.label)} key figure: "
                 f"{_e(Path(key_figure).stem)}'></a>" if key_figure else "<span class=small>no plot</span>")
        models = _models(paper, by_id)
        (comp_rows if is_composition(paper) else rows).append(
            f"<tr><td><a href='{_e(page)}'><b>{_e(paper.label)}</b> — {_e(paper.citation)}</a>"
            f"<div>{_e(paper.headline)}</div><div class=meta>{len(paper.experiments)} experiments · {n_claims} "
            f"claims</div></td><td>{tally.html()}</td><td>{thumb}</td>"
            f"<td>{_e('; '.join(models) or 'none (no language model)')}</td></tr>")
    def overview(first: str, body_rows: list[str]) -> str:
        return (f"<table class=overview><colgroup><col style='width:46%'><col style='width:18%'>"
                f"<col style='width:20%'><col style='width:16%'></colgroup><thead><tr><th>{first}</th><th>our "
                f"verdicts (claims)</th><th>key figure</th><th>model(s)</th></tr></thead>"
                f"<tbody>{''.join(body_rows)}</tbody></table>")

    compositions = (f"<h2 id=compositions>Compositions</h2><p class=sub>Methods of several papers run together through "
                    f"their public faces, each with its own pre-registered claims (docs/methods/compositions.md)."
                    f"</p>{overview('composition and what it combines', comp_rows)}") if comp_rows else ""
    body = (f"<h1>{_e(title)}</h1><p class=sub>Generated {now}; profile(s): {_e(profiles)}; "
            f"{len(experiments)} experiments of {len(rows)} papers"
            f"{f' and {len(comp_rows)} compositions' if comp_rows else ''}. Each page shows its claims beside their "
            f"plots and the committed full-profile verdicts.</p>{total.html(inline=True)}"
            f"{_rules_box(rule_counts(experiments), '')}{overview('paper and headline claim', rows)}{compositions}")
    return write_text_atomic(out / "index.html", _page(title, body))
