"""Shared fixtures for the pyrepo tests: the in-code fixture package, built and mined once per session in a temp
dir (never the user's cache, never the network)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def fixture_pyrepo(tmp_path_factory: pytest.TempPathFactory):
    from agentmill.envs.pyrepo import fixture_repo, seed_bugs

    root = tmp_path_factory.mktemp("pyrepo")
    repo = fixture_repo(root / "minicalc")
    tasks = seed_bugs(repo, 2, seed=0, log=root / "mining.jsonl")
    return repo, tasks
