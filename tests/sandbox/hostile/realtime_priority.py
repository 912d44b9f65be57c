# status: ok
# limits: {"wall_time_s": 2}
# attack: take a real-time scheduling class (SCHED_FIFO 99) or a negative nice to starve the host
# stdout_has: b"blocked SCHED_FIFO\n"
# stdout_has: b"blocked nice -20\n"
# note[gvisor]: gVisor lets uid 65534 take a negative nice; the backend's seccomp profile
#   refuses setpriority below zero, as Linux does without CAP_SYS_NICE
import os
import sys

escaped = False
try:
    os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(99))
    escaped = True
    print("ESCAPED SCHED_FIFO")
except OSError:
    print("blocked SCHED_FIFO")
try:
    os.setpriority(os.PRIO_PROCESS, 0, -20)
    escaped = True
    print("ESCAPED nice -20")
except OSError:
    print("blocked nice -20")
sys.exit(1 if escaped else 0)
