# expect: none
# A file opened and closed by a with statement.
def f(x):
    with open("/dev/null", "rb") as handle:
        handle.read(1)
    return x + 1
