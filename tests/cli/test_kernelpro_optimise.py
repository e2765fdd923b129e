"""``agentmill kernelpro optimise --exhaustive`` says plainly whether the returned best is within 5 % of the
exhaustive optimum, with both speeds: a scripted search over a hand-made table, then one real smoke run."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from agentmill.cli.main import main
from agentmill.methods.kernelpro import core, library, roofline, search, tables


def _table(speeds: list[float]) -> tables.MeasuredTable:
    rows = {tables.key(p): {"params": dict(p), "status": "correct", "speedup": s, "kb_allclose": True,
                            "recommended": []}
            for p, s in zip(library.enumerate_space("sum", "smoke"), speeds)}
    return tables.MeasuredTable("sum", "smoke", rows, {"s_cap": 2.0})


def _fake(monkeypatch: pytest.MonkeyPatch, returned: int, speeds: list[float]) -> None:
    pts = library.enumerate_space("sum", "smoke")
    best = dict(pts[returned])

    def optimize(task, **kw):
        res = search.SearchResult("mcts", pts[returned], 1.7, False, [1.0, 1.7], [], [])
        return core.OptimizeResult(task, res, {"cls": "memory", "confidence": "high", "headroom": 1.0},
                                   [{"params": best, "search_speedup": 1.7, "speedup": 1.65, "ok": True}],
                                   [{"status": "correct", "speedup": 1.7, "params": best, "findings": []}])

    monkeypatch.setattr(core, "optimize", optimize)
    monkeypatch.setattr(roofline, "calibrate", lambda **kw: SimpleNamespace(fingerprint={"cpu": "fake"}))
    monkeypatch.setattr(tables, "build", lambda *a, **kw: _table(speeds))


def test_report_says_within_with_both_speeds(monkeypatch, capsys) -> None:
    _fake(monkeypatch, 2, [1.0, 2.0, 1.92, 1.5])
    assert main(["kernelpro", "optimise", "sum", "--space", "smoke", "--budget", "2", "--exhaustive"]) == 0
    out = capsys.readouterr().out
    assert "exhaustive optimum (4 candidates of the smoke space" in out and "2.00× vs numpy" in out
    assert "1.92× in the same table = 96.0% of the optimum's speed -> WITHIN 5 % of the exhaustive optimum" in out


def test_report_says_not_within(monkeypatch, capsys) -> None:
    _fake(monkeypatch, 3, [1.0, 2.0, 1.92, 1.5])
    assert main(["kernelpro", "optimise", "sum", "--space", "smoke", "--budget", "2", "--exhaustive"]) == 0
    out = capsys.readouterr().out
    assert "1.50× in the same table = 75.0% of the optimum's speed -> NOT within 5 %" in out


def test_without_a_table_it_says_so(monkeypatch, capsys) -> None:
    _fake(monkeypatch, 0, [1.0, 2.0, 1.92, 1.5])
    monkeypatch.setattr(core, "cached_table", lambda *a, **kw: None)
    assert main(["kernelpro", "optimise", "sum", "--space", "smoke", "--budget", "2"]) == 0
    assert "pass --exhaustive" in capsys.readouterr().out


@pytest.mark.slow  # ~7 s: three candidates compiled, walled and timed live, the re-measurement, plots
def test_real_optimise_reports_against_the_optimum(capsys, tmp_path) -> None:
    out_dir = tmp_path / "kp"
    assert main(["kernelpro", "optimise", "sum", "--space", "smoke", "--budget", "3", "--exhaustive",
                 "--out", str(out_dir)]) == 0
    out = capsys.readouterr().out
    assert "of the exhaustive optimum" in out and ("-> WITHIN" in out or "-> NOT within" in out)
    ex = json.loads((out_dir / "report.json").read_text())["exhaustive"]
    assert ex["in_table"] and ex["within"] == (ex["table_speedup"] >= 0.95 * ex["optimum_speedup"])
