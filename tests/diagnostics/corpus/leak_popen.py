# expect: process
# subprocess.Popen per call, never waited for (and still running).
import subprocess

_running = []


def f(x):
    _running.append(subprocess.Popen(["sleep", "60"]))
    return x
