# expect: none
# A doubly linked list per call: cycles, but no finalizer; the cycle GC frees them at once.
class Link:
    def __init__(self, value):
        self.value = value
        self.prev = self.next = None


def f(x):
    head = Link(0)
    node = head
    for i in range(1, 5):
        node.next = Link(i * x)
        node.next.prev = node
        node = node.next
    return node.value
