# expect: none
# A thread per call, always joined.
import threading


def f(x):
    out = []
    worker = threading.Thread(target=lambda: out.append(x * 2))
    worker.start()
    worker.join()
    return out[0]
