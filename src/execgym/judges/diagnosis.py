"""What the diagnostics found about one rollout: :class:`Diagnostics` and its JSON form.

It lives with the judges because it is evidence about a rollout, as a
:class:`~execgym.judges.base.Judgement` is (which carries it); the diagnostics that
produce it are :mod:`execgym.diagnostics`.

One object per rollout, ``diagnostics`` in each results line (and in the HTTP API's and
the trainer adapters' results). Each check has a :class:`Section` whose ``status`` says
whether it was ``measured``, ``not_applicable`` (the task or language has nothing to
measure it with: no sizes, no reference, a language without a leak checker) or
``failed``; a failure says whose ``fault`` it was, by :mod:`execgym.judges.masking`'s rule: a
diagnostic the rollout's code broke (it crashed, hung, killed the harness, broke the
protocol) is the ``rollout``'s, and its reward component is 0, never ``None``; only a
failure the host provably caused (the harness never started) is the ``host``'s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from execgym.tasks.models import Task

CHECKS = ("leaks", "hotspots", "complexity")
"""The diagnostics, in the order they run."""


def checks_for(task: Task, checks: tuple[str, ...] | None) -> tuple[str, ...]:
    """The checks a rollout of ``task`` gets (empty: none).

    Args:
        task: The task; its ``diagnose.checks`` count when ``checks`` is ``None``.
        checks: The run's checks (``--diagnose``), which override every task's.
    """
    if checks is not None:
        return checks
    return tuple(task.diagnose.checks) if task.diagnose is not None else ()


Status = Literal["measured", "not_applicable", "failed"]


@dataclass(frozen=True, slots=True)
class Where:
    """A place in the model's code: ``file`` and 1-based ``line``, its ``function`` and text."""

    file: str
    line: int | None
    function: str = ""
    code: str = ""

    def to_json(self) -> dict[str, Any]:
        """``{"file", "line", "function", "code"}``."""
        return {"file": self.file, "line": self.line, "function": self.function, "code": self.code}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Where:
        """The inverse of :meth:`to_json`."""
        return cls(data["file"], data.get("line"), data.get("function", ""), data.get("code", ""))


@dataclass(frozen=True, slots=True)
class Leak:
    """One leak: what grows, where it is made, and how much per call of the entry point.

    Attributes:
        kind: ``memory`` (traced Python allocations), ``descriptor``, ``thread``,
            ``process`` (child processes, zombies included), ``cycle`` (objects with
            ``__del__`` that only the cycle collector frees), ``resident`` (resident
            memory growth no traced allocation explains) or ``native`` (C/C++ memory
            never freed, from valgrind).
        where: The model's line that allocates or opens it (``line`` ``None`` if unknown).
        what: For humans (``"list growing by 56 B per call"``, ``"socket:[1234]"``).
        per_call: Growth per call of the entry point, in ``unit``; ``None`` where calls
            are not counted (a C/C++ program's whole run).
        total: Growth over the measured calls (or the whole run), in ``unit``.
        unit: ``bytes``, ``descriptors``, ``threads``, ``processes`` or ``objects``.
    """

    kind: str
    where: Where
    what: str
    per_call: float | None
    total: float
    unit: str

    def to_json(self) -> dict[str, Any]:
        """The leak as one JSON object."""
        return {
            "kind": self.kind,
            "where": self.where.to_json(),
            "what": self.what,
            "per_call": None if self.per_call is None else round(self.per_call, 3),
            "total": round(self.total, 3),
            "unit": self.unit,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Leak:
        """The inverse of :meth:`to_json`."""
        return cls(
            data["kind"], Where.from_json(data["where"]), data["what"], data.get("per_call"),
            data["total"], data["unit"],
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class Section:
    """One check's outcome.

    Attributes:
        status: ``measured``, ``not_applicable`` or ``failed``.
        reason: Why it was not measured or failed; what was measured otherwise.
        fault: For ``failed``: ``rollout`` (the model's code broke it: its component
            scores 0) or ``host`` (ours: its component is left out).
        tool: What measured it (``tracemalloc+/proc``, ``valgrind memcheck``, ``cProfile``...).
        data: The check's own findings (see :class:`Diagnostics`).
    """

    status: Status
    reason: str = ""
    fault: Literal["rollout", "host"] | None = None
    tool: str = ""
    data: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """``{"status", "reason", "fault", "tool", **data}``."""
        return {
            "status": self.status,
            "reason": self.reason,
            "fault": self.fault,
            "tool": self.tool,
            **self.data,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Section:
        """The inverse of :meth:`to_json`."""
        rest = {k: v for k, v in data.items() if k not in ("status", "reason", "fault", "tool")}
        return cls(
            data["status"], data.get("reason", ""), data.get("fault"), data.get("tool", ""), rest
        )


@dataclass(frozen=True, slots=True)
class Diagnostics:
    """The diagnostics of one rollout (the ``diagnostics`` object of a results line).

    Attributes:
        leaks: ``data["found"]``: a list of :class:`Leak` objects (as JSON), empty when
            none grew; ``data["calls"]``: calls of the entry point measured.
        hotspots: ``data["functions"]``: the model's functions by share of profiled
            time (``self_share``: own time plus the builtins it calls directly;
            ``cum_share``: with its callees), ``data["lines"]``: the model's lines by
            share of CPU samples.
        complexity: ``data["model"]`` and ``data["reference"]``: each the fitted class
            (``O(n)``...), the log-log slope and the measured ``points`` ``[n, s]``.
        seconds: Wall seconds the diagnostics took (all their sandbox runs).
    """

    leaks: Section | None = None
    hotspots: Section | None = None
    complexity: Section | None = None
    seconds: float = 0.0

    @property
    def leak_list(self) -> list[Leak]:
        """The leaks found (empty when none, or when leaks were not measured)."""
        if self.leaks is None or self.leaks.status != "measured":
            return []
        return [Leak.from_json(item) for item in self.leaks.data.get("found", [])]

    def to_json(self) -> dict[str, Any]:
        """The ``diagnostics`` object: a key per check that ran, and ``seconds``."""
        out: dict[str, Any] = {}
        for name in CHECKS:
            section = getattr(self, name)
            if section is not None:
                out[name] = section.to_json()
        out["seconds"] = round(self.seconds, 4)
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Diagnostics:
        """The inverse of :meth:`to_json`.

        Raises:
            KeyError, TypeError: if ``data`` is not a ``diagnostics`` object.
        """
        sections = {n: Section.from_json(data[n]) for n in CHECKS if data.get(n) is not None}
        return cls(**sections, seconds=float(data.get("seconds", 0.0)))
