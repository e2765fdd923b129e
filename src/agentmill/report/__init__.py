"""What a run's results look like to a reader: the HTML report (an overview row per paper, a page per paper with
each experiment's claims beside its plots), the committed result summaries under ``results/`` and the verdict
tables rendered from them (README block, ``docs/verdicts.md``)."""

from agentmill.report.render import render_report

__all__ = ["render_report"]
