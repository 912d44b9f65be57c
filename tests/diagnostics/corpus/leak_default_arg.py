# expect: memory
# The mutable default argument that remembers every call.
def f(x, seen=[]):
    seen.append({"value": x})
    return len(seen) and x
