from __future__ import annotations

import pytest

from agentmill.core.executor import iter_chunks, make_executor
from tests.helpers.work_units import fail_on_three, seeded_mean

UNITS = [(7, i) for i in range(6)]


def _run(name: str, **kw) -> tuple[list[float], list[int]]:
    seen: list[int] = []
    out = make_executor(name, **kw).map(seeded_mean, UNITS, on_result=lambda i, r: seen.append(i))
    return out, seen


def test_serial_and_process_pool_agree_in_order() -> None:
    serial, seen_s = _run("serial")
    pool, seen_p = _run("process", workers=2)
    assert serial == pool
    assert seen_s == list(range(6)) and sorted(seen_p) == list(range(6))


@pytest.mark.ray
@pytest.mark.slow
def test_ray_agrees_with_serial() -> None:
    import ray

    try:
        ray_out, seen = _run("ray", num_cpus=2)
        assert ray_out == _run("serial")[0] and sorted(seen) == list(range(6))
    finally:
        ray.shutdown()


def test_unit_failure_propagates_and_unknown_engine() -> None:
    with pytest.raises(RuntimeError, match="unit 3 failed"):
        make_executor("serial").map(fail_on_three, [1, 2, 3])
    with pytest.raises(ValueError, match="serial, process, ray"):
        make_executor("dask")


def test_chunks() -> None:
    assert list(iter_chunks(range(5), 2)) == [[0, 1], [2, 3], [4]]
