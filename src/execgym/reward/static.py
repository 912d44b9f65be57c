"""Static analysis components: ruff findings per line, radon complexity, bandit security.

Every tool here reads the program as text (ruff parses it in Rust, radon and bandit
walk Python's ``ast``); none imports or executes it, so they run on the host. They
are CPU-bound and blocking: :mod:`execgym.reward.evaluate` calls them in a thread.
"""

from __future__ import annotations

import ast
import json
import logging
import os
import subprocess
import tempfile
import threading
import warnings
from dataclasses import dataclass
from functools import cache

from execgym.errors import ConfigError
from execgym.reward.spec import Complexity, Security, Static


@dataclass(frozen=True, slots=True)
class Measured:
    """A component's score in [0, 1] (``None``: not applicable) and why, for humans."""

    score: float | None
    detail: str


def _clamp(value: float) -> float:
    return min(1.0, max(0.0, value))


def parses(program: str) -> bool:
    """Whether ``program`` is valid Python (parsed only, never run).

    A program too deep for the parser (``RecursionError``, ``MemoryError``) does not.
    """
    try:
        ast.parse(program)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def logical_lines(program: str, first_line: int = 1) -> int:
    """Logical lines of code of ``program`` from ``first_line`` on: its statements.

    Counted as radon's ``lloc`` counts them (one per statement, a compound statement's
    header included), but without the statements that do nothing: docstrings and other
    bare string constants, ``...`` and ``pass``. Comments and blank lines are not
    statements. So padding a program with comments, docstrings or blank lines never
    dilutes its findings (issue 18: 400 comment lines took a sloppy solution's static
    score from 0 to 0.91). At least 1; ``program`` must parse.
    """
    count = 0
    for node in ast.walk(ast.parse(program)):
        if not isinstance(node, ast.stmt) or node.lineno < first_line:
            continue
        if isinstance(node, ast.Pass):
            continue
        value = node.value if isinstance(node, ast.Expr) else None
        if isinstance(value, ast.Constant) and (
            isinstance(value.value, str | bytes) or value.value is Ellipsis
        ):
            continue
        count += 1
    return max(1, count)


@cache
def _ruff() -> str:
    try:
        from ruff.__main__ import find_ruff_bin
    except ImportError as error:
        raise ConfigError(
            "the static component needs ruff: pip install 'execgym[rewards]'"
        ) from error
    return str(find_ruff_bin())


def _row(finding: dict[str, object], default: int) -> int:
    """The line ruff's JSON ``finding`` is on (``location.row``), else ``default``."""
    location = finding.get("location")
    row = location.get("row", default) if isinstance(location, dict) else default
    return int(row)


def ruff_findings(program: str, spec: Static) -> list[dict[str, object]]:
    """The findings of ruff on ``program`` (``--isolated``: no config file is read).

    Raises:
        ConfigError: if ruff is not installed.
        RuntimeError: if ruff fails on this program (the component then scores 0).
    """
    argv = [_ruff(), "check", "--isolated", "--no-cache", "--output-format", "json", "--quiet"]
    argv += ["--select", ",".join(spec.select), "--stdin-filename", "solution.py"]
    if spec.ignore:
        argv += ["--ignore", ",".join(spec.ignore)]
    done = subprocess.run(
        [*argv, "-"], input=program.encode(), capture_output=True, timeout=30, check=False
    )
    if done.returncode not in (0, 1):  # on this code: the component scores 0 (evaluate)
        raise RuntimeError(f"ruff failed ({done.returncode}): {done.stderr.decode()[-500:]}")
    findings: list[dict[str, object]] = json.loads(done.stdout or b"[]")
    return findings


def static_score(program: str, spec: Static, *, first_line: int = 1) -> Measured:
    """The :class:`~execgym.reward.spec.Static` component.

    ``max(0, 1 - d / spec.max_findings_per_line)`` where ``d`` is the ruff findings
    per logical line of the model's code (:func:`logical_lines`: statements, without
    comments, docstrings, blank lines or ``pass``), so the code is measured, not its
    padding.

    Args:
        program: The whole program (prompt + completion), analysed together.
        spec: The component's options.
        first_line: The program's line where the model's code starts: findings above
            it (in the task's prompt) are not the model's and are not counted, nor are
            those lines.
    """
    if not parses(program):
        return Measured(0.0, "does not parse")
    findings = [f for f in ruff_findings(program, spec) if _row(f, first_line) >= first_line]
    lines = logical_lines(program, first_line)
    density = len(findings) / lines
    codes = sorted({str(f.get("code")) for f in findings})
    detail = f"{len(findings)} ruff finding(s) in {lines} logical lines of code" + (
        f" ({', '.join(codes[:5])})" if codes else ""
    )
    return Measured(_clamp(1 - density / spec.max_findings_per_line), detail)


def complexity_score(program: str, spec: Complexity) -> Measured:
    """The :class:`~execgym.reward.spec.Complexity` component (radon)."""
    try:
        from radon.complexity import cc_visit
        from radon.metrics import mi_compute, mi_parameters
    except ImportError as error:
        raise ConfigError(
            "the complexity component needs radon: pip install 'execgym[rewards]'"
        ) from error
    if not parses(program):
        return Measured(0.0, "does not parse")
    blocks = cc_visit(program)
    mean_cc = sum(b.complexity for b in blocks) / len(blocks) if blocks else 1.0
    # The maintainability index without its comment term (radon's mi_compute with 0 %
    # comments): the term rewards a share of comment lines, which padding can buy.
    volume, total_cc, lloc, _ = mi_parameters(program, count_multi=True)
    mi = float(mi_compute(volume, total_cc, lloc, 0))
    cc_part = _clamp((spec.cc_max - mean_cc) / (spec.cc_max - spec.cc_ok))
    score = 0.5 * cc_part + 0.5 * _clamp(mi / 100)
    return Measured(score, f"mean cyclomatic complexity {mean_cc:.1f}, maintainability {mi:.0f}")


class _ThreadErrors(logging.Handler):
    """Collects the error records logged by the calling thread (tools run in threads)."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.thread = threading.get_ident()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.thread == self.thread:
            self.messages.append(record.getMessage())


def security_score(program: str, spec: Security) -> Measured:
    """The :class:`~execgym.reward.spec.Security` component (bandit)."""
    try:
        with warnings.catch_warnings():  # stevedore's deprecations, not ours
            warnings.simplefilter("ignore")
            from bandit.core import config as bandit_config
            from bandit.core import manager as bandit_manager
    except ImportError as error:
        raise ConfigError(
            "the security component needs bandit: pip install 'execgym[rewards]'"
        ) from error
    if not parses(program):
        return Measured(0.0, "does not parse")
    bandit_log = logging.getLogger("bandit")
    bandit_log.setLevel(logging.ERROR)
    failures = _ThreadErrors()  # bandit logs a check that crashed on the code, and goes on
    bandit_log.addHandler(failures)
    try:
        with tempfile.TemporaryDirectory(prefix="execgym-bandit-") as folder:
            path = os.path.join(folder, "solution.py")
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(program)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                conf = bandit_config.BanditConfig()
                profile = {"include": set(), "exclude": set(spec.skip)}
                mgr = bandit_manager.BanditManager(conf, "file", quiet=True, profile=profile)
                mgr.discover_files([path])
                mgr.run_tests()
            issues = mgr.get_issue_list()
    finally:
        bandit_log.removeHandler(failures)
    if failures.messages or mgr.skipped:  # a partial analysis is no clean bill: 0
        why = (failures.messages or [str(mgr.skipped[0])])[0]
        return Measured(0.0, f"bandit could not analyse the code: {why}"[:300])
    weights = {"LOW": spec.low, "MEDIUM": spec.medium, "HIGH": spec.high}
    weighted = sum(weights.get(str(i.severity), spec.low) for i in issues)
    ids = sorted({i.test_id for i in issues})
    detail = f"{len(issues)} bandit finding(s)" + (f" ({', '.join(ids[:5])})" if ids else "")
    return Measured(_clamp(1 - weighted / spec.budget), detail)
