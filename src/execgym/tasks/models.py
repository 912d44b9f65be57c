"""Tasks and rollouts as they arrive in JSONL files (validated with pydantic).

A task says how its rollouts are judged by its test ``kind``:

- ``assert`` (the default, HumanEval/MBPP style): ``prompt + completion + tests``; in
  Python the tests define ``check(candidate)``, elsewhere they are a ``main`` that
  asserts (HumanEval-X style) and a pass is exit code 0.
- ``stdio`` (APPS, CodeContests, TACO, Codeforces style): the program runs once per
  ``test_cases`` item with its ``input`` on stdin; its stdout is compared with
  ``output`` under ``comparison``, or judged by the task's ``checker`` program.
- ``function_call`` (LiveCodeBench, TACO ``fn_name``, LeetCode style): ``fn_name`` is
  called with each case's JSON ``args``/``kwargs``; the result comes back as JSON and
  is compared with ``expected`` outside the sandbox.
- ``pytest``: the task ships ``test_files``; the completion is written to
  ``solution_path`` (and a rollout may add more ``files``); every test's outcome is
  kept.
- ``unittest`` (BigCodeBench style): ``solution_prefix + completion + tests`` is one
  module whose ``unittest.TestCase`` class ``TestCases`` runs in the solution's own
  process, so the tests see the real objects it returns; every test's outcome is kept.
- ``swe`` (SWE-bench style, :mod:`execgym.tasks.swe`): the completion is a patch to a
  repository snapshot; resolved when every ``FAIL_TO_PASS`` and ``PASS_TO_PASS`` test
  passes with the hidden ``test_patch`` applied after it (:mod:`execgym.episodes.swe`).

The published JSON Schema (``schemas/task.schema.json``) is generated from these
models by ``python -m execgym.tasks.schema``.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from execgym.errors import ConfigError
from execgym.languages import LANGUAGES as _TABLE
from execgym.limits import MAX_BYTES, MAX_COUNT, MAX_SECONDS, MIN_MEMORY_BYTES, Limits
from execgym.tasks.swe import SweFields, is_instance, rollout_from_prediction, task_from_instance

LANGUAGES = tuple(name for name, language in _TABLE.items() if language.task_language)
"""Languages a task may name (whether a toolchain is present is checked when judging);
from the one language table, :data:`execgym.languages.LANGUAGES`."""

LANGUAGE_ALIASES = {alias: name for name in LANGUAGES for alias in _TABLE[name].aliases}
"""Other spellings accepted for :data:`LANGUAGES` (as in markdown fence tags)."""

TEST_KINDS = ("assert", "stdio", "function_call", "pytest", "unittest", "swe")
"""How a task's tests are run; see the module docstring."""

TestKind = Literal["assert", "stdio", "function_call", "pytest", "unittest", "swe"]


def normalize_language(value: str) -> str:
    """The canonical name of a language (``"C++"`` -> ``"cpp"``).

    Raises:
        ValueError: if the language is not one of :data:`LANGUAGES` or an alias.
    """
    name = value.strip().lower()
    name = LANGUAGE_ALIASES.get(name, name)
    if name not in LANGUAGES:
        raise ValueError(f"language {value!r} is not supported; use one of {LANGUAGES}")
    return name


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class TaskLimits(_Strict):
    """Optional per-task limits; any field left out keeps the run's limit.

    Field names and units are those of :class:`execgym.limits.Limits`, with the same
    bounds as the command line: times up to a day, ``memory_bytes`` at least 16 MiB
    (below it Python cannot start), bytes up to 2**62, counts up to 2**31. A task
    outside them is a bad line (skipped as invalid), not a batch of sandbox errors.
    """

    wall_time_s: float | None = Field(default=None, gt=0, le=MAX_SECONDS)
    cpu_time_s: float | None = Field(default=None, gt=0, le=MAX_SECONDS)
    memory_bytes: int | None = Field(default=None, ge=MIN_MEMORY_BYTES, le=MAX_BYTES)
    max_processes: int | None = Field(default=None, gt=0, le=MAX_COUNT)
    max_output_bytes: int | None = Field(default=None, gt=0, le=MAX_BYTES)
    max_file_bytes: int | None = Field(default=None, gt=0, le=MAX_BYTES)
    disk_bytes: int | None = Field(default=None, gt=0, le=MAX_BYTES)
    max_open_files: int | None = Field(default=None, gt=0, le=MAX_COUNT)


class Comparison(_Strict):
    """How a program's output is compared with the expected output.

    Attributes:
        mode: ``tokens`` (default): whitespace-separated tokens must match, so trailing
            spaces, line ends and trailing blank lines never matter, yet inner spaces
            are never deleted (``"1 23"`` differs from ``"1 2 3"``); ``exact``: byte for
            byte after decoding; ``lines``: line by line with trailing whitespace of each
            line and trailing blank lines ignored; ``unordered_lines``: as ``lines`` but
            in any order.
        case_insensitive: Compare letters without regard to case.
        float_abs_tol: Tokens that both parse as numbers match when they differ by at
            most this much (absolute error); other tokens still match exactly.
        float_rel_tol: As ``float_abs_tol``, relative to the expected value; a number
            matches when either tolerance accepts it. With neither set, numbers are
            compared as text (a task without a declared tolerance keeps exact matching).
    """

    mode: Literal["tokens", "exact", "lines", "unordered_lines"] = "tokens"
    case_insensitive: bool = False
    float_abs_tol: float | None = Field(default=None, ge=0)
    float_rel_tol: float | None = Field(default=None, ge=0)


class StdioCase(_Strict):
    """One stdin/stdout case: the program reads ``input`` and must print ``output``."""

    input: str = ""
    output: str


class FunctionCase(_Strict):
    """One function-call case: ``fn_name(*args, **kwargs)`` must return ``expected``.

    ``args``, ``kwargs`` and ``expected`` are plain JSON values; a result is compared
    after it is turned into JSON (tuples become lists), deeply, with the task's float
    tolerance.
    """

    args: list[Any] = Field(default_factory=list)
    kwargs: dict[str, Any] = Field(default_factory=dict)
    expected: Any


class Checker(_Strict):
    """A task's own program deciding whether an output is right (a "special judge").

    It runs in the sandbox with the files ``input.txt``, ``expected.txt`` and
    ``actual.txt`` in its work dir and answers with its exit code, read as testlib's
    ``TResult`` (``testlib.h``): 0 accepted; 1 wrong answer, 2 presentation error, 4
    (testlib's ``_dirt``), 7 (``_points``: partial, not accepted) and 8 (unexpected end
    of the output) are ``failed``; 3 (``_fail``), any other code, a crash, a timeout or
    an exception raised by a Python checker is the checker's own failure. Such a
    failure is then told apart (see :mod:`execgym.judges.stdio`): a checker that
    accepts the task's expected output failed because of the rollout's output, which is
    ``failed``; only one that fails on the expected output too is masked, as the task's
    fault (``invalid``).

    Attributes:
        language: The checker's language.
        source: Its source. A C++ checker may ``#include "testlib.h"``: execgym ships
            testlib (MIT), and compiles it next to the checker.
        interface: The order of its three arguments. ``"execgym"``: ``input.txt
            expected.txt actual.txt``; ``"testlib"``: ``input.txt actual.txt
            expected.txt`` (testlib's ``registerTestlibCmd``: input, participant's
            output, jury's answer). Unset: ``"testlib"`` when the source includes
            ``testlib.h``, else ``"execgym"``.
    """

    language: str = "python"
    source: str = Field(min_length=1)
    interface: Literal["execgym", "testlib"] | None = None

    @field_validator("language")
    @classmethod
    def _known_language(cls, value: str) -> str:
        return normalize_language(value)

    @property
    def argument_order(self) -> Literal["execgym", "testlib"]:
        """:attr:`interface`, or the one its source implies when unset."""
        if self.interface is not None:
            return self.interface
        return (
            "testlib" if re.search(r'#\s*include\s*[<"]testlib\.h[>"]', self.source) else "execgym"
        )


class Conventions(_Strict):
    """The conventions of contest judges a task's programs run under.

    Each can be changed per task (``"conventions": {...}`` in the task's line). Sources:
    AtCoder's language table (atcoder.jp/contests/abc262/rules: C++ 20 as ``g++-12
    -std=gnu++20 -O2 -DONLINE_JUDGE -DATCODER``, Java with ``-Xss{memory:mb}M`` and Node
    with ``--stack-size={memory:kb}``: the stack is the memory limit); DOMjudge at
    GCPC/NWERC (gcpc.nwerc.eu/system: ``g++ -std=gnu++2b ... -DONLINE_JUDGE``, ``gcc
    -std=gnu2x ... -DONLINE_JUDGE``, and "for C, C++, and Python, the stack and heap
    sizes are limited only by the total amount of memory available"); Kattis
    problemtools (github.com/Kattis/problemtools a185fe9741dd,
    ``problemtools/config/languages.yaml``: ``g++ -std=gnu++23``). All of them run
    Python with ``site`` and on versions before CPython 3.11's int digit limit.

    Attributes:
        python_exit: Python's ``exit()`` and ``quit()`` exist, as ``site`` defines them
            (the sandbox starts Python without ``site``, where they are a
            ``NameError``).
        python_int_max_str_digits: The limit on the digits of ``int``/``str``
            conversions (CPython 3.11's ``sys.set_int_max_str_digits``); 0 (default) is
            unlimited, as on the judges' Pythons; CPython's own default, 4300, makes
            printing a 5000-digit answer a ``ValueError``.
        c_std, cpp_std: ``-std=`` of C and C++ compiles; unset: the newest the host's
            compiler accepts among ``gnu23, gnu2x, gnu17, gnu11`` and ``gnu++23,
            gnu++2b, gnu++20, gnu++2a, gnu++17`` (on GCC 12: ``gnu2x`` and ``gnu++23``).
            One the compiler does not accept makes the task ``invalid``.
        online_judge: Define ``ONLINE_JUDGE`` in C and C++ (``-DONLINE_JUDGE``, as
            AtCoder and DOMjudge do), so a ``#ifndef ONLINE_JUDGE freopen(...)`` guard
            reads stdin, not a file.
        stack_bytes: The stack limit (``RLIMIT_STACK``) of compiled native programs (C,
            C++, Rust, Go) and of Node.js (with ``--stack-size`` 8 MiB below it, as
            AtCoder runs ``node --stack-size={memory:kb}``): ``"memory"`` (default) is
            the run's memory limit, so deep recursion is bounded by memory and not by
            the 8 MiB default (Node's ~1 MB); a number of bytes; or ``None`` for the
            defaults. Python threads are not
            changed: ``threading.stack_size`` is the program's to set, and its stack
            is memory like any other.
    """

    python_exit: bool = True
    python_int_max_str_digits: int = Field(default=0, ge=0, le=MAX_COUNT)
    c_std: str | None = Field(default=None, pattern=r"^[a-z0-9+]{1,16}$")
    cpp_std: str | None = Field(default=None, pattern=r"^[a-z0-9+]{1,16}$")
    online_judge: bool = True
    stack_bytes: Literal["memory"] | int | None = Field(default="memory")

    @field_validator("python_int_max_str_digits")
    @classmethod
    def _digits_python_accepts(cls, value: int) -> int:
        if 0 < value < 640:  # sys.set_int_max_str_digits refuses these
            raise ValueError("python_int_max_str_digits must be 0 (unlimited) or at least 640")
        return value

    @field_validator("stack_bytes")
    @classmethod
    def _stack_in_bounds(
        cls, value: Literal["memory"] | int | None
    ) -> Literal["memory"] | int | None:
        if isinstance(value, int) and not 64 * 1024 <= value <= MAX_BYTES:
            raise ValueError(f"stack_bytes must be between 65536 and {MAX_BYTES}, or 'memory'")
        return value


DEFAULT_CONVENTIONS = Conventions()
"""The conventions of a task that sets none."""


DiagnosticCheck = Literal["leaks", "hotspots", "complexity"]


class Diagnose(_Strict):
    r"""The diagnostics a task asks for (see docs/diagnostics.md); off when absent.

    ``"diagnose": {"checks": ["leaks", "hotspots", "complexity"], "sizes": [1000, 2000,
    4000, 8000], "inputs": "def make_input(n):\n    return [list(range(n))]\n"}``.

    Attributes:
        checks: Which diagnostics run for this task's rollouts.
        sizes: ``complexity``: the input sizes ``n`` to time (at least 3, distinct).
        inputs: ``complexity``: Python source defining ``make_input(n)``, returning the
            entry point's arguments for size ``n`` (a list, or ``(args, kwargs)``); it
            runs in the sandbox, before the solution's process exists, with
            ``random`` seeded with ``n`` (the model and the reference get the same inputs).
    """

    checks: tuple[DiagnosticCheck, ...] = ("leaks", "hotspots")
    sizes: tuple[int, ...] = ()
    inputs: str | None = None

    @model_validator(mode="after")
    def _sizes_need_inputs(self) -> Diagnose:
        if self.sizes and self.inputs is None:
            raise ValueError("diagnose.sizes needs diagnose.inputs (a make_input(n) function)")
        if self.sizes and (len(set(self.sizes)) < 3 or min(self.sizes) < 1):
            raise ValueError("diagnose.sizes: give at least 3 distinct sizes, each >= 1")
        return self


class Task(BaseModel):
    """One task: what the model is asked, and how its answer is judged.

    Attributes:
        task_id: Unique id, e.g. ``"HumanEval/0"``.
        prompt: For ``assert`` and ``function_call``, the code the model continues
            (imports, signature, docstring); for ``stdio``, ``pytest`` and
            ``unittest``, the problem statement, never part of the program.
        kind: How the tests run: ``assert`` (default), ``stdio``, ``function_call``,
            ``pytest`` or ``unittest``.
        language: Programming language of the solution (see :data:`LANGUAGES`).
        tests: ``assert`` tests: Python code defining ``check(candidate)``, or, in other
            languages, code with a ``main`` that asserts; ``unittest``: Python code
            defining the ``unittest.TestCase`` class ``TestCases``.
        entry_point: ``assert`` (Python): the function passed to ``check``.
        test_cases: ``stdio``: ``{input, output}`` items; ``function_call``:
            ``{args, kwargs, expected}`` items.
        fn_name: ``function_call``: the function to call; a method of LeetCode's
            ``class Solution`` is found by its name too, and ``"Solution.method"`` (or
            ``"Solution().method"``) names one explicitly. ``entry_point`` is read as
            ``fn_name`` when ``fn_name`` is absent.
        comparison: How outputs are compared (``stdio``, and floats in
            ``function_call``).
        checker: ``stdio``: a program that judges outputs instead of ``comparison``.
        stop_on_first_failure: Stop at the first case that fails; the rest count as
            not passed.
        case_time_limit_s: Wall-clock seconds each case may take (``stdio``: each run;
            ``function_call``: each call); the run's limit otherwise.
        test_files: ``pytest``: test file names and their contents.
        solution_path: ``pytest``: where the completion is written (``solution.py``).
        pytest_mode: ``pytest``: ``proxy`` (default) runs the tests in a process the
            rollout's code never runs in, calling it through plain-data proxies;
            ``in_process`` runs both in one process, for tests that need the rollout's
            real objects (weaker: see SECURITY.md).
        solution_prefix: ``unittest``: code put before the completion (BigCodeBench's
            "complete" prompt, which the model continues); empty when the model writes
            the whole program.
        state: ``assert`` (Python) and ``function_call`` (Python): ``fresh`` (default)
            gives every call of the tests (every case) the solution's module as freshly
            imported, a fork of its process taken after the import, so no global,
            memoised or class-level state carries from one case to the next;
            ``shared`` serves every call from one process, for tasks whose tests need
            state to carry over. Each result's ``details["state"]`` says which ran.
        reference: A known-correct completion, if any.
        limits: Per-task limits overriding the run's (optional).
        compile_limits: Per-task limits for the compile step (optional).
        conventions: The contest-judge conventions its programs run under
            (:class:`Conventions`: Python's ``exit``, C/C++ standard and
            ``ONLINE_JUDGE``, the stack of compiled programs).
        environment: The root file system its programs run in
            (:mod:`execgym.environments`): ``None`` or ``"host"`` (the host's, as
            before), the name or digest of an imported or built environment, or an
            inline spec (``{"base": ..., "pip": [...], "setup": [...]}``, built once).
            Judges then run with the environment's own Python.
        diagnose: The diagnostics its rollouts get (:class:`Diagnose`: leaks, hot
            spots, complexity); ``None`` (default): none, unless the run asks for them.
        swe: ``swe``: the repository snapshot, hidden test patch and node ids
            (:class:`~execgym.tasks.swe.SweFields`); a SWE-bench instance line is
            converted into such a task when validated.
    """

    model_config = ConfigDict(extra="ignore", frozen=True)

    task_id: str = Field(min_length=1)
    prompt: str = ""
    kind: TestKind = "assert"
    language: str = "python"
    tests: str | None = None
    entry_point: str | None = None
    test_cases: list[StdioCase | FunctionCase] = Field(default_factory=list)
    fn_name: str | None = None
    comparison: Comparison = Field(default_factory=Comparison)
    checker: Checker | None = None
    stop_on_first_failure: bool = False
    case_time_limit_s: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    test_files: dict[str, str] = Field(default_factory=dict)
    solution_path: str = "solution.py"
    pytest_mode: Literal["proxy", "in_process"] = "proxy"
    solution_prefix: str = ""
    state: Literal["fresh", "shared"] = "fresh"
    reference: str | None = None
    limits: TaskLimits | None = None
    compile_limits: TaskLimits | None = None
    conventions: Conventions = Field(default_factory=Conventions)
    environment: str | dict[str, Any] | None = None
    diagnose: Diagnose | None = None
    swe: SweFields | None = None

    @field_validator("language")
    @classmethod
    def _known_language(cls, value: str) -> str:
        return normalize_language(value)

    @field_validator("entry_point")
    @classmethod
    def _identifier(cls, value: str | None) -> str | None:
        if value is not None and not value.isidentifier():
            raise ValueError(f"entry_point {value!r} is not a Python identifier")
        return value

    @field_validator("fn_name")
    @classmethod
    def _dotted_identifier(cls, value: str | None) -> str | None:
        if value is not None and not all(p.isidentifier() for p in value.split(".")):
            raise ValueError(f"fn_name {value!r} must be a name or 'Class.method'")
        return value

    @model_validator(mode="before")
    @classmethod
    def _assert_tasks_need_a_prompt(cls, data: Any) -> Any:
        if is_instance(data):
            data = task_from_instance(data)
        if isinstance(data, dict) and data.get("kind") == "function_call":
            name = data.get("fn_name") or data.get("entry_point")
            if isinstance(name, str):  # LeetCodeDataset writes "Solution().method"
                data = {**data, "fn_name": name.replace("().", ".")}
                data.pop("entry_point", None)
        if (
            isinstance(data, dict)
            and data.get("kind") in ("stdio", "function_call")
            and isinstance(data.get("tests"), list)
            and "test_cases" not in data
        ):  # `tests` is the assert kind's Python code: pydantic only said "not a string"
            shape = (
                '{"input": ..., "output": ...}'
                if data["kind"] == "stdio"
                else '{"args": [...], "expected": ...}'
            )
            raise ValueError(
                f"a {data['kind']!r} task's cases go in test_cases ([{shape}, ...]), "
                "not in tests (the Python test code of an 'assert' task)"
            )
        if isinstance(data, dict) and data.get("kind", "assert") == "assert":
            missing = [name for name in ("prompt", "tests") if name not in data]
            if missing:
                raise ValueError(f"Field required: an 'assert' task needs {missing}")
        return data

    @model_validator(mode="after")
    def _has_what_its_kind_needs(self) -> Task:
        check = _KIND_CHECKS[self.kind]
        problem = check(self)
        if problem:
            raise ValueError(f"a {self.kind!r} task {problem}")
        return self

    def limits_over(self, base: Limits) -> Limits:
        """The limits for this task's runs: ``base`` with this task's overrides.

        Raises:
            ConfigError: if an override is invalid.
        """
        return _merge(self.task_id, base, self.limits)

    def compile_limits_over(self, base: Limits) -> Limits:
        """The limits for this task's compile step: ``base`` with its overrides.

        Raises:
            ConfigError: if an override is invalid.
        """
        return _merge(self.task_id, base, self.compile_limits)

    def run_limits(self, limits: Limits) -> Limits:
        """The limits of each sandbox run of a rollout's program, from the task's limits.

        ``stdio``: one run per case, each under :meth:`case_limits`; ``function_call``
        with ``case_time_limit_s``: one run for all the calls, whose time is that limit
        per call plus 2 s (as :class:`~execgym.judges.function_call.FunctionCallJudge`
        sets it); otherwise ``limits`` unchanged.
        """
        if self.kind == "stdio":
            return self.case_limits(limits)
        if self.kind == "function_call" and self.case_time_limit_s is not None:
            total = self.case_time_limit_s * len(self.test_cases) + 2.0
            return limits.merged(wall_time_s=total, cpu_time_s=total)
        return limits

    def case_limits(self, limits: Limits) -> Limits:
        """``limits`` with the per-case wall time (and CPU time), if the task sets one."""
        if self.case_time_limit_s is None:
            return limits
        seconds = self.case_time_limit_s
        return limits.merged(wall_time_s=seconds, cpu_time_s=min(seconds, limits.cpu_time_s))


def _merge(task_id: str, base: Limits, overrides: TaskLimits | None) -> Limits:
    if overrides is None:
        return base
    values: dict[str, Any] = overrides.model_dump(exclude_none=True)
    try:
        return base.merged(**values)
    except ConfigError as error:
        raise ConfigError(f"task {task_id}: {error}") from error


def _check_assert(task: Task) -> str:
    if not task.tests:
        return "needs `tests`"
    if task.language == "python" and not task.entry_point:
        return "in Python needs `entry_point` (the function passed to check)"
    return ""


def _check_stdio(task: Task) -> str:
    if not task.test_cases:
        return "needs `test_cases`: a list of {input, output}"
    if not all(isinstance(case, StdioCase) for case in task.test_cases):
        return "needs `test_cases` of the form {input, output}"
    return ""


def _check_function_call(task: Task) -> str:
    if not task.fn_name:
        return "needs `fn_name`, the function to call"
    if task.language not in ("python", "javascript"):
        return f"is judged in python or javascript, not {task.language} (use a stdio task)"
    if not task.test_cases:
        return "needs `test_cases`: a list of {args, kwargs, expected}"
    if not all(isinstance(case, FunctionCase) for case in task.test_cases):
        return "needs `test_cases` of the form {args, kwargs, expected}"
    return ""


def _check_pytest(task: Task) -> str:
    if task.language != "python":
        return "must be in python"
    if not task.test_files:
        return "needs `test_files`: {file name: contents}"
    if task.solution_path in task.test_files:
        return f"has a test file at its solution_path {task.solution_path!r}"
    return ""


def _check_swe(task: Task) -> str:
    if task.swe is None:
        return "needs `swe`: its snapshot, test_patch and FAIL_TO_PASS/PASS_TO_PASS"
    if not (task.swe.fail_to_pass or task.swe.pass_to_pass):
        return "has no hidden tests: give FAIL_TO_PASS (and PASS_TO_PASS) node ids"
    return ""


def _check_unittest(task: Task) -> str:
    if task.language != "python":
        return "must be in python"
    if not task.tests:
        return "needs `tests`: Python code defining the unittest.TestCase class TestCases"
    return ""


_KIND_CHECKS = {
    "assert": _check_assert,
    "stdio": _check_stdio,
    "function_call": _check_function_call,
    "pytest": _check_pytest,
    "unittest": _check_unittest,
    "swe": _check_swe,
}


class Rollout(BaseModel):
    """One completion to score.

    Attributes:
        task_id: The task it answers.
        completion: The code the model wrote (after the task's prompt, for ``assert``
            and ``function_call`` tasks); a chat answer with markdown fences is reduced
            to its last fenced block of code.
        rollout_id: Caller's id; generated (``"<task_id>#<index>"``) when absent.
        files: ``pytest`` tasks: more files of the solution, by name.
    """

    model_config = ConfigDict(extra="ignore", frozen=True)

    task_id: str = Field(min_length=1)
    completion: str
    rollout_id: str | None = None
    files: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _prediction(cls, data: Any) -> Any:
        return rollout_from_prediction(data)  # a SWE-bench prediction's fields
