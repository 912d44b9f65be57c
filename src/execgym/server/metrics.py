"""Prometheus metrics of one app, in its own registry (no process-wide globals)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from execgym.server.capacity import Capacity


class Metrics:
    """The service's metrics, served at ``/metrics``.

    Args:
        capacity: Read live for the in-flight and capacity gauges.
    """

    def __init__(self, capacity: Capacity) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "execgym_http_requests",
            "HTTP requests by route, method and status code.",
            ["route", "method", "status"],
            registry=self.registry,
        )
        self.request_seconds = Histogram(
            "execgym_http_request_seconds",
            "HTTP request latency in seconds, by route.",
            ["route"],
            registry=self.registry,
        )
        self.programs = Counter(
            "execgym_programs",
            "Programs run through /run_code and /v1/run, by language and outcome.",
            ["language", "status"],
            registry=self.registry,
        )
        self.rollouts = Counter(
            "execgym_rollouts_scored",
            "Rollouts scored through /v1/score, by verdict.",
            ["verdict"],
            registry=self.registry,
        )
        self.rejected = Counter(
            "execgym_rejected",
            "Requests refused because the in-flight capacity was full (429).",
            registry=self.registry,
        )
        in_flight = Gauge(
            "execgym_in_flight", "Items accepted and not finished.", registry=self.registry
        )
        in_flight.set_function(lambda: capacity.in_flight)
        limit = Gauge("execgym_in_flight_limit", "The in-flight capacity.", registry=self.registry)
        limit.set_function(lambda: capacity.limit)
