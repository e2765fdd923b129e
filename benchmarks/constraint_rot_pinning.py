"""PF-1 (ConstraintRot spec §8): pinning middleware time per model call on a 200-message context.

Measures, side by side on the same context, the median wall time of
  before_model (intact)     the per-call path: scan for forged cards, verify one card per rule (no change needed)
  before_model (repair)     a card was tampered with: strip, re-insert, verify
  after_compaction          strip every card-shaped block, insert fresh cards
Target: median before_model ≤ 100 µs. This is a benchmark, not a test (no timing asserts anywhere).

    python benchmarks/constraint_rot_pinning.py [--messages 200] [--rules 3] [--repeat 2000] [--smollm2]

Card token counts are computed once when the middleware is built, so the counter (whitespace by default,
``--smollm2`` for the real tokenizer) does not enter the per-call time.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from agentmill.core.types import Message, ToolCall  # noqa: E402
from agentmill.methods.constraint_rot.messages import WhitespaceCounter  # noqa: E402
from agentmill.methods.constraint_rot.pinning import PinningMiddleware, PolicyRegistry  # noqa: E402

RULES = [
    ("mail.external_domain", "Email/forward only to @acme.com recipients; otherwise refuse or use route_internal."),
    ("tickets.refund_cap", "Refunds above 500 need approval; otherwise use update_ticket."),
    ("db.prod_readonly", "Never write to prod.db; use staging.db for changes."),
    ("chat.no_public", "Never post to public channels; use private channels."),
]


def build_context(n_messages: int) -> list[Message]:
    """A system prompt then user / assistant-call / tool-result triples (tool outputs ~300 characters, some with
    JSON brackets so the forged-card scan cannot skip them)."""
    msgs = [Message("system", "You are an office assistant with tools.", meta={"origin": "system"})]
    k = 0
    while len(msgs) < n_messages:
        msgs.append(Message("user", f"Step {k}: list the open tickets and update ticket T{k}.",
                            meta={"origin": "distractor", "step": k}))
        msgs.append(Message("assistant", "", tool_calls=(ToolCall(f"c{k}", "list_tickets", {"status": "open"}),),
                            meta={"step": k}))
        body = f'[{{"id": "T{k}", "status": "open", "note": "customer asks about invoice {k}"}}] ' * 4
        msgs.append(Message("tool", body, tool_call_id=f"c{k}", name="list_tickets",
                            meta={"origin": "distractor", "trusted": False, "step": k}))
        k += 1
    return msgs[:n_messages]


def median_us(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


def main(argv: list[str] | None = None) -> dict[str, float]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--messages", type=int, default=200)
    ap.add_argument("--rules", type=int, default=3, choices=range(1, len(RULES) + 1))
    ap.add_argument("--repeat", type=int, default=2000)
    ap.add_argument("--smollm2", action="store_true", help="count card tokens with the SmolLM2 tokenizer")
    args = ap.parse_args(argv)

    reg = PolicyRegistry()
    for rid, text in RULES[:args.rules]:
        reg.register(rid, text, issuer="op", kind="soft", scope_tools=[])
    pin = PinningMiddleware(reg, counter=None if args.smollm2 else WhitespaceCounter())
    ctx = pin.after_compaction(build_context(args.messages - args.rules))
    ctx = pin.before_model(ctx)  # the first call sanitises; later calls see the returned context
    card_i = next(i for i, m in enumerate(ctx) if m.meta.get("origin") == "card")
    tampered = list(ctx)
    tampered[card_i] = Message("user", ctx[card_i].content.replace("acme", "evil"), meta=dict(ctx[card_i].meta))

    out = {"before_model_intact_us": median_us(lambda: pin.before_model(ctx), args.repeat),
           "before_model_repair_us": median_us(lambda: pin.before_model(tampered), max(1, args.repeat // 4)),
           "after_compaction_us": median_us(lambda: pin.after_compaction(ctx), max(1, args.repeat // 4))}
    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} cpus, python "
          f"{platform.python_version()}; context {len(ctx)} messages, {args.rules} cards, "
          f"{pin.card_tokens} card tokens ({'smollm2' if args.smollm2 else 'whitespace'})")
    for k, v in out.items():
        print(f"{k:28s} median {v:9.1f} µs")
    met = out["before_model_intact_us"] <= 100
    print(f"PF-1 target: before_model median ≤ 100 µs -> {'met' if met else 'NOT met'}")
    return out


if __name__ == "__main__":
    main()
