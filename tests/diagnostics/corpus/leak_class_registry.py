# expect: memory
# Every instance registers itself in a class attribute and is never removed.
class Node:
    registry = []

    def __init__(self, value):
        self.value = value
        Node.registry.append(self)


def f(x):
    return Node(x).value * 2
