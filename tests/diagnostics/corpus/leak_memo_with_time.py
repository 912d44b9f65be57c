# expect: memory
# Memoisation keyed on the call's sequence number as well as its input: never hits.
import itertools

_counter = itertools.count()
_memo = {}


def f(x):
    key = (x, next(_counter))
    if key not in _memo:
        _memo[key] = [x] * 3
    return sum(_memo[key])
