"""Prometheus metrics of one server (a per-app registry, so several apps in one process never collide)."""

from __future__ import annotations

from typing import Any


class ServerMetrics:
    def __init__(self, *, policy: str, dtype: str, threads: int, weights: str = "dense"):
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info

        self.registry = r = CollectorRegistry()
        self.requests = Counter("agentmill_requests", "requests accepted", registry=r)
        self.aborted = Counter("agentmill_requests_aborted", "requests aborted because their client left",
                               registry=r)
        self.running = Gauge("agentmill_requests_running", "requests decoding", registry=r)
        self.waiting = Gauge("agentmill_requests_waiting", "requests queued", registry=r)
        self.prompt_tokens = Gauge("agentmill_prompt_tokens_total", "prompt tokens prefilled", registry=r)
        self.generation_tokens = Gauge("agentmill_generation_tokens_total", "tokens generated", registry=r)
        self.spec_rounds = Gauge("agentmill_spec_rounds_total", "verify rounds", registry=r)
        self.spec_drafted = Gauge("agentmill_spec_draft_tokens_total", "draft tokens verified", registry=r)
        self.spec_accepted = Gauge("agentmill_spec_accepted_tokens_total", "draft tokens accepted", registry=r)
        self.spec_tau = Gauge("agentmill_spec_acceptance_length_mean",
                              "mean tokens committed per round (incl. the bonus/replacement)", registry=r)
        self.ttft = Histogram("agentmill_time_to_first_token_seconds", "time to first token", registry=r)
        self.tool_calls = Counter("agentmill_tool_calls", "tool calls returned to clients", registry=r)
        self.tool_parse_failures = Counter(
            "agentmill_tool_call_parse_failures",
            "generations with tools that yielded no valid call: undeclared_tool, bad_arguments, bad_format "
            "(returned as text) or missing_call (tool_choice required/named but the model answered in text)",
            ["reason"], registry=r)
        self.request_seconds = Histogram("agentmill_request_seconds", "request latency", registry=r)
        Info("agentmill", "server configuration", registry=r).info(
            {"policy": policy, "dtype": dtype, "weights": weights, "threads": str(threads)})

    def observe_request(self, done: dict[str, Any]) -> None:
        self.ttft.observe(done.get("ttft", 0.0))
        self.request_seconds.observe(done.get("seconds", 0.0))

    def set_queue(self, running: int, waiting: int, stats: dict[str, float]) -> None:
        """Queue sizes and the engine's ``SpecStats.as_dict()``."""
        self.running.set(running)
        self.waiting.set(waiting)
        self.prompt_tokens.set(stats["prompt_tokens"])
        self.generation_tokens.set(stats["committed"])
        self.spec_rounds.set(stats["rounds"])
        self.spec_drafted.set(stats["drafted"])
        self.spec_accepted.set(stats["accepted"])
        self.spec_tau.set(stats["tau_mean"])

    def render(self) -> str:
        from prometheus_client import generate_latest

        return generate_latest(self.registry).decode()
