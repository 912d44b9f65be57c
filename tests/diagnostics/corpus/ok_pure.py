# expect: none
# A pure function: allocates, returns, keeps nothing.
def f(x):
    return sum(i * x for i in range(100))
