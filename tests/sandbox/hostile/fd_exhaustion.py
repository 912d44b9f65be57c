# status: ok
# limits: {"wall_time_s": 2, "max_open_files": 64}
# attack: open files until EMFILE, then try to raise RLIMIT_NOFILE and keep going
# see: test_field_cases.py::test_bc17_fork_bombs_and_fd_exhaustion_score_zero
# stdout_re: rb"^EMFILE after ([0-9]|[1-5][0-9]|6[0-4]) opens$"
# stdout_has: b"blocked raise RLIMIT_NOFILE\n"
import errno
import os
import resource

fds = []
try:
    for _ in range(1_000_000):
        fds.append(os.open("/dev/null", os.O_RDONLY))
except OSError as error:
    print(f"{errno.errorcode[error.errno]} after {len(fds)} opens")
try:
    resource.setrlimit(resource.RLIMIT_NOFILE, (1 << 20, 1 << 20))
    print("ESCAPED raised RLIMIT_NOFILE")
except (OSError, ValueError):
    print("blocked raise RLIMIT_NOFILE")
