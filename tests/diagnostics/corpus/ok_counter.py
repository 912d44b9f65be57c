# expect: none
# A module-level counter and a running maximum: state, but bounded.
_calls = 0
_best = None


def f(x):
    global _calls, _best
    _calls += 1
    _best = x if _best is None else max(_best, x)
    return _best
