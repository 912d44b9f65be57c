# expect: memory
# A module-level log that keeps every result: grows by one entry per call.
_history = []


def f(x):
    result = [x * i for i in range(4)]
    _history.append(result)
    return sum(result)
