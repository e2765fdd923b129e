"""Registers the same id as its twin, for the duplicate-id test."""

from tests.helpers.fake_experiments import COIN as EXPERIMENT  # noqa: F401
