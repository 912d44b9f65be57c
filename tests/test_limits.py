from __future__ import annotations

import pytest

from execgym.errors import ConfigError
from execgym.limits import DEFAULT_LIMITS, GiB, Limits, MiB, parse_size


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
