# expect: cycle
# Parent and child pointing at each other, with a finalizer: only the cycle GC frees them.
class Resource:
    def __init__(self, x):
        self.partner = None
        self.x = x

    def __del__(self):
        self.x = None


def f(x):
    a, b = Resource(x), Resource(x + 1)
    a.partner, b.partner = b, a
    return a.x + b.x
