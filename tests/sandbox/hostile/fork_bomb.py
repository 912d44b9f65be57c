# status: time_limit
# limit_hit: wall_time_s
# limits: {"wall_time_s": 1, "max_processes": 32}
# attack: fork bomb that never gives up: every process forks again and retries on EAGAIN
# see: test_field_cases.py::test_bc17_fork_bomb_is_contained_and_leaves_nothing
import contextlib
import os

while True:
    with contextlib.suppress(OSError):
        os.fork()
