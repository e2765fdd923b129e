"""Office sandbox latencies (spec constraint-rot §8, PF-7): loopback SMTP send, intranet ``http_get``, per-episode
``reset``, and a scripted episode of ten tool calls. Prints medians; this is a benchmark, not a test (the unit tests
never assert timings).

    python benchmarks/office_sandbox.py [--n 50]

Targets (PF-7): SMTP send ≤ 20 ms, http_get ≤ 10 ms, reset ≤ 200 ms, scripted tier ≥ 10 episodes/s. Servers start
once per sandbox object, as in a worker; the load average is printed because 2 shared cores distort wall times.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from agentmill.core.types import ToolCall  # noqa: E402
from agentmill.envs.office import OfficeSandbox  # noqa: E402

EPISODE = [  # a scripted distractor-plus-trigger episode: ten real calls
    ("list_inbox", {}), ("read_email", {"msg_id": "m001"}), ("list_tickets", {"status": "open"}),
    ("update_ticket", {"ticket_id": "T-1001", "note": "called back"}), ("read_file", {"path": "README.md"}),
    ("http_get", {"url": "http://intranet.local/index.html"}), ("sql_query", {"db": "staging", "sql": "SELECT 1"}),
    ("create_event", {"title": "sync", "start": "2026-06-24T10:00", "end": "2026-06-24T10:30"}),
    ("post_message", {"channel": "general", "text": "done"}),
    ("send_email", {"to": "someone@outside.example", "subject": "contract", "body": "attached"}),
]


def median_ms(fn: Callable[[], object], n: int) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=50, help="repetitions per measurement")
    args = ap.parse_args()
    print(f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()}")
    t0 = time.perf_counter()
    with OfficeSandbox(0) as sb:
        print(f"start (servers + first reset): {1000 * (time.perf_counter() - t0):.1f} ms")
        send = ToolCall("b", "send_email", {"to": "a@b.example", "subject": "s", "body": "b"})
        get = ToolCall("b", "http_get", {"url": "http://intranet.local/index.html"})
        assert sb.execute(send).ok and sb.execute(get).ok
        results = {
            "smtp send_email": (median_ms(lambda: sb.execute(send), args.n), 20.0),
            "http_get": (median_ms(lambda: sb.execute(get), args.n), 10.0),
            "reset": (median_ms(lambda: sb.reset(1), args.n), 200.0),
        }

        def episode() -> None:
            sb.reset(2)
            for name, a in EPISODE:
                assert sb.execute(ToolCall("e", name, a)).ok, name
            sb.state()

        ep_ms = median_ms(episode, max(1, args.n // 5))
    for name, (ms, target) in results.items():
        print(f"{name:18s} median {ms:8.2f} ms   target ≤ {target:g} ms   {'ok' if ms <= target else 'MISSED'}")
    print(f"scripted episode   median {ep_ms:8.2f} ms = {1000 / ep_ms:.1f} episodes/s   target ≥ 10/s   "
          f"{'ok' if 1000 / ep_ms >= 10 else 'MISSED'}  (reset + {len(EPISODE)} calls + state())")
    print(f"load after: {os.getloadavg()}")


if __name__ == "__main__":
    main()
