# expect: none
# A hand-written LRU with eviction past 64 entries.
from collections import OrderedDict

_cache = OrderedDict()


def f(x):
    if x in _cache:
        _cache.move_to_end(x)
        return _cache[x]
    value = [x] * 10
    _cache[x] = value
    if len(_cache) > 64:
        _cache.popitem(last=False)
    return value
