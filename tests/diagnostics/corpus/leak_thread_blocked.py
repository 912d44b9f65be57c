# expect: thread
# A worker thread per call that waits forever for work that never comes.
import threading

_stop = threading.Event()


def f(x):
    worker = threading.Thread(target=_stop.wait, daemon=True)
    worker.start()
    return x * 5
