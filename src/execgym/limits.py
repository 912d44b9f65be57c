"""Resource limits for one run in a sandbox, with units in every name."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, fields, replace
from typing import Literal

from execgym.errors import ConfigError

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

MIN_MEMORY_BYTES = 16 * MiB
"""Below this the Python interpreter cannot even start; refused as a likely unit slip."""

_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": KiB,
    "kb": 1000,
    "kib": KiB,
    "m": MiB,
    "mb": 1000**2,
    "mib": MiB,
    "g": GiB,
    "gb": 1000**3,
    "gib": GiB,
    "t": 1024 * GiB,
    "tb": 1000**4,
    "tib": 1024 * GiB,
}
MAX_SECONDS = 86400.0
"""Largest time limit (``wall_time_s``, ``cpu_time_s``): one day."""
MAX_BYTES = 2**62
"""Largest byte limit (memory, output, file size, disk): far past any host, still an rlimit."""
MAX_COUNT = 2**31
"""Largest count limit (``max_processes``, ``max_open_files``)."""


def limit_maximum(name: str) -> float:
    """The largest value allowed for the limit ``name`` (by its unit suffix)."""
    if name.endswith("_s"):
        return MAX_SECONDS
    if name.endswith("_bytes"):
        return MAX_BYTES
    return MAX_COUNT


_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str | int) -> int:
    """Parse a size such as ``"512MiB"``, ``"2GiB"``, ``"1.5G"`` or ``4096`` into bytes.

    Binary suffixes (``KiB``, ``MiB``, ``GiB``, ``TiB``, and the bare ``K``, ``M``,
    ``G``, ``T``) are powers of 1024; ``KB``, ``MB``, ``GB``, ``TB`` are powers of 1000.
    A number without a unit is bytes.

    Raises:
        ConfigError: if the text is not a positive size with a known unit.

    >>> parse_size("256MiB")
    268435456
    """
    if isinstance(text, int):
        value = text
    else:
        match = _SIZE_RE.match(text)
        unit = match.group(2).lower() if match else None
        if match is None or unit not in _SIZE_UNITS:
            raise ConfigError(
                f"cannot read {text!r} as a size: write a number with an optional unit, "
                "such as 4096, 512MiB or 2GiB"
            )
        value = int(float(match.group(1)) * _SIZE_UNITS[unit])
    if value <= 0:
        raise ConfigError(f"a size must be positive, got {text!r}")
    return value


@dataclass(frozen=True, slots=True)
class Limits:
    """Resource limits for one run inside a sandbox.

    Each field carries its unit in its name. How each limit is enforced on this host
    (cgroup v2, cgroup v1, rlimit, or not at all) is reported in every
    :class:`execgym.sandbox.RunResult` under ``enforcement``.

    Args:
        wall_time_s: Wall-clock budget in seconds; the whole process tree is killed when
            it is spent, sleeping or not.
        cpu_time_s: CPU budget in seconds (user + system), summed over every process of
            the run where a cgroup measures it, per process otherwise.
        memory_bytes: Most memory the run may use, in bytes (cgroup ``memory.max`` or
            ``memory.limit_in_bytes``; ``RLIMIT_AS`` per process as the fallback).
        max_processes: Most processes and threads alive at once.
        max_output_bytes: Bytes allowed on each of stdout and stderr; past it the run is
            killed and reported as over its output limit.
        max_file_bytes: Largest file the program may write (``RLIMIT_FSIZE``), in bytes.
        disk_bytes: Size of the private writable tmpfs work dir (and ``/tmp``), in bytes.
        max_open_files: Most file descriptors open at once per process (``RLIMIT_NOFILE``).
        network: ``"none"`` (default: an empty network namespace) or ``"loopback"``
            (a private loopback interface only; the host is never reachable).

    Raises:
        ConfigError: if a numeric limit is zero or negative, above its maximum
            (:data:`MAX_SECONDS` for times, :data:`MAX_BYTES` for bytes,
            :data:`MAX_COUNT` for counts), or ``network`` is unknown.
    """

    wall_time_s: float = 10.0
    cpu_time_s: float = 10.0
    memory_bytes: int = 512 * MiB
    max_processes: int = 64
    max_output_bytes: int = 1 * MiB
    max_file_bytes: int = 16 * MiB
    disk_bytes: int = 64 * MiB
    max_open_files: int = 256
    network: Literal["none", "loopback"] = "none"

    def __post_init__(self) -> None:
        for field in fields(self):
            if field.name == "network":
                continue
            value = getattr(self, field.name)
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or value <= 0
            ):
                raise ConfigError(
                    f"Limits.{field.name} must be a positive, finite number, got {value!r}"
                )
            if value > limit_maximum(field.name):
                raise ConfigError(
                    f"Limits.{field.name} must be at most {limit_maximum(field.name)}, "
                    f"got {value!r}: give a smaller limit"
                )
        if self.network not in ("none", "loopback"):
            raise ConfigError(f"Limits.network must be 'none' or 'loopback', got {self.network!r}")

    def merged(self, **overrides: object) -> Limits:
        """Return a copy with the given fields replaced; ``None`` values are ignored.

        Raises:
            ConfigError: if a field name is unknown or a value is invalid.
        """
        known = {field.name for field in fields(self)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ConfigError(f"unknown limit(s) {unknown}; known limits are {sorted(known)}")
        changes = {key: value for key, value in overrides.items() if value is not None}
        return replace(self, **changes)  # type: ignore[arg-type]


DEFAULT_LIMITS = Limits()
"""The limits used when neither the run, the task nor the caller sets any."""
