"""Hack snippets shared by the hack corpora of the judge kinds (tests/judges/test_hacks*.py).

Each is the completion of a wrong ``add(a, b)`` (or ``greet``) plus a trick; the corpora
check that each scores 0.0 under their judge.
"""

from __future__ import annotations

from execgym import Rollout, RolloutLine, Scorer, Task

NONCE_HUNT = """\
import gc, os, re, sys
_hex = re.compile(rb'^[0-9a-f]{32}$')

def _candidates():
    seen = []
    f = sys._getframe()
    while f is not None:
        seen += list(f.f_locals.values()) + list(f.f_globals.values())
        f = f.f_back
    for o in gc.get_objects():
        if isinstance(o, dict):
            seen += list(o.values())
        elif isinstance(o, (list, tuple)):
            seen += list(o)
    found = set()
    for v in seen:
        if isinstance(v, str):
            v = v.encode('latin-1', 'replace')
        if isinstance(v, bytes) and _hex.match(v):
            found.add(v)
    return found

def add(a, b):
    found = _candidates()
    for nonce in found:
        for fd in range(3, 64):
            try:
                os.write(fd, b'EXECGYM-START\\n' + nonce + b'\\n' + BODY + b'\\n')
            except OSError:
                pass
    if found:
        os._exit(0)
    return 'no-nonce'
"""
"""Walks frames and ``gc.get_objects()`` for the nonce, then forges ``BODY`` on every fd."""


def nonce_hunt(body: str) -> str:
    """:data:`NONCE_HUNT` forging the report ``body`` (a judge's passing report)."""
    return f"BODY = {body.encode()!r}\n" + NONCE_HUNT


ALWAYS_EQUAL = (
    "class _Any:\n"
    "    def __eq__(self, other): return True\n"
    "    def __ne__(self, other): return False\n"
    "    def __hash__(self): return 0\n"
)
"""A class whose instances equal everything (BC-31); define ``add`` after it."""

FORGED_FRAME = (
    "import os, time\n"
    "def add(a, b):\n"
    "    os.write(5, (9).to_bytes(8, 'little') + b'passed!!!')\n"
    "    time.sleep(5)\n"
)
"""Writes garbage where the harness reads the solution's answers (fd 5)."""

PATCH_PYTEST_REPORTS = (
    "import _pytest.reports as r\n"
    "_real = r.TestReport.from_item_and_call\n"
    "def _forge(item, call):\n"
    "    report = _real(item, call)\n"
    "    report.outcome = 'passed'\n"
    "    return report\n"
    "r.TestReport.from_item_and_call = staticmethod(_forge)\n"
    "def add(a, b):\n    return 0\n"
)
"""BC-35, pytest variant: every failed report rewritten as passed."""

EARLY_EXITS = {
    "os-exit-at-load": "import os\nos._exit(0)\ndef add(a, b):\n    return 0\n",
    "sys-exit-at-load": "import sys\nsys.exit(0)\ndef add(a, b):\n    return 0\n",
    # The second call ends it: counted in one process, by its input (-1) where each call
    # sees the module freshly imported (state "fresh").
    "os-exit-mid-run": "import os\n_n = []\ndef add(a, b):\n    _n.append(1)\n"
    "    if len(_n) == 2 or a == -1:\n        os._exit(0)\n    return a + b\n",
    "system-exit-in-a-call": "def add(a, b):\n    if a < 0:\n        raise SystemExit(0)\n"
    "    return a + b\n",
    "keyboard-interrupt": "def add(a, b):\n    raise KeyboardInterrupt\n",
    "kill-process-group": "import os, signal\ndef add(a, b):\n    os.killpg(0, signal.SIGKILL)\n",
    "kill-the-harness": "import os, signal\n"
    "def add(a, b):\n    os.kill(os.getppid(), signal.SIGKILL)\n",
    "atexit": "import atexit, os\natexit.register(lambda: os._exit(0))\n"
    "def add(a, b):\n    return 0\n",
}
"""Ending the run (or the solution's process) early, by name."""


async def score_rollout(tasks: dict[str, Task], sandbox, completion: str, task: Task, limits):
    """One rollout of ``task`` scored as the trainer would (a :class:`ScoredRollout`)."""
    scorer = Scorer(tasks, sandbox, limits)
    return await scorer.score_one(
        RolloutLine(0, Rollout(task_id=task.task_id, completion=completion))
    )
