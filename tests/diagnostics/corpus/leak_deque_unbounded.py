# expect: memory
# A deque used as a "recent items" buffer, but without maxlen.
from collections import deque

_recent = deque()


def f(x):
    _recent.append((x, str(x)))
    return x - 1
