# expect: none
# An object with __del__ but no cycle: freed by reference counting at once.
class Handle:
    def __init__(self, x):
        self.x = x

    def __del__(self):
        self.x = None


def f(x):
    return Handle(x).x + 1
