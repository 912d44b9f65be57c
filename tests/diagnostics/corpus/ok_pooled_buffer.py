# expect: none
# One scratch buffer reused by every call (a pool of one).
_scratch = bytearray(4096)


def f(x):
    for i in range(64):
        _scratch[i] = (x + i) % 256
    return sum(_scratch[:64])
