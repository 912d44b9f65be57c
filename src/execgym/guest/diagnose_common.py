"""Shared by the diagnostics harness's parts (see :mod:`execgym.guest.diagnose`).

Constants, the job's input parts, the inputs built from the task's generator, and the
measuring helpers the solution's process uses. Standard library only.
"""

import hashlib
import json
import sys

START_MARKER = b"EXECGYM-START\n"
SOLUTION = "solution.py"
TESTS = "<tests>"
WARMUP_PASSES = 2
MIN_HALF_PASSES = 2
MAX_HALF_PASSES = 64
TIMED_MIN_S = 0.02
TIMED_MAX_REPS = 1 << 16
TIMED_REPEATS = 3
FRAMES = 10
LEAK_SHARE = 0.5
TRACE_SLOWDOWN = 30  # tracemalloc's cost on allocation-heavy code, at most (measured ~20x)
BLOCK_NOISE = 8  # blocks the measuring itself keeps (its tuples and ints)


def read_part(stream):
    """One length-prefixed part of stdin."""
    size = int(stream.read(10) or b"0")
    return stream.read(size)


def no_dump():
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0
    except Exception:
        pass


def make_inputs(job):
    """``[(n, args, kwargs), ...]`` from the task's generator, seeded per size."""
    if "complexity" not in job["checks"] or not job.get("sizes"):
        return []
    import random

    space = {"__name__": "execgym_inputs"}
    exec(compile(job["inputs"], "<inputs>", "exec"), space)  # the task's own code
    made = []
    for n in job["sizes"]:
        random.seed(n)
        value = space["make_input"](n)
        if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], dict):
            made.append((n, list(value[0]), value[1]))
        else:
            made.append((n, list(value), {}))
    return made


def canonical(value, depth=0):
    """A JSON-able form of ``value`` that does not depend on hash seeds or identity."""
    if depth > 50:
        return "<deep>"
    if isinstance(value, bool) or value is None or isinstance(value, int | str):
        return value
    if isinstance(value, float):
        return float("%.9g" % value)
    if isinstance(value, list | tuple):
        return [canonical(v, depth + 1) for v in value]
    if isinstance(value, set | frozenset):
        items = [canonical(v, depth + 1) for v in value]
        return sorted(items, key=lambda v: json.dumps(v, sort_keys=True))
    if isinstance(value, dict):
        pairs = [[canonical(k, depth + 1), canonical(v, depth + 1)] for k, v in value.items()]
        return sorted(pairs, key=lambda p: json.dumps(p, sort_keys=True))
    return type(value).__name__


def answer_hash(value):
    text = json.dumps(canonical(value), sort_keys=True)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


_MALLINFO = []


class OutOfBudget(BaseException):
    """Raised by the harness's timer in the solution's process: a phase ran out of time."""


def heap_size():
    """(pymalloc blocks in use, bytes malloc holds for the program), ``None`` if unknown.

    Small objects live in pymalloc's blocks (``sys.getallocatedblocks``); larger ones
    (big strings, list buffers) in malloc's, whose in-use bytes glibc's ``mallinfo2``
    gives (``uordblks + hblkhd``). The ctypes function is made once, at the first call
    (a warm-up), so measuring allocates nothing that stays.
    """
    if not _MALLINFO:
        try:
            import ctypes

            class Info(ctypes.Structure):
                _fields_ = [(name, ctypes.c_size_t) for name in (
                    "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks",
                    "uordblks", "fordblks", "keepcost")]  # fmt: skip

            function = ctypes.CDLL(None).mallinfo2
            function.restype = Info
            _MALLINFO.append(function)
        except Exception:
            _MALLINFO.append(None)
    blocks = sys.getallocatedblocks()
    if _MALLINFO[0] is None:
        return blocks, None
    info = _MALLINFO[0]()
    return blocks, info.uordblks + info.hblkhd


def model_frame(frame):
    """The innermost frame of the solution's file at or above ``frame``, else ``None``."""
    while frame is not None:
        if frame.f_code.co_filename == SOLUTION:
            return frame
        frame = frame.f_back
    return None
