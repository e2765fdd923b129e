"""E169 experiment tests use a private pyrepo cache (the in-code fixture package is built and mined there once per
session), never the user's cache and never the network."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session", autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory):
    old = os.environ.get("AGENTMILL_CACHE")
    os.environ["AGENTMILL_CACHE"] = str(tmp_path_factory.mktemp("agentmill-cache"))
    yield
    if old is None:
        os.environ.pop("AGENTMILL_CACHE", None)
    else:
        os.environ["AGENTMILL_CACHE"] = old
