# expect: descriptor
# A socket made per call and kept (a connection pool that never reuses).
import socket

_pool = []


def f(x):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    _pool.append(sock)
    return x + 2
