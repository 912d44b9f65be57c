"""Cost of loading the sandbox's seccomp filter into a process, linear chain vs tree.

Every run loads the filter (bwrap for a fresh sandbox, the run's PID 1 in the warm
pool). Prints, for each layout, its length in BPF instructions and the p50 and p99 time
of ``prctl(PR_SET_SECCOMP)`` in a freshly forked child (milliseconds), alternated
layout by layout, with the ratio of the tree to the chain; each child then checks that
``unshare(CLONE_NEWNS)`` is still refused.

    .venv/bin/python benchmarks/seccomp_filter.py [--runs 200]
"""

from __future__ import annotations

import argparse
import ctypes
import errno
import os
import time

from execgym.sandbox._seccomp import seccomp_program

PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER, CLONE_NEWNS = 38, 22, 2, 0x20000
libc = ctypes.CDLL(None, use_errno=True)


class SockFprog(ctypes.Structure):
    _fields_ = (("len", ctypes.c_ushort), ("filter", ctypes.c_void_p))


def load_in_child(program: bytes) -> float:
    """Seconds the child took to load ``program``; raises if the filter does not hold."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        buffer = ctypes.create_string_buffer(program, len(program))
        fprog = SockFprog(len(program) // 8, ctypes.addressof(buffer))
        libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
        started = time.perf_counter()
        loaded = libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0)
        took = time.perf_counter() - started
        refused = libc.unshare(CLONE_NEWNS) == -1 and ctypes.get_errno() == errno.EPERM
        os.write(write_end, f"{took if loaded == 0 and refused else -1.0}".encode())
        os._exit(0)
    os.close(write_end)
    os.waitpid(pid, 0)
    took = float(os.read(read_end, 100))
    os.close(read_end)
    if took < 0:
        raise RuntimeError("the filter did not load, or did not refuse unshare()")
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    layouts = {"chain": seccomp_program("none", tree=False), "tree": seccomp_program("none")}
    times: dict[str, list[float]] = {name: [] for name in layouts}
    for _ in range(args.runs):
        for name, program in layouts.items():
            times[name].append(load_in_child(program) * 1000)
    p50 = {}
    for name, values in times.items():
        values.sort()
        p50[name] = values[len(values) // 2]
        p99 = values[min(len(values) - 1, round(0.99 * (len(values) - 1)))]
        size = len(layouts[name]) // 8
        print(f"{name:5s} {size:4d} instructions  load p50 {p50[name]:.3f} ms  p99 {p99:.3f} ms")
    print(f"tree / chain, p50: {p50['tree'] / p50['chain']:.2f}x")


if __name__ == "__main__":
    main()
