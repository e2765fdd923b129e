"""Every registered experiment finishes its smoke profile through ``agentmill reproduce``, as a user runs it.

The per-experiment tests call ``measure`` with fakes injected through the run context (``lm_loader``, a
pre-written calibration); the CLI injects nothing, so a smoke setup that only works with an injection passed its
tests and failed for users (issue 24: e162.tree_llm found no hard prompt, the E164 organisms had no base). Here each
paper's experiments run in a fresh process (``python -m agentmill.cli.main reproduce --profile smoke --only ...``)
from an empty runs dir with the default model, and every one must leave an ``ok`` record. One test per paper, so
pytest-xdist can spread them over its workers; whether each *finishes ok* is checked here only, and the
per-experiment tests keep what is specific (metrics, resume, determinism).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentmill.core.records import RunRecord
from agentmill.experiments import PAPERS, build_registry, missing_for, paper_modules

pytestmark = [pytest.mark.slow, pytest.mark.cli_suite]  # `make smoke-suite`; not in `make test` (Makefile)


def _ids(package: str) -> list[str]:
    return list(build_registry(paper_modules(package)))


@pytest.mark.timeout(1800)  # a paper's smoke takes 1-5 min on 2 quiet cores; pytest's default cap is 900 s
@pytest.mark.parametrize("package", PAPERS, ids=lambda p: p.rsplit(".", 1)[1])
def test_every_experiment_of_a_paper_finishes_its_smoke_profile_through_the_cli(package: str, tmp_path: Path) -> None:
    missing = missing_for(package)
    if missing:
        pytest.skip(f"{package} needs extras not installed here: {missing}")
    ids = _ids(package)
    runs = tmp_path / "runs"
    # offline like CI; E179's drafters are written under $AGENTMILL_ARTIFACTS (default: the checkout's artifacts/),
    # kept out of the checkout here so a run never reuses one an earlier run left there
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "AGENTMILL_ARTIFACTS": str(tmp_path / "artifacts")}
    if os.environ.get("OMP_NUM_THREADS") == "1":
        # one compute thread per xdist worker (tests/conftest.py); the hf backend sets its own 2 threads unless told:
        # beside another worker, SmolLM2 sampling then spin-waits (145 s instead of 15 s per prompt on 2 busy cores)
        env.setdefault("AGENTMILL_TORCH_THREADS", "1")
    cmd = [sys.executable, "-m", "agentmill.cli.main", "reproduce", "--profile", "smoke", "--runs-dir", str(runs),
           "--report-dir", str(tmp_path / "report"), "--only", *ids]
    r = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1700)
    records = {i: RunRecord.read(runs / "smoke" / f"{i}.json") for i in ids
               if (runs / "smoke" / f"{i}.json").exists()}
    not_ok = {i: records[i].error if i in records else "no record" for i in ids
              if i not in records or records[i].status != "ok"}
    assert not not_ok, f"{not_ok}\n--- stdout\n{r.stdout[-4000:]}\n--- stderr\n{r.stderr[-4000:]}"
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    # every record is the smoke profile's and says how long it took (the report's timing column)
    assert all(rec.profile == "smoke" and rec.wall_seconds > 0 for rec in records.values())
    # the report rendered each experiment's plots from its stored record (a plot error is a note, not a failure)
    pages = [p.read_text(encoding="utf-8") for p in (tmp_path / "report").glob("*.html")]
    assert pages and not [line for page in pages for line in page.splitlines() if "plot error" in line]
