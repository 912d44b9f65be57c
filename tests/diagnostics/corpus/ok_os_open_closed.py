# expect: none
# A raw descriptor closed in finally.
import os


def f(x):
    fd = os.open("/dev/null", os.O_RDONLY)
    try:
        os.read(fd, 1)
    finally:
        os.close(fd)
    return x
