# status: ok
# limits: {"wall_time_s": 2, "max_processes": 32}
# attack: thread bomb: start sleeping threads until the kernel refuses one
# stdout_re: rb"^capped at ([0-9]|[12][0-9]|3[01]) threads$"
import threading
import time

threads = []
try:
    for _ in range(100_000):
        thread = threading.Thread(target=time.sleep, args=(30,), daemon=True)
        thread.start()
        threads.append(thread)
except RuntimeError:  # "can't start new thread": pids.max counts threads too
    pass
print(f"capped at {len(threads)} threads", flush=True)
