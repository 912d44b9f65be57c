"""The service's metrics: :class:`execgym.ops.metrics.Metrics` with its capacity gauges bound."""

from __future__ import annotations

from execgym.ops.metrics import Metrics as _Metrics
from execgym.server.capacity import Capacity


class Metrics(_Metrics):
    """The service's metrics, served at ``/metrics`` (every name: :mod:`execgym.ops.metrics`).

    Args:
        capacity: Read live for the in-flight, capacity and queue-depth gauges.
    """

    def __init__(self, capacity: Capacity) -> None:
        super().__init__()
        self.in_flight.set_function(lambda: capacity.in_flight)
        self.in_flight_limit.set_function(lambda: capacity.limit)
        self.queue_depth.set_function(lambda: capacity.in_flight)
