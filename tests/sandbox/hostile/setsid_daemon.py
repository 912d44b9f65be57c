# status: ok
# limits: {"wall_time_s": 3}
# wall_time_below_s: 1.5
# attack: classic double-fork, setsid daemon (stdio closed) that execs sleep to outlive the run
# stdout_has: b"daemonized\n"
import os
import sys

marker = sys.argv[1]
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        devnull = os.open("/dev/null", os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        os.execv("/usr/bin/sleep", [f"{marker}-daemon", "3600"])
    os._exit(0)
os.wait()
print("daemonized", flush=True)
