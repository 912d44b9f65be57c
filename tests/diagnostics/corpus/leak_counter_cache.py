# expect: memory
# A "cache" keyed by a call counter, so no key ever repeats: grows per call.
_cache = {}


def f(x):
    key = (len(_cache), x)
    _cache[key] = str(x) * 8
    return len(_cache[key])
