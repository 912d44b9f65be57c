"""The reward specification: weighted components, from TOML or as Python objects.

A spec is a list of components, each with a ``kind``, a ``weight`` and its own options,
plus ``gate``. The same spec in TOML and in Python::

    gate = "passed"                         # RewardSpec(gate="passed", components=(
    [[component]]                           #     Correctness(weight=0.6, mode="fraction"),
    kind = "correctness"                    #     Static(weight=0.2),
    weight = 0.6                            #     Penalty(max_chars=4000),
    mode = "fraction"                       # ))
    [[component]]
    kind = "static"
    weight = 0.2
    [[component]]
    kind = "penalty"
    max_chars = 4000

How they combine (see :func:`execgym.reward.combine.combine`): the score is the
weighted mean of the applicable components (each in [0, 1]), times ``1 - penalty``
for each penalty component, so it is always in [0, 1]. With ``gate = "passed"``,
every component but correctness scores 0 unless the rollout passed: clean style never
pays for wrong code. A ``tampered`` verdict scores 0 whatever the spec; ``sandbox_error``
and ``invalid`` have no reward (``None``: masked).

Presets: ``binary`` (correctness, all or nothing), ``fraction`` (correctness, fraction
of cases), ``quality`` (fraction 0.6, static 0.1, complexity 0.1, security 0.1,
efficiency 0.1, leak 0.1, scaling 0.1, gated on passing; leak and scaling apply only
where diagnostics ran, see docs/diagnostics.md, and are left out of the weights
elsewhere, so without diagnostics ``quality`` scores as before).
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ImportString, ValidationError

from execgym.errors import ConfigError

_MODEL = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class Correctness(BaseModel):
    """Tests passed. Range [0, 1].

    ``all_or_nothing``: 1 if every test passed, else 0. ``fraction``: passing cases /
    cases, where a case is one top-level statement of ``check`` that asserts (the
    judge runs them all, past failures); 0 when no test report came back (a crash,
    a timeout).
    """

    model_config = _MODEL
    kind: Literal["correctness"] = "correctness"
    weight: float = Field(default=1.0, ge=0)
    mode: Literal["all_or_nothing", "fraction"] = "all_or_nothing"


class Static(BaseModel):
    """Static analysis of the program as text (ruff). Range [0, 1].

    0 if the program does not parse; else ``max(0, 1 - d / max_findings_per_line)``
    where ``d`` = ruff findings / logical lines of the model's code (statements;
    comments, docstrings, blank lines and ``pass`` are not counted), with the rules in
    ``select``.
    """

    model_config = _MODEL
    kind: Literal["static"] = "static"
    weight: float = Field(default=1.0, ge=0)
    max_findings_per_line: float = Field(default=0.2, gt=0)
    select: tuple[str, ...] = ("E", "W", "F", "B", "SIM", "C4", "UP")
    ignore: tuple[str, ...] = ("E501", "W291", "W292", "W293")


class Complexity(BaseModel):
    """Cyclomatic complexity and maintainability index (radon). Range [0, 1].

    ``0.5 * clamp((cc_max - cc) / (cc_max - cc_ok)) + 0.5 * mi / 100``, where ``cc`` is
    the mean cyclomatic complexity of the program's functions and ``mi`` its
    maintainability index (0-100, radon's ``mi_compute`` with the comment term at 0 %:
    a share of comment lines raises radon's index, and padding can buy it); 0 if it
    does not parse.
    """

    model_config = _MODEL
    kind: Literal["complexity"] = "complexity"
    weight: float = Field(default=1.0, ge=0)
    cc_ok: float = Field(default=5.0, ge=1)
    cc_max: float = Field(default=20.0, ge=2)


class Security(BaseModel):
    """Security findings (bandit) weighted by severity. Range [0, 1].

    ``max(0, 1 - (low * n_low + medium * n_medium + high * n_high) / budget)``; the
    tests in ``skip`` are not run (``B101``: ``assert``, which tests use on purpose).
    """

    model_config = _MODEL
    kind: Literal["security"] = "security"
    weight: float = Field(default=1.0, ge=0)
    low: float = Field(default=1.0, ge=0)
    medium: float = Field(default=3.0, ge=0)
    high: float = Field(default=9.0, ge=0)
    budget: float = Field(default=10.0, gt=0)
    skip: tuple[str, ...] = ("B101",)


class Efficiency(BaseModel):
    """CPU time and peak memory relative to the reference, measured in the same run.

    ``0.5 * min(1, t_ref / t) + 0.5 * min(1, m_ref / m)`` with CPU seconds floored at
    ``min_cpu_s`` (timer noise) and peak resident memory from ``wait4``, each of the
    solution's (and the reference's) whole process tree: the processes it left behind,
    zombies and orphans, are reaped by the harness and added (CPU summed, peaks summed
    as an upper bound), so work done in a child that is never reaped is charged too;
    measured this way with or without a cgroup. Range [0, 1]; not applicable (left out
    of the weights) for a task without a reference.
    """

    model_config = _MODEL
    kind: Literal["efficiency"] = "efficiency"
    weight: float = Field(default=1.0, ge=0)
    min_cpu_s: float = Field(default=0.002, gt=0)


class Leak(BaseModel):
    """No leak per call: 1 if the leak finder found none, else 0 (docs/diagnostics.md).

    Reads the rollout's ``diagnostics.leaks`` (run only when the task's ``diagnose`` or
    the run's ``--diagnose`` asks for ``leaks``). A leak is memory that grows by at
    least ``min_bytes_per_call`` bytes per call in both halves of the measurement, or
    any descriptor, thread, child process or ``__del__`` cycle that does (Python), or a
    block never freed whose allocation stack is in the model's code (C/C++, valgrind).
    Not applicable (left out of the weights) when leaks were not diagnosed, or when
    the host failed to run the diagnostic; 0 when the model's code broke it (it
    crashed, hung, or broke the harness's protocol): never ``None`` for that.
    """

    model_config = _MODEL
    kind: Literal["leak"] = "leak"
    weight: float = Field(default=1.0, ge=0)


class Scaling(BaseModel):
    """Run-time growth against the reference's: the fitted complexity classes' ranks.

    ``1`` if ``rank(model) <= rank(reference)``, else
    ``max(0, 1 - (rank(model) - rank(reference)) / classes_to_zero)``, the ranks being
    the positions of the fitted classes in O(1), O(log n), O(n), O(n log n), O(n^2),
    O(n^3) (:mod:`execgym.diagnostics.fit`). With the default ``classes_to_zero = 2``,
    O(n log n) against an O(n) reference scores 0.5 and O(n^2) scores 0. 0 if the
    model's answers at the timed sizes differ from the reference's, or its code broke
    the measurement; not applicable without ``diagnose.sizes`` or a reference.
    """

    model_config = _MODEL
    kind: Literal["scaling"] = "scaling"
    weight: float = Field(default=1.0, ge=0)
    classes_to_zero: float = Field(default=2.0, gt=0)


class Coverage(BaseModel):
    """For tasks where the model writes tests: their coverage of the reference code.

    The completion is test code (top-level asserts or ``test_*`` functions calling the
    entry point); it runs against the task's reference in the sandbox, the reference
    under coverage.py in a process the tests cannot reach (see
    :mod:`execgym.reward.coverage`). ``(line + branch) / 2`` of the reference's
    statements and branch arcs, or 0 if the tests fail on the reference (a test that
    fails on correct code is wrong). Range [0, 1]. With this component, correctness
    means "the tests run through on the reference".
    """

    model_config = _MODEL
    kind: Literal["coverage"] = "coverage"
    weight: float = Field(default=1.0, ge=0)


class Penalty(BaseModel):
    """A length or format penalty, applied as ``score * (1 - weight * p)``.

    ``p`` in [0, 1] comes from ``function(completion, task)`` (a callable, or an import
    path ``"package.module:function"``; it gets the text, never runs it), or, without a
    function, from the length: ``clamp((len(completion) - max_chars) / max_chars)``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)
    kind: Literal["penalty"] = "penalty"
    weight: float = Field(default=1.0, ge=0, le=1)
    function: ImportString[Callable[..., float]] | None = None
    max_chars: int | None = Field(default=None, gt=0)


Component = Annotated[
    Correctness | Static | Complexity | Security | Efficiency | Leak | Scaling | Coverage | Penalty,
    Field(discriminator="kind"),
]


class RewardSpec(BaseModel):
    """A reward: components and how they combine (see the module docstring).

    Raises:
        pydantic.ValidationError: on unknown kinds or options, or all-zero weights.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str = "custom"
    gate: Literal["passed", "none"] = "none"
    components: tuple[Component, ...] = Field(min_length=1)

    @property
    def needs_cases(self) -> bool:
        """Whether a component wants the fraction of cases passed."""
        return any(isinstance(c, Correctness) and c.mode == "fraction" for c in self.components)

    @property
    def needs_coverage(self) -> bool:
        """Whether the completions are tests, measured by their coverage of the reference."""
        return any(isinstance(c, Coverage) for c in self.components)

    @property
    def needs_reference(self) -> bool:
        """Whether a component measures the candidate against the reference."""
        return any(isinstance(c, Efficiency) for c in self.components)


PRESETS: dict[str, RewardSpec] = {
    "binary": RewardSpec(name="binary", components=(Correctness(),)),
    "fraction": RewardSpec(name="fraction", components=(Correctness(mode="fraction"),)),
    "quality": RewardSpec(
        name="quality",
        gate="passed",
        components=(
            Correctness(weight=0.6, mode="fraction"),
            Static(weight=0.1),
            Complexity(weight=0.1),
            Security(weight=0.1),
            Efficiency(weight=0.1),
            Leak(weight=0.1),
            Scaling(weight=0.1),
        ),
    ),
}
"""The built-in specs, by name."""


def _describe(error: ValidationError) -> str:
    errors = error.errors()
    if len(errors) > 1:  # a bad component also leaves the tuple "too short": noise
        errors = [e for e in errors if e["type"] != "too_short"] or errors
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'spec'}: {e['msg']}" for e in errors)


def parse_spec(data: dict[str, Any], *, source: str = "reward spec") -> RewardSpec:
    """A :class:`RewardSpec` from a mapping (parsed TOML or JSON).

    Raises:
        ConfigError: naming the bad field and what is wrong with it.
    """
    data = dict(data)
    if "component" in data:  # TOML's [[component]] tables
        data["components"] = data.pop("component")
    try:
        spec = RewardSpec.model_validate(data)
    except ValidationError as error:
        raise ConfigError(f"{source}: {_describe(error)}") from error
    if sum(c.weight for c in spec.components if not isinstance(c, Penalty)) <= 0:
        raise ConfigError(f"{source}: every component has weight 0; give one a weight > 0")
    return spec


def load_spec(name_or_path: str | Path) -> RewardSpec:
    """A preset by name (``binary``, ``fraction``, ``quality``) or a TOML file.

    Raises:
        ConfigError: for an unknown preset, an unreadable file or an invalid spec.
    """
    if str(name_or_path) in PRESETS:
        return PRESETS[str(name_or_path)]
    path = Path(name_or_path)
    if path.suffix != ".toml":
        raise ConfigError(
            f"unknown reward {str(name_or_path)!r}: give a preset ({', '.join(PRESETS)}) "
            "or a .toml file"
        )
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ConfigError(f"cannot read reward spec {path}: {error.strerror}") from error
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"reward spec {path} is not valid TOML: {error}") from error
    data.setdefault("name", path.stem)
    return parse_spec(data, source=str(path))
