# expect: none
# Sockets made and closed (a pair, both ends).
import socket


def f(x):
    a, b = socket.socketpair()
    with a, b:
        a.sendall(b"x")
        return x + len(b.recv(1))
