# status: ok
# limits: {"wall_time_s": 2}
# attack: SIGKILL the host pids of the test, its parent and a sentinel, every pid in /proc,
#   everything (-1), and last pid 1
# see: test_field_cases.py::test_bc29_exiting_or_killing_the_harness_scores_zero_and_loses_nothing
# stdout_has: b"kill -1: "
# stdout_has: b"still alive\n"
# stdout_has: b"kill 1: EPERM\n"
# status[gvisor]: signaled
# stdout_has[gvisor]: b"still alive\n"
# stdout_has[userns]: b"kill -1: "
# stdout_has[userns]: b"still alive\n"
# stdout_has[userns]: b"kill 1: sent\n"
# note[userns]: bwrap's init has the run's uid in its own user namespace, so kill() is
#   allowed, and Linux drops a SIGKILL sent to a PID namespace's init from inside it
# note[gvisor]: the program is pid 1 there, and gVisor (unlike Linux) lets init SIGKILL itself
import errno
import os
import signal


def kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
        print(f"kill {pid}: sent", flush=True)
    except OSError as error:
        print(f"kill {pid}: {errno.errorcode[error.errno]}", flush=True)


me = os.getpid()
for name in ("HOSTILE_TEST_PID", "HOSTILE_PARENT_PID", "HOSTILE_SENTINEL_PID"):
    kill(int(os.environ[name]))
for pid in sorted({int(p) for p in os.listdir("/proc") if p.isdigit()} - {me, 1}):
    kill(pid)
kill(-1)  # every process this one may signal, except itself
print("still alive", flush=True)
kill(1)  # bwrap's init (root); under gVisor this program itself
