# expect: none
# Memoisation keyed on the input alone: the same inputs fill it once.
_memo = {}


def f(x):
    if x not in _memo:
        _memo[x] = str(x) * 20
    return len(_memo[x])
