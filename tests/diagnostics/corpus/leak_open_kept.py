# expect: descriptor
# File objects kept in a module-level list, never closed.
_handles = []


def f(x):
    handle = open("/dev/null", "rb")  # noqa: SIM115 - the leak is the point
    _handles.append(handle)
    return x * 2
