# status: time_limit
# limit_hit: wall_time_s
# limits: {"wall_time_s": 1}
# attack: a child and then the program itself stop with SIGSTOP: stopped, never exiting
import os
import signal

if os.fork() == 0:
    os.kill(os.getpid(), signal.SIGSTOP)
os.kill(os.getpid(), signal.SIGSTOP)
