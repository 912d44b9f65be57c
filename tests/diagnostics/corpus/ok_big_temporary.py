# expect: none
# Large temporaries, all freed before returning.
def f(x):
    data = [i * x for i in range(50000)]
    text = ",".join(map(str, data[:1000]))
    return len(text) + data[-1]
