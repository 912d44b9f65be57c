# status: time_limit
# limit_hit: wall_time_s
# limits: {"wall_time_s": 1}
# attack: ignore SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGXCPU (and in a child too), then busy-loop
import os
import signal

for name in ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT", "SIGXCPU", "SIGUSR1", "SIGPIPE"):
    signal.signal(getattr(signal, name), signal.SIG_IGN)
os.fork()
while True:
    pass
