# status: time_limit
# limit_hit: cpu_time_s
# limits: {"wall_time_s": 5, "cpu_time_s": 1}
# attack: burn CPU on 8 threads at once (hashlib releases the GIL) against a 1 s CPU budget
import hashlib
import threading

data = b"x" * (1 << 20)


def spin() -> None:
    while True:
        hashlib.sha256(data).digest()


for _ in range(8):
    threading.Thread(target=spin).start()
