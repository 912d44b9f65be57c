# expect: thread
# A polling thread per call, never joined or stopped.
import threading
import time


def _poll():
    while True:
        time.sleep(0.05)


def f(x):
    threading.Thread(target=_poll, daemon=True).start()
    return x + 7
