"""``agentmill constraint-rot run --compactor summary:...``, ``cross`` and ``attack optimise``.

Scripted summarisers only (never SmolLM2): ``scripted:echo`` returns its prompt's transcript (the rule survives),
``scripted:constant`` answers "ok" (the rule is gone), ``scripted:fail`` raises (a failed summary). The CLI's
``load_summary_lm`` is wrapped to count loads, so a test can say a model was loaded once per spec, or never on bad
input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agentmill.cli.main import main
from agentmill.methods.constraint_rot import specs as cr_specs
from agentmill.methods.constraint_rot.analysis import crossing_matrix, matrix_lines

CR = ["constraint-rot"]


@pytest.fixture()
def loads(monkeypatch) -> list[str]:  # type: ignore[no-untyped-def]
    seen: list[str] = []
    real = cr_specs.load_summary_lm

    def counting(spec: str) -> Any:
        seen.append(spec)
        return real(spec)

    monkeypatch.setattr(cr_specs, "load_summary_lm", counting)
    monkeypatch.setenv("AGENTMILL_CACHE", "/nonexistent/agentmill-cache")  # tests name --summary-cache
    return seen


def _episodes(tmp_path: Path, capsys, n: int = 3, split: str = "train", *extra: str) -> Path:  # type: ignore
    eps = tmp_path / f"eps-{split}-{n}.jsonl"
    assert main([*CR, "generate", "--split", split, "--n", str(n), "--seed", "1", "--counter", "whitespace",
                 "--locations", "memory_tool,onboarding_turn", "--early-probe", "0", "--out", str(eps),
                 *extra]) == 0
    capsys.readouterr()
    return eps


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()]


# -- run --compactor summary:... ---------------------------------------------------------------------------------------
def test_run_with_llm_summaries_caches_each_summary_once(tmp_path, capsys, loads):  # type: ignore[no-untyped-def]
    eps = _episodes(tmp_path, capsys)
    cache = tmp_path / "summaries"
    argv = [*CR, "run", "--episodes", str(eps), "--actor", "scripted:rule-reader", "--conditions", "compacted",
            "--compactor", "summary:style=goal_extract,lm=scripted:echo,prompt_source=project",
            "--compactor", "summary:style=handoff,lm=scripted:constant", "--compactor", "summary:lm=scripted:fail",
            "--summary-cache", str(cache)]
    assert main([*argv, "--out", str(tmp_path / "a.jsonl")]) == 0
    first = json.loads(capsys.readouterr().out)
    assert sorted(loads) == ["scripted:constant", "scripted:echo", "scripted:fail"]  # once per spec
    by = {(r["compactor"], r["summariser_lm"]): r for r in _rows(tmp_path / "a.jsonl")}
    assert len({r["compactor_hash"] for r in _rows(tmp_path / "a.jsonl")}) == 3 and first["rows"] == 9 and first["errors"] == 0
    echo = [r for r in _rows(tmp_path / "a.jsonl") if r["summariser_lm"] == "scripted:echo"]
    const = [r for r in _rows(tmp_path / "a.jsonl") if r["summariser_lm"] == "scripted:constant"]
    failed = [r for r in _rows(tmp_path / "a.jsonl") if r["summariser_lm"] == "scripted:fail"]
    # the echoed transcript keeps the rule, "ok" loses it: the rule reader obeys / violates accordingly
    assert all(r["violation"] is False and not r["summary_failed"] for r in echo)
    assert all(r["violation"] is True and r["survival_label"] == "dropped" for r in const)
    assert all(r["summary_failed"] is True for r in failed)  # recorded, not mistaken for a compaction
    assert by[("llm_summary:handoff", "scripted:constant")]["prompt_style"] == "handoff"
    # 3 episodes x 2 working summarisers cached (a failure is never cached); a rerun reuses every entry
    assert first["summary_cache"]["writes"] == 6 and first["summary_cache"]["misses"] == 9
    manifest = json.loads((tmp_path / "a.jsonl.manifest.json").read_text())["runs"][0]
    assert manifest["summary_cache"] == str(cache) and manifest["backend"] == "transformers"
    assert manifest["summariser_lms"] == ["scripted:constant", "scripted:echo", "scripted:fail"]
    assert main([*argv, "--out", str(tmp_path / "b.jsonl")]) == 0
    again = json.loads(capsys.readouterr().out)["summary_cache"]
    assert (again["hits"], again["writes"], again["entries"]) == (6, 0, 6)
    assert [r["violation"] for r in _rows(tmp_path / "b.jsonl")] == \
        [r["violation"] for r in _rows(tmp_path / "a.jsonl")]


@pytest.mark.parametrize(("argv", "needle"), [
    (["--compactor", "summary:style=handoff"], "needs lm=SPEC"),
    (["--compactor", "summary:style=poetic,lm=scripted:echo"], "LLMSummary.style must be one of"),
    (["--compactor", "summary:lm=nosuch:model"], "unknown model backend 'nosuch'"),
    (["--compactor", "summary:lm=scripted:echo,ratio=0"], "LLMSummary.ratio"),
    (["--compactor", "summary:lm=scripted:echo,keep_last=0"], "keep_last"),
    (["--compactor", "summary:lm=scripted:echo,temperature=1"], "unknown option(s) ['temperature']"),
    (["--compactor", "summary:lm=scripted:echo", "--backend", "llamacpp"], "only the transformers backend"),
    (["--compactor", "summary:lm=scripted:echo", "--summary-cache", "FILE"], "not a directory"),
    (["--compactor", "summary:lm=scripted:echo", "--conditions", "sometimes"], "unknown condition"),
])
def test_bad_summary_input_exits_2_and_loads_nothing(tmp_path, capsys, loads, argv, needle):  # type: ignore
    eps = _episodes(tmp_path, capsys, n=1)
    (tmp_path / "FILE").write_text("x")
    argv = [str(tmp_path / "FILE") if a == "FILE" else a for a in argv]
    flags = ["--conditions", "compacted"] if "--conditions" not in argv else []
    assert main([*CR, "run", "--episodes", str(eps), "--actor", "scripted:rule-reader", *flags, *argv,
                 "--out", str(tmp_path / "r.jsonl")]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1, err
    assert not loads and not (tmp_path / "r.jsonl").exists() and not (tmp_path / "r.jsonl.manifest.json").exists()
    assert (tmp_path / "FILE").read_text() == "x"


def test_help_says_only_transformers(capsys):  # type: ignore[no-untyped-def]
    with pytest.raises(SystemExit):
        main([*CR, "run", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "only transformers" in out and "--allow-unvalidated" in out and "summary:style=STYLE,lm=SPEC" in out


# -- cross -------------------------------------------------------------------------------------------------------------
def test_cross_writes_rows_and_the_matrix_with_eta(tmp_path, capsys, loads):  # type: ignore[no-untyped-def]
    eps = _episodes(tmp_path, capsys, n=3)
    out = tmp_path / "cross.jsonl"
    summ = ["window:max_messages=200", "summary:style=goal_extract,lm=scripted:constant"]
    actors = ["scripted:rule-reader", "scripted:always-comply"]
    assert main([*CR, "cross", "--summarisers", *summ, "--actors", *actors, "--episodes", str(eps), "--out", str(out),
                 "--summary-cache", str(tmp_path / "sc"), "--B", "20"]) == 0
    printed = capsys.readouterr().out
    rows = _rows(out)
    assert len(rows) == 2 * 2 * 3 and {(r["summariser"], r["actor_spec"]) for r in rows} == \
        {(s, a) for s in summ for a in actors}
    m = json.loads((tmp_path / "cross.jsonl.matrix.json").read_text())
    V = {(c["summariser"], c["actor"]): c["v"] for c in m["V"]}
    # by hand: a 200-message window keeps the rule (rule reader obeys), "ok" drops it; always-comply always violates
    assert V == {(summ[0], actors[0]): 0.0, (summ[1], actors[0]): 1.0, (summ[0], actors[1]): 1.0,
                 (summ[1], actors[1]): 1.0}
    # cell means [[0, 1], [1, 1]]: grand mean 3/4, SS_total 3/4, SS_rows = SS_cols = 2 * 2 * (1/4)^2 = 1/4
    assert m["eta2_S"] == pytest.approx(1 / 3) and m["eta2_A"] == pytest.approx(1 / 3)
    assert m["survival"][summ[0]]["survival"] == 1.0 and m["survival"][summ[1]]["survival"] == 0.0
    assert m["identical_inputs"] == 1.0 and m["summariser_calls"] == 3  # once per episode, not per actor
    assert len(m["ci"]["eta2_s"]) == 2 and loads == ["scripted:constant"]
    assert "eta2_S = 0.333" in printed and "eta2_A = 0.333" in printed and "0.00 [" in printed
    manifest = json.loads((tmp_path / "cross.jsonl.manifest.json").read_text())["runs"][0]
    assert [s["label"] for s in manifest["summarisers"]] == summ and len(manifest["actors"]) == 2
    assert main([*CR, "report", str(out), "--out", str(tmp_path / "r.md"), "--B", "20"]) in (0, 3)  # readable rows


@pytest.mark.parametrize(("argv", "needle"), [
    (["--summarisers", "window", "--actors", "scripted:rule-reader", "scripted:always-comply"], "at least 2"),
    (["--summarisers", "window", "window", "--actors", "scripted:rule-reader", "scripted:always-comply"],
     "'window' given twice"),
    (["--summarisers", "window", "summary:lm=nosuch:x", "--actors", "scripted:rule-reader", "scripted:always-comply"],
     "--summarisers summary:lm=nosuch:x"),
    (["--summarisers", "window", "extractive", "--actors", "scripted:rule-reader", "scripted:oracle"],
     "unknown scripted actor"),
    (["--summarisers", "window", "extractive", "--actors", "scripted:rule-reader", "scripted:always-comply",
      "--B", "0"], "--B"),
])
def test_bad_cross_input_exits_2_and_writes_nothing(tmp_path, capsys, loads, argv, needle):  # type: ignore
    eps = _episodes(tmp_path, capsys, n=1)
    out = tmp_path / "cross.jsonl"
    assert main([*CR, "cross", *argv, "--episodes", str(eps), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1, err
    assert not loads and list(tmp_path.iterdir()) == [eps]


# -- attack optimise ---------------------------------------------------------------------------------------------------
def test_attack_optimise_writes_a_frozen_attack_generate_accepts(tmp_path, capsys, loads):  # type: ignore
    dev = _episodes(tmp_path, capsys, 2, "dev")
    out = tmp_path / "attack.json"
    target = "summary:style=goal_extract,lm=scripted:echo,prompt_source=project"
    assert main([*CR, "attack", "optimise", "--target", target,
                 "--dev", str(dev), "--out", str(out), "--population", "2", "--generations", "1", "--templates",
                 "A2,A5", "--summary-cache", str(tmp_path / "sc")]) == 0
    res = json.loads(capsys.readouterr().out)
    saved = json.loads(out.read_text())
    assert res["template_id"] in ("A2", "A5") and saved["content_hash"] == res["content_hash"]
    assert saved["n_dev"] + res["skipped_episodes"] == 2 and saved["population"] == 2 and saved["generations"] == 1
    assert saved["target"] == "llm_summary:goal_extract" and 0.0 <= res["drop_rate"] <= 1.0
    assert res["clean_drop_rate"] == 0.0  # the echo summariser keeps the rule of a clean context
    assert loads == ["scripted:echo"]
    eps = tmp_path / "attacked.jsonl"
    assert main([*CR, "generate", "--split", "test_iid", "--n", "1", "--counter", "whitespace", "--attack", str(out),
                 "--out", str(eps)]) == 0
    capsys.readouterr()
    assert _rows(eps)[0]["attack"]["kind"] == "optimised"
    assert _rows(eps)[0]["attack"]["template_id"] == res["template_id"]


def test_attack_optimise_bad_input_exits_2(tmp_path, capsys, loads):  # type: ignore[no-untyped-def]
    dev = _episodes(tmp_path, capsys, 1, "dev")
    test = _episodes(tmp_path, capsys, 1, "test_iid")
    attacked = _episodes(tmp_path, capsys, 1, "train", "--attack", "fixed")
    out = tmp_path / "attack.json"
    base = ["--target", "note_following", "--out", str(out)]
    for argv, needle in (([*base, "--dev", str(test)], "must not see test episodes"),
                         ([*base, "--dev", str(attacked)], "already carries an attack"),
                         ([*base, "--dev", str(dev), "--population", "1"], "--population"),
                         ([*base, "--dev", str(dev), "--templates", "A2,F0"], "--templates"),
                         (["--target", "summary:style=x,lm=scripted:echo", "--out", str(out), "--dev", str(dev)],
                          "LLMSummary.style"),
                         ([*base, "--dev", str(dev), "--backend", "llamacpp"], "only the transformers")):
        assert main([*CR, "attack", "optimise", *argv]) == 2, argv
        err = capsys.readouterr().err.strip()
        assert needle in err and len(err.splitlines()) == 1, err
    out.write_text("{}")
    assert main([*CR, "attack", "optimise", *base, "--dev", str(dev)]) == 2
    assert "never overwritten" in capsys.readouterr().err and out.read_text() == "{}"
    assert not loads


def test_crossing_matrix_counts_failed_summaries_and_leaves_them_out_of_v() -> None:
    # summariser s1: 2 measured rows per actor (V = 1/2 for x and y); s2: every summary failed for actor y
    def r(s: str, a: str, ep: str, viol: bool, failed: bool = False) -> dict[str, Any]:
        return {"summariser": s, "actor_spec": a, "actor": a, "compactor": "llm_summary:handoff", "family": "f",
                "episode_id": ep, "violation": viol, "summary_failed": failed, "survival_label": "dropped"}
    rows = [r("s1", a, e, e == "e0") for a in ("x", "y") for e in ("e0", "e1")]
    rows += [r("s1", "x", "e2", False, failed=True)]
    rows += [r("s2", "x", "e0", True), r("s2", "y", "e0", False, failed=True)]
    m = crossing_matrix(rows, ["s1", "s2"], ["x", "y"], B=20, seed=0)
    v = {(c["summariser"], c["actor"]): c for c in m["V"]}
    assert (v["s1", "x"]["n"], v["s1", "x"]["v"], v["s1", "x"]["summary_failed"]) == (2, 0.5, 1)
    assert (v["s2", "y"]["n"], v["s2", "y"]["v"], v["s2", "y"]["summary_failed"]) == (0, None, 1)
    assert m["summary_failed"] == 2 and m["eta_summarisers"] == ["s1"] and m["eta2_S"] is None
    text = "\n".join(matrix_lines(m, ["s1", "s2"], ["x", "y"]))
    assert "n/a (summary failed)" in text and "s1 x x: 1" in text and "s2 x y: 1" in text
