"""Render ``report/index.html`` from run records.

The page is static and self-contained (inline CSS, PNG plots beside it, record JSON copied next to it), so it can
be opened from disk, attached to an issue, or served by any web server.
"""

from __future__ import annotations

import datetime as _dt
import html
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

from agentmill.core.records import RunRecord, write_text_atomic
from agentmill.experiments.protocol import Experiment

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem;color:#1d1d1f;max-width:1400px}
h1{margin-bottom:.2rem} .sub{color:#666;margin-top:0}
table{border-collapse:collapse;width:100%;margin:1rem 0 2rem;font-size:.9rem}
th,td{border-bottom:1px solid #ddd;padding:.45rem .5rem;text-align:left;vertical-align:top}
th{background:#f5f5f7;position:sticky;top:0}
td.num{font-variant-numeric:tabular-nums;white-space:nowrap}
.v{font-weight:600;padding:.1rem .45rem;border-radius:.3rem;white-space:nowrap}
.supported{background:#d8f5df;color:#17663a} .not_supported{background:#fde2e1;color:#a1251b}
.inconclusive{background:#fff3cd;color:#7a5b00} .not_judged{background:#eee;color:#555}
.error{background:#fde2e1;color:#a1251b} .scale{color:#555;font-size:.82rem}
tr.exp td{background:#eef3fb;border-top:2px solid #b8c7e0}
figure{display:inline-block;margin:.5rem 1rem .5rem 0} figure img{max-width:560px;border:1px solid #eee}
figcaption{font-size:.8rem;color:#555} pre{white-space:pre-wrap;background:#f8f8f8;padding:.5rem}
.summary span{margin-right:1rem}
"""


def _e(s: object) -> str:
    return html.escape("" if s is None else str(s))


LM_PREFIXES = ("hf:", "tiny:", "openai:", "scripted:", "serve:")
"""Spec prefixes of the lm layer (and ``serve:``, a model behind the loopback server)."""


def model_label(rec: RunRecord) -> str:
    """The model column: the run's ``--model`` when the experiment takes one; else the LM specs its setup names
    (an organism's base, a summariser, a policy), with the fields that name them; else ``none``."""
    if rec.model:
        return rec.model
    named: dict[str, list[str]] = {}
    for key, value in rec.setup.items():
        if isinstance(value, str) and value.startswith(LM_PREFIXES):
            named.setdefault(value, []).append(key)
    return "; ".join(f"{spec} ({', '.join(keys)})" for spec, keys in named.items()) or "none"


def missing_reason(rec: RunRecord) -> str:
    """What a claim without a metric shows: the run's withheld-precondition or plan-only note, else ``missing``."""
    pre = rec.data.get("precondition")
    if isinstance(pre, str) and pre.startswith("precondition not met"):
        return "precondition not met"
    if rec.data.get("plan_only"):
        return "not measured (plan only)"
    return "missing"


def render_report(records: Sequence[RunRecord], experiments: Mapping[str, Experiment], out_dir: str | Path, *,
                  title: str = "agentmill reproduction report") -> Path:
    """Write ``out_dir/index.html`` (+ ``plots/``, ``records/``) and return its path.

    ``records`` are the newest record per experiment; an experiment with no record is listed as not run.
    """
    out = Path(out_dir)
    (out / "plots").mkdir(parents=True, exist_ok=True)
    (out / "records").mkdir(parents=True, exist_ok=True)
    by_id = {r.experiment_id: r for r in records}
    rows, figures, counts = [], [], {"supported": 0, "not_supported": 0, "inconclusive": 0, "not_judged": 0,
                                     "error": 0}
    for exp_id, exp in experiments.items():
        rec = by_id.get(exp_id)
        if rec is None:
            rows.append(f"<tr class=exp><td colspan=8><b>{_e(exp_id)}</b> — {_e(exp.title)} <em>(not run)</em>"
                        f"</td></tr>")
            continue
        rec_name = f"{exp_id}.{rec.profile}.json"
        rec.write(out / "records" / rec_name)
        rows.append(
            f"<tr class=exp><td colspan=8><b>{_e(exp_id)}</b> — {_e(exp.title)}<br><span class=scale>"
            f"<b>scale:</b> {_e(exp.scale_note)} · <b>paper:</b> {_e(exp.paper)} · profile {_e(rec.profile)} · "
            f"{rec.wall_seconds:.1f} s · <a href='records/{_e(rec_name)}'>record</a></span></td></tr>")
        meta = f"<td>{_e(model_label(rec))}</td><td><code>{_e(rec.git_commit or '?')}</code></td>"
        if rec.status != "ok":
            counts["error"] += 1
            rows.append(f"<tr><td>{_e(exp_id)}</td><td colspan=5><span class='v error'>error</span> "
                        f"{_e(rec.error)}</td>{meta}</tr>")
            continue
        for claim in exp.claims:
            est = rec.metrics.get(claim.metric)
            verdict = rec.verdicts.get(claim.id, "inconclusive")
            counts[verdict] = counts.get(verdict, 0) + 1
            ours = est.fmt() if est is not None else missing_reason(rec)
            how = f"{est.method}, n={est.n}" if est is not None else ""
            rows.append(
                f"<tr><td><b>{_e(claim.id)}</b></td><td>{_e(claim.statement)}"
                f"<br><small>source: {_e(claim.source)}</small></td><td>{_e(claim.paper_value)}</td>"
                f"<td><code>{_e(claim.metric)}</code> {_e(claim.threshold_text)}</td>"
                f"<td class=num title='{_e(how)}'>{_e(ours)}<br><small>{_e(how)}</small></td>"
                f"<td><span class='v {_e(verdict)}'>{_e(verdict)}</span></td>{meta}</tr>")
        if exp.plots is not None and rec.data:
            pdir = out / "plots" / exp_id
            if pdir.exists():
                shutil.rmtree(pdir)
            pdir.mkdir(parents=True)
            try:
                paths = exp.plots(rec.data, pdir)
            except Exception as e:  # noqa: BLE001 - a broken plot must not take the report down
                figures.append(f"<p><span class='v error'>plot error</span> {_e(exp_id)}: {_e(e)}</p>")
                paths = []
            for p in paths:
                rel = Path(p).resolve().relative_to(out.resolve()).as_posix()
                figures.append(f"<figure><img src='{_e(rel)}' alt='{_e(exp_id)}: {_e(Path(p).stem)}'>"
                               f"<figcaption>{_e(exp_id)} — {_e(Path(p).stem.replace('_', ' '))}</figcaption>"
                               f"</figure>")
    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    profiles = sorted({r.profile for r in records})
    summary = "".join(f"<span><span class='v {_e(k)}'>{_e(k)}</span> {v}</span>" for k, v in counts.items() if v)
    doc = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>
<meta name="viewport" content="width=device-width, initial-scale=1"><link rel="icon" href="data:,">
<style>{_CSS}</style></head>
<body><h1>{_e(title)}</h1>
<p class=sub>Generated {now}; profile(s): {_e(', '.join(profiles) or 'none')}. Verdicts: <i>supported</i> only when
the whole 95% CI is on the pre-registered side of the threshold; the smoke profile is never judged.</p>
<p class=summary>{summary}</p>
<table><thead><tr><th>claim</th><th>claim (paraphrased)</th><th>paper</th><th>pre-registered test</th>
<th>ours (95% CI)</th><th>verdict</th><th>model</th><th>commit</th></tr></thead>
<tbody>
{chr(10).join(rows)}
</tbody></table>
<h2>Plots</h2>
{chr(10).join(figures) or '<p>No plots.</p>'}
</body></html>
"""
    return write_text_atomic(out / "index.html", doc)
