"""Every Prometheus metric execgym exports, in one registry per process component.

One :class:`Metrics` object holds one :class:`prometheus_client.CollectorRegistry`
(no process-wide globals, so tests and several apps in one process never collide).
``execgym serve`` serves it at ``/metrics``; ``execgym worker --metrics-port N``
serves it with prometheus-client's own HTTP server. Counters get the ``_total``
suffix in the exposition, histograms ``_bucket``, ``_sum`` and ``_count``.

========================================================  =========  =====================
name (as scraped)                                         type       labels
========================================================  =========  =====================
``execgym_jobs_submitted_total``                          counter    ``task_type``
``execgym_jobs_completed_total``                          counter    ``verdict, task_type``
``execgym_jobs_failed_total``                             counter    ``verdict, task_type``
``execgym_queue_depth``                                   gauge
``execgym_queue_lag_seconds``                             histogram
``execgym_sandboxes_active``                              gauge
``execgym_sandbox_start_seconds``                         histogram
``execgym_sandbox_run_seconds``                           histogram
``execgym_sandbox_cpu_seconds``                           histogram
``execgym_sandbox_peak_memory_bytes``                     histogram
``execgym_worker_last_heartbeat_timestamp_seconds``       gauge      ``worker``
``execgym_breaker_state``                                 gauge      ``task_type``
``execgym_http_requests_total``                           counter    ``route, method, status``
``execgym_http_request_seconds``                          histogram  ``route``
``execgym_programs_total``                                counter    ``language, status``
``execgym_rollouts_scored_total``                         counter    ``verdict``
``execgym_rejected_total``                                counter
``execgym_in_flight`` / ``execgym_in_flight_limit``       gauge
``execgym_episodes_live``                                 gauge
``execgym_episodes_reclaimed``                            gauge
``execgym_episodes_opened_total``                         counter
``execgym_episode_steps_total``                           counter
``execgym_episodes_finished_total``                       counter    ``end``
``execgym_episode_final_reward``                          summary
========================================================  =========  =====================

What they count:

- *submitted*: rollouts accepted by ``POST /v1/score`` (server), jobs received from
  the broker (worker). *completed*: every finished job, by verdict; *failed*: the
  finished jobs whose reward is masked (``sandbox_error``, ``invalid``,
  ``language_unavailable``, ``quarantined``), so ``completed - failed`` got a reward.
- *queue depth*: jobs waiting or running in the broker (worker, refreshed with each
  heartbeat), or rollouts accepted by the server and not finished. *Lag*: seconds from
  submission to the start of judging.
- *sandbox start*: the seconds of each sandbox call not spent running the program
  (namespaces, mounts, cgroup, fork; and teardown), i.e. call time minus
  ``RunResult.wall_time_s``. *run*: ``wall_time_s``.
- *CPU and memory per sandbox*: ``RunResult.cpu_time_s`` and ``peak_memory_bytes``,
  which the sandbox reads **at the end of the run** from the run's own cgroup
  (``cpu.stat`` / ``cpuacct.usage`` are cumulative, ``memory.peak`` /
  ``memory.max_usage_in_bytes`` keep the peak), else from rusage: no sampling thread is
  needed, since the kernel keeps the peak, and the same values are in every result.
- *episodes* (``execgym serve``; read from its episode registry at scrape time): live
  (holding a sandbox), reclaimed after their idle timeout, opened, steps taken,
  finished by ``end`` (``terminated``: the task is over; ``truncated``: a budget ran
  out), and the final rewards of finished episodes whose reward is not masked
  (``_sum`` / ``_count``: the mean final reward).
- *breaker state*: 0 closed, 1 half-open, 2 open (:mod:`execgym.ops.breakers`), read from
  the breakers at scrape time.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.registry import Collector

from execgym.ops.breakers import BreakerView
from execgym.sandbox.base import RunResult, Sandbox, SandboxWrapper

_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
_BYTES = tuple(float(2**n) for n in range(20, 34, 1))  # 1 MiB .. 8 GiB


class HasBreakerViews(Protocol):
    """Anything that shows breakers (:class:`~execgym.ops.breakers.Breakers`...)."""

    def views(self) -> Mapping[str, BreakerView]:
        """Every breaker by task type."""
        ...


class _BreakerCollector(Collector):
    """``execgym_breaker_state`` per task type, read from the breakers when scraped."""

    def __init__(self) -> None:
        self.breakers: list[HasBreakerViews] = []

    def collect(self) -> Iterable[Metric]:
        family = GaugeMetricFamily(
            "execgym_breaker_state",
            "Circuit breaker per task type: 0 closed, 1 half-open, 2 open.",
            labels=["task_type"],
        )
        for breakers in self.breakers:
            for task_type, view in breakers.views().items():
                family.add_metric([task_type], int(view.state))
        yield family

    def describe(self) -> Iterable[Metric]:
        return [GaugeMetricFamily("execgym_breaker_state", "", labels=["task_type"])]


class _EpisodeCollector(Collector):
    """The episode registry's counters, read when scraped (zeros until one is watched).

    ``source`` is an :class:`execgym.episodes.registry.EpisodeRegistry` (anything with
    ``live``, ``reclaimed``, ``opened``, ``steps_taken``, ``finished``,
    ``final_reward_sum`` and ``final_rewards``).
    """

    def __init__(self) -> None:
        self.source: Any = None

    def collect(self) -> Iterable[Metric]:
        source = self.source
        value = (lambda name: getattr(source, name)) if source is not None else (lambda _: 0)
        yield GaugeMetricFamily(
            "execgym_episodes_live", "Agent episodes holding a sandbox.", value("live")
        )
        yield GaugeMetricFamily(
            "execgym_episodes_reclaimed",
            "Agent episodes closed after their idle timeout, since start.",
            value("reclaimed"),
        )
        yield CounterMetricFamily(
            "execgym_episodes_opened", "Agent episodes opened, since start.", value("opened")
        )
        yield CounterMetricFamily(
            "execgym_episode_steps", "Agent episode steps taken, since start.", value("steps_taken")
        )
        finished = CounterMetricFamily(
            "execgym_episodes_finished",
            "Agent episodes ended, by how (terminated: the task is over; truncated: a budget).",
            labels=["end"],
        )
        finished_by_end = value("finished")
        ends = finished_by_end if isinstance(finished_by_end, dict) else {}
        for end in ("terminated", "truncated"):
            finished.add_metric([end], ends.get(end, 0))
        yield finished
        yield SummaryMetricFamily(
            "execgym_episode_final_reward",
            "Final rewards of finished agent episodes (masked ones left out).",
            count_value=value("final_rewards"),
            sum_value=value("final_reward_sum"),
        )


class Metrics:
    """execgym's metrics, in their own registry.

    Args:
        registry: Where to register them (default: a new one).
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.jobs_submitted = Counter(
            "execgym_jobs_submitted", "Jobs accepted or received.", ["task_type"], registry=r
        )
        self.jobs_completed = Counter(
            "execgym_jobs_completed",
            "Jobs finished, by verdict and task type.",
            ["verdict", "task_type"],
            registry=r,
        )
        self.jobs_failed = Counter(
            "execgym_jobs_failed",
            "Jobs finished without a reward (masked verdicts), by verdict and task type.",
            ["verdict", "task_type"],
            registry=r,
        )
        self.queue_depth = Gauge(
            "execgym_queue_depth", "Jobs waiting or running in the queue.", registry=r
        )
        self.queue_lag = Histogram(
            "execgym_queue_lag_seconds",
            "Seconds from a job's submission to the start of its judging.",
            buckets=_SECONDS,
            registry=r,
        )
        self.active_runs = 0
        """Sandbox runs in progress (what ``execgym_sandboxes_active`` shows)."""
        self.sandboxes_active = Gauge(
            "execgym_sandboxes_active", "Sandbox runs in progress.", registry=r
        )
        self.sandboxes_active.set_function(lambda: self.active_runs)
        self.sandbox_start = Histogram(
            "execgym_sandbox_start_seconds",
            "Seconds of a sandbox call not spent running the program (setup and teardown).",
            buckets=_SECONDS,
            registry=r,
        )
        self.sandbox_run = Histogram(
            "execgym_sandbox_run_seconds",
            "Wall-clock seconds of the program in its sandbox.",
            buckets=_SECONDS,
            registry=r,
        )
        self.sandbox_cpu = Histogram(
            "execgym_sandbox_cpu_seconds",
            "CPU seconds of a sandbox run's whole process tree (cgroup, else rusage).",
            buckets=_SECONDS,
            registry=r,
        )
        self.sandbox_memory = Histogram(
            "execgym_sandbox_peak_memory_bytes",
            "Peak memory of a sandbox run (cgroup memory.peak, else max RSS).",
            buckets=_BYTES,
            registry=r,
        )
        self.worker_heartbeat = Gauge(
            "execgym_worker_last_heartbeat_timestamp_seconds",
            "Unix time of each worker's last heartbeat.",
            ["worker"],
            registry=r,
        )
        self._breakers = _BreakerCollector()
        r.register(self._breakers)
        self._episodes = _EpisodeCollector()
        r.register(self._episodes)
        self.requests = Counter(
            "execgym_http_requests",
            "HTTP requests by route, method and status code.",
            ["route", "method", "status"],
            registry=r,
        )
        self.request_seconds = Histogram(
            "execgym_http_request_seconds",
            "HTTP request latency in seconds, by route.",
            ["route"],
            registry=r,
        )
        self.programs = Counter(
            "execgym_programs",
            "Programs run through /run_code and /v1/run, by language and outcome.",
            ["language", "status"],
            registry=r,
        )
        self.rollouts = Counter(
            "execgym_rollouts_scored",
            "Rollouts scored through /v1/score, by verdict.",
            ["verdict"],
            registry=r,
        )
        self.rejected = Counter(
            "execgym_rejected",
            "Requests refused because the in-flight capacity was full (429).",
            registry=r,
        )
        self.in_flight = Gauge("execgym_in_flight", "Items accepted and not finished.", registry=r)
        self.in_flight_limit = Gauge(
            "execgym_in_flight_limit", "The in-flight capacity.", registry=r
        )

    def watch_episodes(self, registry: Any) -> None:
        """Export the counters of ``registry`` (the service's episodes) when scraped."""
        self._episodes.source = registry

    def watch(self, breakers: HasBreakerViews) -> None:
        """Export ``breakers``' states as ``execgym_breaker_state``."""
        if breakers not in self._breakers.breakers:
            self._breakers.breakers.append(breakers)

    def job_done(self, verdict: str, task_type: str, masked: bool) -> None:
        """Count one finished job."""
        self.jobs_completed.labels(verdict, task_type).inc()
        if masked:
            self.jobs_failed.labels(verdict, task_type).inc()

    def observe_run(self, result: RunResult, call_s: float) -> None:
        """Record one sandbox call that took ``call_s`` seconds and gave ``result``."""
        self.sandbox_run.observe(result.wall_time_s)
        self.sandbox_start.observe(max(0.0, call_s - result.wall_time_s))
        self.sandbox_cpu.observe(result.cpu_time_s)
        if result.peak_memory_bytes is not None:
            self.sandbox_memory.observe(result.peak_memory_bytes)

    def names(self) -> set[str]:
        """Every sample name this registry can expose (``_total``, ``_bucket``... included)."""
        suffixes = {
            "counter": ("_total",),
            "histogram": ("_bucket", "_sum", "_count"),
            "gauge": ("",),
            "summary": ("_sum", "_count"),
        }
        return {
            family.name + suffix
            for family in self.registry.collect()
            for suffix in suffixes.get(family.type, ("",))
        }


class MeteredSandbox(SandboxWrapper):
    """A sandbox that records every run in ``metrics``: active count, times, CPU, memory.

    Wrap the innermost sandbox (inside any bound on concurrency), so
    ``execgym_sandboxes_active`` counts runs, not waiters. Other attributes are the
    inner sandbox's.

    Args:
        inner: The sandbox that runs the programs.
        metrics: Where to record.
        clock: Monotonic seconds.
    """

    def __init__(
        self, inner: Sandbox, metrics: Metrics, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__(inner)
        self.metrics = metrics
        self._clock = clock

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def around(self, run: Callable[[], Awaitable[RunResult]]) -> RunResult:
        """The run, counted while active and recorded when done."""
        self.metrics.active_runs += 1
        started = self._clock()
        try:
            result = await run()
        finally:
            self.metrics.active_runs -= 1
        self.metrics.observe_run(result, self._clock() - started)
        return result


def timed(
    items: Iterable[Any], submitted_at: float, metrics: Metrics, clock: Callable[[], float]
) -> Iterator[Any]:
    """``items``, observing each one's queue lag as it is taken for judging."""
    for item in items:
        metrics.queue_lag.observe(max(0.0, clock() - submitted_at))
        yield item
