# expect: descriptor
# A raw descriptor opened per call and never closed.
import os


def f(x):
    fd = os.open("/dev/null", os.O_RDONLY)
    os.read(fd, 1)
    return x + 1
