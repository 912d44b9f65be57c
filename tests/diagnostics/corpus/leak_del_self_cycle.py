# expect: cycle
# An object that keeps a bound method of itself (a self-cycle), with __del__.
class Connection:
    def __init__(self, x):
        self.handler = self.handle
        self.x = x

    def handle(self):
        return self.x

    def __del__(self):
        self.handler = None


def f(x):
    return Connection(x).handle() * 2
