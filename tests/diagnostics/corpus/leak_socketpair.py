# expect: descriptor
# A socket pair per call, kept by a reference cycle-free global dict.
import socket

_pairs = {}


def f(x):
    _pairs[len(_pairs)] = socket.socketpair()
    return x
