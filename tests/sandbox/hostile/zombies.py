# status: ok
# limits: {"wall_time_s": 2, "max_processes": 32}
# attack: fork children that exit at once and are never reaped, until fork fails
# stdout_re: rb"^zombies: ([0-9]|[12][0-9]|3[01])$"
import os

count = 0
try:
    for _ in range(10_000):
        if os.fork() == 0:
            os._exit(0)
        count += 1
except OSError:  # the zombies still hold their pids: pids.max is reached
    pass
print(f"zombies: {count}", flush=True)
