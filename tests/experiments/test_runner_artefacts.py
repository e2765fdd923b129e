"""Resume and work-dir checkpoints are keyed by the content of what a run reads (issue 24, part 4)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import pytest

from agentmill.core.digest import MISSING
from agentmill.core.stats import Estimate
from agentmill.experiments import runner
from agentmill.experiments.protocol import WORK_INPUTS, Claim, Experiment, RunContext, setup_hash
from agentmill.experiments.runner import read_artefacts, run_experiment

MEASURED: list[str] = []
"""One entry per artefact actually read by a measure (a cache hit adds nothing)."""


@dataclass(frozen=True)
class ArtSetup:
    path: str = ""
    interrupt: bool = False


def _measure(s: ArtSetup, ctx: RunContext) -> dict[str, Estimate]:
    """Reads the artefact's size once and keeps it in a work-dir cache, like E179's cached rounds and timings."""
    cache = ctx.work_dir / "size.json"
    if cache.exists():
        size = json.loads(cache.read_text())
    else:
        MEASURED.append(s.path)
        size = len(Path(s.path).read_bytes())
        cache.write_text(json.dumps(size))
    if s.interrupt:
        raise KeyboardInterrupt
    return {"size": Estimate.exact(float(size))}


def _declaring(s: ArtSetup, ctx: RunContext) -> dict[str, Estimate]:
    """Finds its artefact only while measuring (a content-addressed adapter) and declares it."""
    MEASURED.append(s.path)
    ctx.read_artefact(s.path)
    return {"size": Estimate.exact(float(len(Path(s.path).read_bytes())))}


CLAIM = Claim(id="A-1", statement="the artefact is not empty", source="-", paper_value="-", metric="size",
              direction=">=", threshold=1, judge_on="exact", exact_why="a file size")
SIZED = Experiment(id="fake.sized", title="size of an artefact", paper="none", claims=(CLAIM,),
                   setups={p: ArtSetup() for p in ("smoke", "quick", "full")}, measure=_measure, scale_note="-",
                   reads=lambda s, model: [Path(s.path)])


@pytest.fixture(autouse=True)
def _clear() -> None:
    MEASURED.clear()


def _run(exp: Experiment, tmp_path: Path, art: Path, **kw):
    return run_experiment(exp, profile="quick", runs_dir=tmp_path / "runs", overrides={"path": str(art), **kw})


def test_changing_an_artefact_reruns_instead_of_resuming_and_drops_its_cache(tmp_path, capsys) -> None:
    art = tmp_path / "drafter.bin"
    art.write_bytes(b"12345")
    first = _run(SIZED, tmp_path, art)
    again = _run(SIZED, tmp_path, art)
    assert MEASURED == [str(art)] and again.setup_hash == first.setup_hash  # resumed: nothing measured again
    assert first.environment["artefacts"] == {str(art): again.environment["artefacts"][str(art)]}
    art.write_bytes(b"1234567")  # retrained in place
    third = _run(SIZED, tmp_path, art)
    assert third.setup_hash != first.setup_hash and MEASURED == [str(art)] * 2
    assert third.metrics["size"].value == 7  # the cached size of the old bytes was not reused
    moved = list((tmp_path / "runs" / "quick" / "history").glob("fake.sized.work-*"))
    assert len(moved) == 1 and json.loads((moved[0] / "size.json").read_text()) == 5
    assert "changed since they were made" in capsys.readouterr().err


def test_an_interrupted_run_keeps_its_checkpoints_only_while_the_artefact_is_unchanged(tmp_path) -> None:
    art = tmp_path / "corpus.jsonl"
    art.write_bytes(b"abc")
    for _ in range(2):
        with pytest.raises(KeyboardInterrupt):
            _run(SIZED, tmp_path, art, interrupt="true")
    assert MEASURED == [str(art)]  # the second attempt resumed from the work dir's cache
    art.write_bytes(b"abcdef")
    rec = _run(SIZED, tmp_path, art)
    assert MEASURED == [str(art)] * 2 and rec.metrics["size"].value == 6


def test_an_artefact_declared_while_measuring_is_checked_on_resume(tmp_path) -> None:
    exp = dataclasses.replace(SIZED, id="fake.declaring", measure=_declaring, reads=None)
    art = tmp_path / "adapter.safetensors"
    art.write_bytes(b"v1")
    first = _run(exp, tmp_path, art)
    _run(exp, tmp_path, art)
    assert MEASURED == [str(art)] and str(art) in first.environment["artefacts"]
    note = json.loads((tmp_path / "runs" / "quick" / "work" / exp.id / WORK_INPUTS).read_text())
    assert note["artefacts"][str(art)] == first.environment["artefacts"][str(art)]  # stamped for the checkpoints
    art.write_bytes(b"v2")
    _run(exp, tmp_path, art)
    assert MEASURED == [str(art)] * 2


def test_a_new_version_reruns_and_sets_old_checkpoints_aside(tmp_path, monkeypatch) -> None:
    art = tmp_path / "fixture.json"
    art.write_bytes(b"[]")
    first = _run(SIZED, tmp_path, art)
    monkeypatch.setattr(runner, "__version__", "99.0")
    second = _run(SIZED, tmp_path, art)
    assert MEASURED == [str(art)] * 2 and second.setup_hash != first.setup_hash
    assert list((tmp_path / "runs" / "quick" / "history").glob("fake.sized.work-*"))


def test_checkpoints_of_unknown_inputs_are_not_reused(tmp_path, capsys) -> None:
    art = tmp_path / "a.bin"
    art.write_bytes(b"four")
    work = tmp_path / "runs" / "quick" / "work" / "fake.sized"
    work.mkdir(parents=True)
    (work / "size.json").write_text("999")  # left by a run before work dirs were stamped
    rec = _run(SIZED, tmp_path, art)
    assert rec.metrics["size"].value == 4 and f"no {WORK_INPUTS}" in capsys.readouterr().err


def test_a_shared_work_dir_is_reused_only_for_the_same_inputs(tmp_path) -> None:
    """E162's tree_llm samples into collapse_llm's work dir: only when those samples were made from its model's
    bytes; otherwise into a folder of its own, which does not touch the other's checkpoints."""
    from agentmill import __version__
    from agentmill.core.digest import digests
    from agentmill.experiments.protocol import stamp_work_dir

    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"v1")
    other = tmp_path / "runs" / "e.other"
    other.mkdir(parents=True)
    (other / "samples.jsonl").write_text("{}\n")
    stamp_work_dir(other, digests([gguf]), __version__)
    ctx = RunContext("quick", "hf:m", None, tmp_path / "runs" / "e.mine", inputs=digests([gguf]))
    assert ctx.shared_work_dir("e.other") == other
    gguf.write_bytes(b"v2")  # the model replaced in place: its old samples are not this run's
    ctx = dataclasses.replace(ctx, inputs=digests([gguf]))
    own = ctx.shared_work_dir("e.other")
    assert own == ctx.work_dir / "e.other" and not any(p.name == "samples.jsonl" for p in own.iterdir())
    assert (other / "samples.jsonl").exists()
    fresh = ctx.shared_work_dir("e.new")  # nothing there yet: used, and stamped for its owner's run
    assert fresh == tmp_path / "runs" / "e.new" and json.loads((fresh / WORK_INPUTS).read_text())["artefacts"] == \
        ctx.inputs


def test_setup_hash_covers_artefact_content_and_version_not_paths() -> None:
    s = ArtSetup()
    base = setup_hash(s, None, {"/a/x": "d1"}, "0.1.0")
    assert setup_hash(s, None, {"/elsewhere/x": "d1"}, "0.1.0") == base  # another checkout, same bytes
    assert len({base, setup_hash(s, None, {"/a/x": "d2"}, "0.1.0"), setup_hash(s, None, {"/a/x": "d1"}, "0.2.0"),
                setup_hash(s, None)}) == 4


def test_read_artefacts_adds_the_model_files_and_reports_a_reads_error(tmp_path) -> None:
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF....")
    echo = dataclasses.replace(SIZED, id="fake.model", uses_model=True, reads=None)
    got = read_artefacts(echo, ArtSetup(), f"hf:{gguf}")
    assert list(got) == [str(gguf)] and got[str(gguf)] not in ("", MISSING)
    assert read_artefacts(echo, ArtSetup(), "scripted:echo") == read_artefacts(echo, ArtSetup(), "tiny:new") == {}
    assert list(read_artefacts(echo, ArtSetup(), f"tiny:{tmp_path}")) == [str(tmp_path)]  # a saved tiny model

    def broken(s, model):
        raise RuntimeError("package not installed")

    err = read_artefacts(dataclasses.replace(SIZED, reads=broken), ArtSetup(), None)
    assert err == {"<reads>": "error: RuntimeError: package not installed"}
