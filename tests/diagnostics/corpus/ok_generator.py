# expect: none
# A generator pipeline, consumed within the call.
def _numbers(limit):
    yield from range(limit)


def f(x):
    return sum(n * x for n in _numbers(200) if n % 3)
