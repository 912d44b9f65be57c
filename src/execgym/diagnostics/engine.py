"""Run the diagnostics a rollout asks for, in its sandbox, under its limits.

:class:`Diagnoser` decides which checks apply (the run's ``--diagnose`` list, else the
task's ``diagnose`` field; none by default), runs them after the judge, and returns a
:class:`~execgym.judges.diagnosis.Diagnostics`. Python ``assert`` and
``function_call`` tasks get all three checks from one run of the guest harness
(:mod:`execgym.diagnostics.python`); C and C++ get ``leaks`` from valgrind
(:mod:`execgym.diagnostics.native`); every other language and kind gets
``not_applicable`` with the reason. The reference's timing for ``complexity`` is
measured once per task and process, under the same limits.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable

from execgym.diagnostics.fit import fit_class
from execgym.diagnostics.leaks import DEFAULT_THRESHOLDS, Thresholds
from execgym.diagnostics.native import LANGUAGES, native_leaks
from execgym.diagnostics.python import PythonRun, run_python
from execgym.errors import ConfigError, Error
from execgym.judges.base import Judgement, Verdict
from execgym.judges.compile import Builder
from execgym.judges.diagnosis import CHECKS, Diagnostics, Section, checks_for
from execgym.limits import Limits
from execgym.sandbox.base import Sandbox
from execgym.tasks.models import Task

PYTHON_KINDS = ("assert", "function_call")


def parse_checks(text: str) -> tuple[str, ...]:
    """``"leaks,hotspots"`` -> ``("leaks", "hotspots")``, in :data:`CHECKS` order.

    Raises:
        ConfigError: naming an unknown check and the known ones.
    """
    names = {part.strip() for part in text.split(",") if part.strip()}
    unknown = sorted(names - set(CHECKS))
    if unknown or not names:
        raise ConfigError(
            f"--diagnose {text!r}: unknown check(s) {', '.join(unknown) or '(none given)'}; "
            f"give a comma-separated list of {', '.join(CHECKS)}"
        )
    return tuple(c for c in CHECKS if c in names)


class Diagnoser:
    """Runs diagnostics for rollouts (see the module docstring).

    Args:
        checks: The checks for every task (the run's ``--diagnose``); ``None`` takes each
            task's ``diagnose.checks`` (no diagnostics for a task without the field).
        builder: Compiles C/C++ debug builds: a
            :class:`~execgym.judges.compile.Builder`, or a function giving one when
            first needed (the judges' own, made lazily); default: a new one.
        thresholds: When growth counts as a leak.
    """

    def __init__(
        self,
        checks: tuple[str, ...] | None = None,
        *,
        builder: Builder | Callable[[], Builder] | None = None,
        thresholds: Thresholds = DEFAULT_THRESHOLDS,
    ) -> None:
        self.checks = checks
        self._builder = builder
        self.thresholds = thresholds
        self._references: dict[str, asyncio.Future[PythonRun]] = {}

    @property
    def builder(self) -> Builder:
        """The builder of C/C++ debug builds (made, or asked for, on first use)."""
        if not isinstance(self._builder, Builder):
            self._builder = self._builder() if self._builder is not None else Builder()
        return self._builder

    def checks_for(self, task: Task) -> tuple[str, ...]:
        """The checks a rollout of ``task`` gets (empty: none; see :func:`checks_for`)."""
        return checks_for(task, self.checks)

    async def diagnose(
        self,
        task: Task,
        completion: str,
        sandbox: Sandbox,
        limits: Limits,
        judgement: Judgement,
    ) -> Diagnostics | None:
        """The diagnostics of one judged rollout, or ``None`` if it gets none.

        Only a rollout that passed is diagnosed (the others' reward components are
        gated to 0 anyway); its sections then say ``not_applicable``. Never raises for
        what the rollout does; a failure of the sandbox itself is a ``failed`` section
        with ``fault="host"``.
        """
        checks = self.checks_for(task)
        if not checks:
            return None
        started = time.perf_counter()
        if judgement.verdict is not Verdict.PASSED:
            skipped = Section(
                "not_applicable", f"not run: the rollout is {judgement.verdict.value}"
            )
            return _diagnostics(dict.fromkeys(checks, skipped), 0.0)
        try:
            sections = await self._sections(task, completion, sandbox, limits, checks)
        except Error as error:  # the sandbox could not run at all: ours
            failed = Section("failed", f"{type(error).__name__}: {error}"[:500], "host")
            sections = dict.fromkeys(checks, failed)
        return _diagnostics(sections, time.perf_counter() - started)

    async def _sections(
        self, task: Task, completion: str, sandbox: Sandbox, limits: Limits, checks: tuple[str, ...]
    ) -> dict[str, Section]:
        if task.language in LANGUAGES and task.kind in ("assert", "stdio"):
            out = {
                c: Section("not_applicable", "hot spots and complexity: Python only")
                for c in checks
            }
            if "leaks" in checks:
                out["leaks"] = await native_leaks(task, completion, sandbox, limits, self.builder)
            return out
        if task.language != "python" or task.kind not in PYTHON_KINDS:
            why = (
                f"no diagnostics for {task.language} {task.kind} tasks "
                "(Python assert/function_call; C/C++ leaks only)"
            )
            return {c: Section("not_applicable", why) for c in checks}
        python_checks = checks
        no_sizes = task.diagnose is None or not task.diagnose.sizes
        if "complexity" in checks and (no_sizes or task.reference is None):
            python_checks = tuple(c for c in checks if c != "complexity")
        out = {}
        model: PythonRun | None = None
        if python_checks:
            model = await run_python(
                task, completion, sandbox, limits, python_checks, thresholds=self.thresholds
            )
            out.update(model.sections)
        if "complexity" in checks:
            if no_sizes:
                out["complexity"] = Section("not_applicable", "the task gives no diagnose.sizes")
            elif task.reference is None:
                out["complexity"] = Section("not_applicable", "the task has no reference")
            elif model is not None and model.sections["complexity"].status == "measured":
                reference = await self._reference(task, sandbox, limits)
                out["complexity"] = compare(model, reference)
        return out

    async def _reference(self, task: Task, sandbox: Sandbox, limits: Limits) -> PythonRun:
        if task.reference is None or task.diagnose is None:
            raise ValueError("_reference: the task has no reference or no diagnose field")
        key = hashlib.sha256(
            repr((task.task_id, task.prompt, task.reference, task.diagnose, limits)).encode()
        ).hexdigest()
        future = self._references.get(key)
        if future is None:
            future = asyncio.get_running_loop().create_future()
            self._references[key] = future
            try:
                run = await run_python(task, task.reference, sandbox, limits, ("complexity",))
            except BaseException as error:
                del self._references[key]
                future.set_exception(error)
                future.exception()  # retrieved: the caller re-raises it
                raise
            future.set_result(run)
        return await asyncio.shield(future)


def _diagnostics(sections: dict[str, Section], seconds: float) -> Diagnostics:
    return Diagnostics(
        leaks=sections.get("leaks"),
        hotspots=sections.get("hotspots"),
        complexity=sections.get("complexity"),
        seconds=seconds,
    )


def _fit_json(points: list[tuple[int, float]]) -> dict[str, object]:
    fit = fit_class([n for n, _ in points], [max(s, 1e-9) for _, s in points])
    return {
        "class": fit.name,
        "rank": fit.rank,
        "slope": round(fit.slope, 3),
        "points": [[n, round(s, 9)] for n, s in points],
    }


def compare(model: PythonRun, reference: PythonRun) -> Section:
    """The ``complexity`` section: both fits, if the model's answers match the reference's."""
    ref_section = reference.sections["complexity"]
    if ref_section.status != "measured":
        return Section("not_applicable", f"the reference could not be timed: {ref_section.reason}")
    for (n, _), mine, theirs in zip(model.points, model.answers, reference.answers, strict=False):
        if mine != theirs:
            return Section(
                "failed", f"the answer at n={n} differs from the reference's", "rollout",
                tool="CPU time read by the harness",
            )  # fmt: skip
    mine_json, ref_json = _fit_json(model.points), _fit_json(reference.points)
    reason = f"model {mine_json['class']}, reference {ref_json['class']}"
    tool = "CPU time read by the harness (schedstat); big_O-style least squares"
    return Section("measured", reason, tool=tool, data={"model": mine_json, "reference": ref_json})
