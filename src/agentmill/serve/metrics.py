"""Prometheus metrics of one server (a per-app registry, so several apps in one process never collide)."""

from __future__ import annotations

from typing import Any


class ServerMetrics:
    def __init__(self, *, policy: str, dtype: str, threads: int):
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info

        self.registry = r = CollectorRegistry()
        self.requests = Counter("agentmill_requests", "requests accepted", registry=r)
        self.running = Gauge("agentmill_requests_running", "requests decoding", registry=r)
        self.waiting = Gauge("agentmill_requests_waiting", "requests queued", registry=r)
        self.prompt_tokens = Gauge("agentmill_prompt_tokens_total", "prompt tokens prefilled", registry=r)
        self.generation_tokens = Gauge("agentmill_generation_tokens_total", "tokens generated", registry=r)
        self.ttft = Histogram("agentmill_time_to_first_token_seconds", "time to first token", registry=r)
        self.request_seconds = Histogram("agentmill_request_seconds", "request latency", registry=r)
        Info("agentmill", "server configuration", registry=r).info(
            {"policy": policy, "dtype": dtype, "threads": str(threads)})

    def observe_request(self, done: dict[str, Any]) -> None:
        self.ttft.observe(done.get("ttft", 0.0))
        self.request_seconds.observe(done.get("seconds", 0.0))

    def set_queue(self, running: int, waiting: int, stats: dict[str, int]) -> None:
        self.running.set(running)
        self.waiting.set(waiting)
        self.prompt_tokens.set(stats["prompt_tokens"])
        self.generation_tokens.set(stats["generation_tokens"])

    def render(self) -> str:
        from prometheus_client import generate_latest

        return generate_latest(self.registry).decode()
