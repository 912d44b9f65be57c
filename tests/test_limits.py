from __future__ import annotations

import pytest

from execgym.errors import ConfigError
from execgym.limits import (
    DEFAULT_LIMITS,
    MAX_SECONDS,
    MIN_MEMORY_BYTES,
    GiB,
    Limits,
    MiB,
    limit_maximum,
    parse_size,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("4096", 4096),
        (4096, 4096),
        ("512MiB", 512 * MiB),
        ("2GiB", 2 * GiB),
        ("1.5G", int(1.5 * GiB)),
        ("256m", 256 * MiB),
        ("1MB", 1_000_000),
        (" 3 KiB ", 3072),
    ],
)
def test_parse_size_reads_units(text: str | int, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "abc", "12XB", "-5", "0", "1e9", "MiB"])
def test_parse_size_rejects_junk_with_a_hint(text: str) -> None:
    with pytest.raises(ConfigError, match="size"):
        parse_size(text)


def test_limits_reject_non_positive_values() -> None:
    with pytest.raises(ConfigError, match="wall_time_s"):
        Limits(wall_time_s=0)
    with pytest.raises(ConfigError, match="memory_bytes"):
        Limits(memory_bytes=-1)
    with pytest.raises(ConfigError, match="network"):
        Limits(network="internet")  # type: ignore[arg-type]


def test_merged_ignores_none_and_rejects_unknown_fields() -> None:
    merged = DEFAULT_LIMITS.merged(wall_time_s=3.0, memory_bytes=None)
    assert merged.wall_time_s == 3.0
    assert merged.memory_bytes == DEFAULT_LIMITS.memory_bytes
    with pytest.raises(ConfigError, match="unknown limit"):
        DEFAULT_LIMITS.merged(memory_mb=5)


def test_limits_reject_infinite_and_nan() -> None:
    for bad in (float("inf"), float("nan")):
        with pytest.raises(ConfigError, match="finite"):
            Limits(wall_time_s=bad)


def test_task_limits_reject_infinite_values() -> None:
    from pydantic import ValidationError

    from execgym.tasks import TaskLimits

    with pytest.raises(ValidationError):
        TaskLimits(wall_time_s=float("inf"))


def test_parse_size_knows_tebibytes() -> None:
    assert parse_size("1TiB") == 1024 * GiB


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("wall_time_s", 1e19),
        ("cpu_time_s", 1e300),
        ("memory_bytes", 2**63),
        ("max_output_bytes", 2**62 + 1),
        ("max_processes", 2**31 + 1),
        ("max_open_files", 2**40),
    ],
)
def test_limits_reject_absurd_values_with_their_maximum(field: str, value: float) -> None:
    with pytest.raises(ConfigError, match=f"{field} must be at most"):
        Limits(**{field: value})
    assert getattr(Limits(**{field: limit_maximum(field)}), field) == limit_maximum(field)


def test_task_limits_have_the_command_lines_bounds() -> None:
    from pydantic import ValidationError

    from execgym.tasks import TaskLimits

    assert TaskLimits(memory_bytes=MIN_MEMORY_BYTES).memory_bytes == 16 * MiB
    for bad in ({"memory_bytes": 10}, {"wall_time_s": 1e19}, {"max_processes": 2**31 + 1}):
        with pytest.raises(ValidationError):
            TaskLimits.model_validate(bad)
    assert MAX_SECONDS == 86400
