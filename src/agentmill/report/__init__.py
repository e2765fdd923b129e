"""The HTML report: one row per claim (paper's number, ours ± CI, verdict, scale note, model, commit) and plots."""

from agentmill.report.render import render_report

__all__ = ["render_report"]
