# status: ok
# limits: {"wall_time_s": 3, "memory_bytes": "256MiB"}
# attack: exec a program with a 100 MB argv (1,000 x 100 kB) and with one 100 MB argument
# stdout_re: rb"^many args: (E2BIG|ENAMETOOLONG)$"
# stdout_re: rb"^one arg: (E2BIG|ENAMETOOLONG)$"
import errno
import os
import sys

marker = sys.argv[1]


def many_args() -> list[bytes]:  # bytes: Python passes them on without a copy
    return [marker.encode()] + [b"a" * 100_000] * 1000


def one_arg() -> list[bytes]:
    return [marker.encode(), b"b" * 100_000_000]


for label, make_argv in (("many args", many_args), ("one arg", one_arg)):
    try:
        os.execv("/usr/bin/true", make_argv())
    except OSError as error:
        print(f"{label}: {errno.errorcode[error.errno]}", flush=True)
