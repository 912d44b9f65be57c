# expect: none
# A pool of buffers: taken and given back on every call.
_free = [bytearray(1024) for _ in range(4)]


def f(x):
    buf = _free.pop() if _free else bytearray(1024)
    try:
        buf[0] = x % 256
        return buf[0]
    finally:
        _free.append(buf)
