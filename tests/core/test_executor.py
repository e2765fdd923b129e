from __future__ import annotations

import json
import os

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


# -- joining a Ray cluster (issue 20, finding 8) ---------------------------------------------------------------------

class _FakeRay:
    """Records ``ray.init`` keywords and refuses ``num_cpus`` with an address, as Ray does."""

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def is_initialized(self) -> bool:
        return False

    def init(self, **kw) -> None:
        if kw.get("address") not in (None, "local") and "num_cpus" in kw:
            raise ValueError("When connecting to an existing cluster, num_cpus and num_gpus must not be provided.")
        self.calls.append(kw)


@pytest.mark.parametrize("address,env,expected", [
    (None, None, {"num_cpus": 3}),
    ("10.0.0.5:6379", None, {"address": "10.0.0.5:6379"}),
    (None, "auto", {"address": "auto"}),                        # RAY_ADDRESS set: join, as Ray's own tools do
    ("ray://head:10001", "auto", {"address": "ray://head:10001"}),  # the argument wins over the environment
    ("local", None, {"address": "local", "num_cpus": 3}),        # Ray's name for a new local runtime
    (None, "  ", {"num_cpus": 3}),
])
def test_ray_executor_joins_a_cluster_without_num_cpus(monkeypatch, address, env, expected) -> None:
    import sys

    from agentmill.core.executor import RayExecutor

    fake = _FakeRay()
    monkeypatch.setitem(sys.modules, "ray", fake)
    monkeypatch.setattr("os.cpu_count", lambda: 3)
    if env is None:
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
    else:
        monkeypatch.setenv("RAY_ADDRESS", env)
    ex = RayExecutor(address=address)
    assert fake.calls == [{"ignore_reinit_error": True, "include_dashboard": False, "log_to_driver": False,
                           **expected}]
    assert ex.address == (expected.get("address") if "num_cpus" not in expected else None)


def test_ray_executor_refuses_num_cpus_for_a_cluster(monkeypatch) -> None:
    import sys

    from agentmill.core.executor import RayExecutor

    monkeypatch.setitem(sys.modules, "ray", _FakeRay())
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.5:6379")
    with pytest.raises(ValueError, match="num_cpus=2 applies to a local Ray runtime; the cluster at 10.0.0.5:6379"):
        RayExecutor(num_cpus=2)


def test_a_cluster_that_refuses_us_is_one_line_naming_it(monkeypatch) -> None:
    import sys

    from agentmill.core.executor import RayExecutor

    class Refusing(_FakeRay):
        def init(self, **kw) -> None:
            raise ConnectionError("Failed to connect to Ray cluster at 10.0.0.5:6379")

    monkeypatch.setitem(sys.modules, "ray", Refusing())
    with pytest.raises(ConnectionError, match=r"cannot join the Ray cluster at 10.0.0.5:6379: Failed to connect .* "
                                              r"RAY_AUTH_MODE=token"):
        RayExecutor(address="10.0.0.5:6379")


# -- pool workers die with their parent (issue 20, finding 6) --------------------------------------------------------

_ORPHAN = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c",
    "import os, sys, time; from agentmill.core.executor import die_with_parent; "
    "die_with_parent(int(sys.argv[1]), poll_seconds=0.2); print('armed', flush=True); time.sleep(60)",
    str(os.getpid())], stdout=subprocess.PIPE, text=True)
assert child.stdout.readline() == "armed\\n"
print(child.pid, flush=True)
time.sleep(60)
"""


def test_a_worker_dies_when_its_parent_is_killed() -> None:
    """The mechanism under ``reproduce --jobs`` and the process executor: SIGKILL the parent, the worker follows
    (PR_SET_PDEATHSIG on Linux, a getppid poll elsewhere); a worker whose parent is already gone exits at once."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import psutil

    parent = subprocess.Popen([sys.executable, "-c", _ORPHAN], stdout=subprocess.PIPE, text=True)
    worker = None
    try:
        worker = psutil.Process(int(parent.stdout.readline()))
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        t0 = time.monotonic()
        while worker.is_running() and worker.status() != psutil.STATUS_ZOMBIE and time.monotonic() - t0 < 5:
            time.sleep(0.05)
        assert not worker.is_running() or worker.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        pass
    finally:
        if parent.poll() is None:
            parent.kill()
        if worker is not None:
            try:
                worker.kill()
            except psutil.NoSuchProcess:
                pass
    # the parent died before the worker armed itself: its parent is now someone else, so it quits at once
    late = subprocess.run([sys.executable, "-c", "from agentmill.core.executor import die_with_parent; "
                           f"die_with_parent({parent.pid}); print('still here')"], capture_output=True, text=True,
                          timeout=60)
    assert parent.pid != os.getpid() and late.returncode == 1 and "still here" not in late.stdout


@pytest.mark.ray
@pytest.mark.slow
def test_run_joins_a_running_ray_cluster(tmp_path) -> None:
    """``ray start --head`` (in the foreground, so every process it starts is ours to stop), then ``agentmill run
    --executor ray --ray-address`` joins it: before, ``ray.init`` refused ``num_cpus`` with an address."""
    import os
    import re
    import shutil
    import signal
    import subprocess
    import sys
    import tempfile
    import time
    from pathlib import Path

    import psutil

    bin_dir = Path(sys.executable).parent
    ray_tmp = tempfile.mkdtemp(prefix="amray", dir="/tmp")  # Ray's socket paths must stay under 107 bytes
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    head = subprocess.Popen([str(bin_dir / "ray"), "start", "--head", "--block", "--port=0", "--num-cpus=2",
                             "--include-dashboard=false", f"--temp-dir={ray_tmp}", "--disable-usage-stats"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        address, deadline, seen = None, time.monotonic() + 180, []
        while address is None and time.monotonic() < deadline:
            line = head.stdout.readline()
            if not line:
                break
            seen.append(line)
            m = re.search(r"ray start --address='([^']+)'", line)
            address = m.group(1) if m else None
        assert address, "".join(seen[-20:])
        cmd = [sys.executable, "-m", "agentmill.cli.main", "run", "e162.collapse_law", "--profile", "smoke",
               "--executor", "ray", "--runs-dir", str(tmp_path / "runs")]
        record = tmp_path / "runs" / "smoke" / "e162.collapse_law.json"
        for argv, extra_env in ((["--ray-address", address], {}), (["--fresh"], {"RAY_ADDRESS": address})):
            out = subprocess.run(cmd + argv, env={**env, **extra_env}, capture_output=True, text=True, timeout=300)
            assert out.returncode == 0, out.stderr[-3000:]
            rec = json.loads(record.read_text())
            assert rec["status"] == "ok" and rec["environment"]["ray_address"] == address
    finally:
        procs = psutil.Process(head.pid).children(recursive=True) if head.poll() is None else []
        head.send_signal(signal.SIGTERM)  # ``--block`` stops the cluster's processes when it is terminated
        try:
            head.wait(timeout=30)
        except subprocess.TimeoutExpired:
            head.kill()
        _, alive = psutil.wait_procs(procs, timeout=15)
        for p in alive:
            p.kill()
        shutil.rmtree(ray_tmp, ignore_errors=True)


def test_a_child_started_with_preexec_die_with_parent_dies_with_a_killed_parent() -> None:
    """kill -9 of the process that started a server runs no ``finally``: the kernel must end the server (Linux)."""
    import subprocess
    import sys
    import time

    if not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_PDEATHSIG is Linux only")
    script = ("import os, signal, subprocess\n"
              "from agentmill.core.executor import preexec_die_with_parent\n"
              "child = subprocess.Popen(['sleep', '60'], preexec_fn=preexec_die_with_parent())\n"
              "print(child.pid, flush=True)\n"
              "os.kill(os.getpid(), signal.SIGKILL)\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    pid = int(out.stdout.split()[0])

    def alive() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True

    deadline = time.monotonic() + 5
    while alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive()
