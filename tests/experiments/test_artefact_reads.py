"""Each experiment that reads an artefact declares it (issue 24, part 4): the committed DSpark drafter and corpus
(E179), the human fixture (E176), the organism adapter and every SmolLM2 GGUF a setup names (E164, E165, E173)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from agentmill.core.executor import make_executor
from agentmill.experiments import get
from agentmill.experiments.protocol import RunContext
from agentmill.lm import model_files

DRAFTER_EXPERIMENTS = ("e179.calibration", "e179.sampling_equality", "e179.speed_single_user", "e179.load_vs_fixed")


def _ctx(tmp_path: Path) -> RunContext:
    return RunContext(profile="quick", model="none", executor=make_executor("serial"), work_dir=tmp_path / "work")


@pytest.fixture(scope="module")
def gguf() -> Path:
    return model_files("hf:smollm2")[0]


def test_e179_declares_the_target_and_the_committed_drafter_and_corpus(gguf) -> None:
    from agentmill.methods.dspark.pipeline import asset_dir

    for eid in (*DRAFTER_EXPERIMENTS, "e179.server"):
        exp = get(eid)
        assert exp.reads(exp.setups["quick"], None) == [gguf, asset_dir() / "drafter"], eid
        assert exp.reads(exp.setups["smoke"], None) == [], eid  # the tiny Llama built in code, a random drafter
    exp = get("e179.calibration")
    assert exp.reads(exp.setup_for("quick", {"drafter": "/ck/d1"}), None) == [gguf, Path("/ck/d1")]
    mg = get("e179.markov_gain")
    assert mg.reads(mg.setups["quick"], None) == [gguf, asset_dir() / "corpus-train-480x128.jsonl"]


def test_e179_load_drafter_declares_the_checkpoint_shipped_resolves_to(tmp_path, monkeypatch) -> None:
    from agentmill.experiments.e179_dspark.drafters import load_drafter
    from agentmill.methods.dspark import drafter, pipeline

    trained = tmp_path / "artifacts" / "drafter-r64-s1200"  # no committed copy: the one `dspark train` wrote
    trained.mkdir(parents=True)
    (trained / "config.json").write_text("{}")
    monkeypatch.setattr(pipeline, "shipped_drafter", lambda engine: trained)
    monkeypatch.setattr(drafter.DSparkDrafter, "load", classmethod(lambda cls, path, engine: ("loaded", path)))
    ctx = _ctx(tmp_path)
    assert load_drafter("shipped", object(), "smollm2", ctx) == ("loaded", trained)
    assert list(ctx.artefacts) == [str(trained)]


def test_e176_declares_the_fixture_it_replays(tmp_path) -> None:
    from agentmill.experiments.e176_autocog.fixture import DEFAULT_FIXTURE

    for eid in ("e176.fixture", "e176.strawman"):
        exp = get(eid)
        assert exp.reads(exp.setups["quick"], None) == [DEFAULT_FIXTURE]
        assert exp.reads(exp.setup_for("quick", {"fixture_dir": str(tmp_path)}), None) == [tmp_path]


def test_e164_declares_every_named_model_and_the_adapter_weights(tmp_path, monkeypatch, gguf) -> None:
    from agentmill.experiments.e164_constraint_rot import organism_profiles
    from agentmill.experiments.e164_constraint_rot.office_bench import model_reads
    from agentmill.methods.constraint_rot.organism import cache

    org = get("e164.constraint_rot_organism")
    assert set(org.reads(org.setups["full"], None)) == {gguf}  # base, summariser and token counter: one GGUF
    s = dataclasses.replace(org.setups["smoke"], base="scripted:x", summariser="scripted:y", counter="whitespace")
    assert model_reads(s, None) == []
    fw = get("e164.constraint_rot_frameworks")
    assert fw.reads(fw.setups["quick"], None) == [] and set(fw.reads(fw.setups["full"], None)) == {gguf}
    adapter = tmp_path / "organisms" / "k"
    monkeypatch.setattr(cache, "obtain_organism", lambda *a, **k: (adapter, False, {"key": "k",
                                                                                  "data_manifest_hash": "m",
                                                                                  "n_train": 1}))
    ctx = _ctx(tmp_path)
    assert organism_profiles.obtain_adapter(org.setups["full"], ctx, None, None, lambda: None) == (adapter, False)
    assert set(ctx.artefacts) == {str(adapter / "adapter_model.safetensors"), str(adapter / "adapter_config.json")}


def test_model_setups_of_e165_and_e173_declare_their_gguf(gguf) -> None:
    for eid in ("e165.g2po_llm_advantage_quality", "e165.g2po_lora_smoke", "e173.progress_lm_pair_distilled",
                "e173.progress_lm_pair_rl", "e173.progress_perf"):
        exp = get(eid)
        assert exp.reads(exp.setups["full"], None) == [gguf], eid
    perf = get("e173.progress_perf")
    assert perf.reads(perf.setups["smoke"], None) == []  # canned scorers
