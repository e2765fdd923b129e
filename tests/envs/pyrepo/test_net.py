"""The real fetch (network): skipped unless AGENTMILL_PYREPO_NET=1; CI never fetches."""

from __future__ import annotations

import os

import pytest


@pytest.mark.pyrepo_net
@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("AGENTMILL_PYREPO_NET"), reason="fetches from PyPI; set AGENTMILL_PYREPO_NET=1")
def test_fetch_cachetools(tmp_path) -> None:
    from agentmill.envs.pyrepo import fetch, open_repo

    repo = fetch("cachetools==8.0.1", cache=tmp_path)
    assert len(repo.passing) > 400
    assert open_repo("cachetools==8.0.1", cache=tmp_path).commit == repo.commit
