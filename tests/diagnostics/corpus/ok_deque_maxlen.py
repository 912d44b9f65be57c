# expect: none
# A bounded recent-items buffer (deque with maxlen).
from collections import deque

_recent = deque(maxlen=8)


def f(x):
    _recent.append((x, str(x)))
    return len(_recent)
