"""Result summaries (``results/<profile>/<id>.json``): what they keep, that they are byte-stable, and that nothing of
the machine a run happened on (absolute paths) reaches a committed file."""

from __future__ import annotations

import json
import re

import pytest

from agentmill.core.records import RunRecord
from agentmill.core.stats import Estimate
from agentmill.experiments.runner import run_suite
from agentmill.report.results import (SummaryError, claim_result, fmt_value, host_cpu, load_summaries, model_label,
                                      save_summaries, scrub, summarize, summary_text)
from tests.helpers.fake_experiments import COIN, CRASH


def _strings(obj):
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield k
            yield from _strings(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _strings(v)


def test_a_summary_keeps_each_claims_value_ci_verdict_and_the_provenance(tmp_path) -> None:
    rec = run_suite([COIN], profile="quick", runs_dir=tmp_path / "runs")[0]
    s = summarize(rec, COIN)
    assert [s[k] for k in ("experiment_id", "profile", "status", "model", "setup_hash", "git_commit", "date")] == \
        ["fake.coin", "quick", "ok", "none", rec.setup_hash, rec.git_commit, rec.started_at]
    from agentmill.core.machine import CPU_FLAGS

    assert s["cpu"]["model"] and set(s["cpu"]["flags"]) <= set(CPU_FLAGS)
    f1, f2 = s["claims"]
    est = rec.metrics["mean"]
    assert (f1["id"], f1["metric"], f1["threshold"], f1["rule"], f1["verdict"], f1["reason"]) == \
        ("F-1", "mean", "∈ [0.3, 0.7]", "ci", rec.verdicts["F-1"], None)
    assert (f1["value"], f1["lo"], f1["hi"], f1["n"], f1["dropped"]) == \
        (pytest.approx(est.value, rel=1e-5), pytest.approx(est.lo, rel=1e-5), pytest.approx(est.hi, rel=1e-5), 200, 0)
    assert f2["rule"] == "exact" and f2["value"] == 200
    assert "flips" not in summary_text(s)  # no raw data


def test_the_same_record_gives_the_same_bytes_and_no_absolute_path(tmp_path) -> None:
    """A failed run's message and a reason naming files (as tracebacks and sandbox notes do) keep only the file
    names; saving twice (also from a record re-read from disk) writes identical files."""
    recs = run_suite([COIN, CRASH], profile="quick", runs_dir=tmp_path / "runs")
    recs[1].error = f"OSError: cannot write {tmp_path}/runs/x.json (see /home/someone/.cache/agentmill/log.txt)"
    recs[0].reasons = {"F-1": f"checkpoint {tmp_path}/work/ck.pt was from another machine"}  # type: ignore
    recs[0].verdicts["F-1"] = "inconclusive"
    first = [p.read_bytes() for p in save_summaries(recs, {"fake.coin": COIN, "fake.crash": CRASH}, tmp_path / "res")]
    reread = [RunRecord.from_dict(json.loads(json.dumps(r.to_dict()))) for r in recs]
    reread[0].reasons = recs[0].reasons  # type: ignore[attr-defined]
    again = [p.read_bytes() for p in save_summaries(reread, {"fake.coin": COIN, "fake.crash": CRASH},
                                                    tmp_path / "res")]
    assert first == again
    texts = [b.decode() for b in first]
    for text in texts:
        assert str(tmp_path) not in text and "/home/" not in text
        assert not [s for s in _strings(json.loads(text)) if re.search(r"(^|\s)/\w+/", s)]
    crash = json.loads(texts[1])
    assert crash["status"] == "error" and crash["claims"] == []
    assert crash["error"] == "OSError: cannot write …/x.json (see …/log.txt)"
    assert json.loads(texts[0])["claims"][0]["reason"] == "checkpoint …/ck.pt was from another machine"


@pytest.mark.parametrize("text,want", [
    ("a/b and 1/e and PUT/s", "a/b and 1/e and PUT/s"),
    ("openai:m@http://127.0.0.1:8/v1 failed", "openai:m@http://127.0.0.1:8/v1 failed"),
    ("read /tmp/x/y.json\nthen", "read …/y.json then"),
    ("dir /work/main/runs/", "dir …/"),
])
def test_scrub_cuts_absolute_paths_only(text, want) -> None:
    assert scrub(text) == want


def test_a_claim_the_profile_does_not_judge_shows_its_observed_value_and_reason() -> None:
    rec = RunRecord("fake.coin", "quick", {"n": 3}, metrics={"mean_observed": Estimate(0.5, 0.4, 0.6, n=30,
                                                                                        method="bootstrap")},
                    verdicts={"F-1": "not_judged", "F-2": "inconclusive"})
    rec.reasons = {"F-1": "quick runs the untrained tiny model"}  # type: ignore[attr-defined]
    f1, f2 = (claim_result(rec, c) for c in COIN.claims)
    assert (f1["verdict"], f1["value"], f1["observed_only"], f1["reason"]) == \
        ("not_judged", 0.5, True, "quick runs the untrained tiny model")
    assert fmt_value(f1) == "0.5 [0.4, 0.6]"
    assert (f2["verdict"], f2["value"], f2["reason"]) == ("inconclusive", None, "missing")


def test_reasons_fall_back_to_what_an_older_record_shows() -> None:
    """A record written before ``RunRecord.reasons`` still says why: the smoke profile, a withheld precondition, an
    interval across the threshold, a claim newer than the run; dropped replicates come from ``method``."""
    smoke = RunRecord("fake.coin", "smoke", {}, metrics={"mean": Estimate(0.5, 0.2, 0.8, n=4)},
                      verdicts={"F-1": "not_judged", "F-2": "not_judged"})
    assert claim_result(smoke, COIN.claims[0])["reason"] == "smoke profile: never judged"
    pre = RunRecord("fake.coin", "full", {}, data={"precondition": "precondition not met: gate G1"},
                    verdicts={"F-1": "inconclusive"})
    assert [claim_result(pre, c)["reason"] for c in COIN.claims] == \
        ["precondition not met", "the record has no verdict for this claim (the claim is newer than the run)"]
    assert claim_result(pre, COIN.claims[1])["verdict"] == "not_judged"
    wide = RunRecord("fake.coin", "quick", {}, metrics={"mean": Estimate(0.3, 0.1, 0.5, n=9,
                                                                         method="bootstrap(dropped=3)")},
                     verdicts={"F-1": "inconclusive"})
    row = claim_result(wide, COIN.claims[0])
    assert row["reason"] == "the 95% CI reaches both sides of the threshold" and row["dropped"] == 3


def test_model_label_reads_bare_embedded_names_in_model_fields() -> None:
    """E179's setups and e173.progress_perf name their target ``model="smollm2"`` (the engine and HFPair take the
    bare name): that is hf:smollm2, not "none"; the same word in another field, or a test double, is not a model."""
    assert model_label(RunRecord("x", "quick", {"model": "smollm2", "threads": 2})) == "hf:smollm2 (model)"
    assert model_label(RunRecord("x", "quick", {"draft_model": "gemma3"})) == "hf:gemma3-270m (draft_model)"
    assert model_label(RunRecord("x", "smoke", {"model": "tiny"})) == "none"
    assert model_label(RunRecord("x", "smoke", {"model": "scripted"})) == "none"
    assert model_label(RunRecord("x", "full", {"counter": "smollm2"})) == "none"


@pytest.mark.parametrize("exp_id", ["e179.calibration", "e179.load_vs_fixed", "e179.markov_gain",
                                    "e179.sampling_equality", "e179.speed_single_user", "e173.progress_perf"])
def test_the_real_setups_that_name_smollm2_bare_are_labelled_with_it(exp_id) -> None:
    import dataclasses

    from agentmill.experiments import get

    setup = dataclasses.asdict(get(exp_id).setups["full"])
    assert model_label(RunRecord(exp_id, "full", setup)).startswith("hf:smollm2")


def test_host_cpu_reads_the_model_name_and_the_flags_that_matter(tmp_path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: Some CPU @ 2GHz\nflags\t\t: fpu sse avx avx2 avx512f avx512_bf16\n"
                    "processor\t: 1\nmodel name\t: Some CPU @ 2GHz\nflags\t\t: fpu\n")
    assert host_cpu(info) == {"model": "Some CPU @ 2GHz", "flags": ["avx2", "avx512f", "avx512_bf16"]}
    assert host_cpu(tmp_path / "absent")["flags"] == []


def test_load_summaries_reads_a_profile_and_names_a_bad_file(tmp_path) -> None:
    assert load_summaries(tmp_path, "full") == {}
    rec = run_suite([COIN], profile="quick", runs_dir=tmp_path / "runs")[0]
    save_summaries([rec], {"fake.coin": COIN}, tmp_path / "res")
    (tmp_path / "res" / "quick" / "README.md").write_text("not a summary, not read")
    assert list(load_summaries(tmp_path / "res", "quick")) == ["fake.coin"]
    bad = tmp_path / "res" / "quick" / "fake.crash.json"
    bad.write_text('{"experiment_id": "fake.coin", "profile": "quick", "claims": []}')
    with pytest.raises(SummaryError, match="fake.crash.json: names experiment 'fake.coin'"):
        load_summaries(tmp_path / "res", "quick")
    bad.write_text("{")
    with pytest.raises(SummaryError, match="fake.crash.json: not a JSON result summary"):
        load_summaries(tmp_path / "res", "quick")


def test_variant_of_names_the_model_that_differs_from_the_registered_one() -> None:
    """``--model`` on a model experiment, or ``--set base=...`` where a setup names its model, makes a variant named
    after the new spec; the registered model (including the runner's default ``hf:smollm2``) is no variant."""
    from dataclasses import dataclass
    from types import SimpleNamespace

    from agentmill.experiments.protocol import Experiment
    from agentmill.report.results import variant_of

    @dataclass(frozen=True)
    class S:
        base: str = "hf:smollm2"
        n: int = 3

    setups = {"smoke": S(), "quick": S(), "full": S()}
    organism = Experiment(id="fake.org", title="t", paper="none", claims=(), setups=setups,
                          measure=lambda s, c: {}, scale_note="-")
    by_model = Experiment(id="fake.lm", title="t", paper="none", claims=(), setups=setups,
                          measure=lambda s, c: {}, scale_note="-", uses_model=True)
    def rec(model=None, **kw):
        return SimpleNamespace(model=model, profile="full", setup={"base": "hf:smollm2", "n": 3, **kw})

    assert variant_of(rec(), organism) is None
    assert variant_of(rec(n=9), organism) is None  # a --set that leaves the model alone is no model variant
    assert variant_of(rec(base="hf:qwen-coder-0.5b"), organism) == "qwen-coder-0.5b"
    assert variant_of(rec(base="openai:qwen-coder-0.5b@http://127.0.0.1:8011/v1"), organism) == "qwen-coder-0.5b"
    assert variant_of(rec("hf:smollm2"), by_model) is None
    assert variant_of(rec("hf:qwen-coder-0.5b"), by_model) == "qwen-coder-0.5b"
    assert variant_of(rec("tiny:organism/seed 3"), by_model) == "organism-seed-3"
