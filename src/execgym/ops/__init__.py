"""Operations: what keeps a service or a worker observable and stable under failure.

- :mod:`execgym.ops.breakers`: circuit breakers per task type, which quarantine a task
  type whose runs fail for infrastructure reasons (masked, not the model's fault).
- :mod:`execgym.ops.metrics`: the Prometheus registry of the service and every worker
  (every metric name is defined there).
- :mod:`execgym.ops.logs`: log settings and the JSON log format.

Nothing is imported here: ``execgym score`` loads only what it uses.
"""
