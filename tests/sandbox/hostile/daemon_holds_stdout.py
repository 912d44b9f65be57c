# status: ok
# limits: {"wall_time_s": 3}
# wall_time_below_s: 1.5
# attack: the program exits at once, but a setsid'ed child keeps stdout and stderr open
# stdout_has: b"parent done\n"
import os
import sys

marker = sys.argv[1]
if os.fork() == 0:
    os.setsid()
    os.execv("/usr/bin/sleep", [f"{marker}-holder", "3600"])
print("parent done", flush=True)
