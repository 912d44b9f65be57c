# expect: process
# A child process per call that is never waited for: a zombie each time.
import os


def f(x):
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    return x + 1
