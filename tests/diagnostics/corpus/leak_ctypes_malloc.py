# expect: resident
# Native memory from libc's malloc, touched and never freed: outside Python's allocator.
import ctypes

_libc = ctypes.CDLL(None)
_libc.malloc.restype = ctypes.c_void_p


def f(x):
    size = 1 << 20
    block = _libc.malloc(size)
    ctypes.memset(block, 1, size)
    return x + 1
