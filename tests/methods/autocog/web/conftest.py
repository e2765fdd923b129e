import socket
import subprocess
import sys
import time

import httpx
import pytest

from agentmill.methods.autocog.web.store import Store

V = [0.9, 0.8, 0.7, 0.6]
# U = 8 pairs -> K = 12 repeats -> 96 trials + 4 catch trials (spec §7 AC-9)
PAIRS_A = [[1, 0, 0, 0], [0, 1, 1, 1], [1, 1, 0, 0], [0, 0, 1, 1], [1, 0, 1, 0], [0, 1, 0, 1], [1, 0, 0, 1], [0, 1, 1, 0]]
PAIRS_B = [[0, 1, 1, 1], [1, 0, 0, 0], [0, 0, 1, 1], [1, 1, 0, 0], [0, 1, 0, 1], [1, 0, 1, 0], [0, 1, 1, 0], [1, 0, 0, 1]]
DESIGN = {"validities": V, "rating_max": 1, "pairs_a": PAIRS_A, "pairs_b": PAIRS_B, "max_trials": 96}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(db, port):
    p = subprocess.Popen([sys.executable, "-m", "agentmill.cli.main", "autocog", "serve", "--db", str(db), "--port",
                          str(port), "--test-mode"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        try:
            httpx.get(f"http://127.0.0.1:{port}/api/s/nope", timeout=0.5)
            return p
        except httpx.HTTPError:
            time.sleep(0.05)
    p.kill()
    raise RuntimeError("server did not start")


@pytest.fixture()
def study(tmp_path):
    db = tmp_path / "study.sqlite"
    st = Store(db)
    st.add_observation("o1", DESIGN)
    port = free_port()
    proc = start_server(db, port)
    yield st, db, port, proc
    if proc.poll() is None:
        proc.kill()
        proc.wait()
