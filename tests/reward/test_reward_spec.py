"""Reward specs: TOML and Python give the same spec; bad specs are clear errors."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from execgym.errors import ConfigError
from execgym.reward import (
    PRESETS,
    Correctness,
    Efficiency,
    Penalty,
    RewardSpec,
    Static,
    load_spec,
    parse_spec,
)

TOML = """
gate = "passed"
[[component]]
kind = "correctness"
weight = 0.6
mode = "fraction"
[[component]]
kind = "static"
weight = 0.2
[[component]]
kind = "efficiency"
weight = 0.2
[[component]]
kind = "penalty"
max_chars = 4000
"""


def test_toml_and_python_give_the_same_spec(tmp_path: Path) -> None:
    path = tmp_path / "mine.toml"
    path.write_text(TOML)
    python = RewardSpec(
        name="mine",
        gate="passed",
        components=(
            Correctness(weight=0.6, mode="fraction"),
            Static(weight=0.2),
            Efficiency(weight=0.2),
            Penalty(max_chars=4000),
        ),
    )
    assert load_spec(path) == python
    assert python.needs_cases
    assert python.needs_reference


def test_presets_by_name() -> None:
    assert set(PRESETS) == {"binary", "fraction", "quality"}
    assert load_spec("binary").components == (Correctness(),)
    assert not load_spec("binary").needs_cases
    assert load_spec("quality").gate == "passed"


@pytest.mark.parametrize(
    ("data", "says"),
    [
        ({"component": [{"kind": "nope"}]}, "does not match any of the expected tags"),
        ({"component": [{"kind": "static", "weight": -1}]}, "components.0.static.weight"),
        ({"component": [{"kind": "static", "weight": 0}]}, "every component has weight 0"),
        ({"component": [{"kind": "correctness", "modes": "x"}]}, "modes"),
        ({"component": []}, "at least 1"),
        ({"component": [{"kind": "penalty", "function": "no.such.module:f"}]}, "function"),
    ],
)
def test_bad_specs_name_what_is_wrong(data: dict[str, object], says: str) -> None:
    with pytest.raises(ConfigError, match="reward spec") as caught:
        parse_spec(data)
    assert says in str(caught.value)


def test_unknown_preset_and_bad_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="binary, fraction, quality"):
        load_spec("qualty")
    with pytest.raises(ConfigError, match="cannot read"):
        load_spec(tmp_path / "missing.toml")
    broken = tmp_path / "broken.toml"
    broken.write_text("[[component]\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_spec(broken)


def test_penalty_function_by_import_path() -> None:
    spec = parse_spec(
        {"component": [{"kind": "correctness"}, {"kind": "penalty", "function": "os.path:getsize"}]}
    )
    assert spec.components[1].function is os.path.getsize  # type: ignore[union-attr]
