# expect: none
# functools.lru_cache with a bound: fills once, then only hits.
import functools


@functools.lru_cache(maxsize=128)
def _square_list(x):
    return tuple(i * x for i in range(10))


def f(x):
    return sum(_square_list(x))
