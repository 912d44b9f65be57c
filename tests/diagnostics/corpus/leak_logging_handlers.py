# expect: memory
# A logging handler added on every call (a classic in request handlers).
import logging


def f(x):
    log = logging.getLogger("solution")
    log.addHandler(logging.NullHandler())
    return x * x
