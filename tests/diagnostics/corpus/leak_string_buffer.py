# expect: memory
# Output accumulated into a module-level string and never reset.
_buffer = ""


def f(x):
    global _buffer
    _buffer += "item %d;" % x
    return x + 1
