"""The thread cap the main job's pool sets in its workers, and the CPU description every timing record carries."""

from __future__ import annotations

from agentmill.core.machine import THREAD_CAP_ENV, capped_threads, host_cpu


def test_no_cap_leaves_the_request_alone(monkeypatch) -> None:
    monkeypatch.delenv(THREAD_CAP_ENV, raising=False)
    assert capped_threads(2) == 2 and capped_threads(1) == 1


def test_the_cap_lowers_a_larger_request_only(monkeypatch) -> None:
    monkeypatch.setenv(THREAD_CAP_ENV, "1")
    assert capped_threads(2) == 1 and capped_threads(1) == 1
    monkeypatch.setenv(THREAD_CAP_ENV, "4")
    assert capped_threads(2) == 2


def test_pool_workers_get_the_cap() -> None:
    """A pooled experiment whose setup asks for 2 torch threads (E179's engines) must not take them: two such
    workers on two cores would oversubscribe them."""
    from agentmill.experiments.runner import _ONE_THREAD

    assert _ONE_THREAD[THREAD_CAP_ENV] == "1"


def test_host_cpu_reads_model_and_flags(tmp_path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text("model name\t: AMD EPYC\nflags\t\t: fpu sse avx2 fma\nmodel name\t: other\n")
    assert host_cpu(info) == {"model": "AMD EPYC", "flags": ["avx2"]}
    assert host_cpu(tmp_path / "missing")["flags"] == []
