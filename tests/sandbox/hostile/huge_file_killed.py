# status: signaled
# limit_hit: max_file_bytes
# limits: {"wall_time_s": 3, "max_file_bytes": "4MiB", "disk_bytes": "64MiB"}
# attack: restore the default SIGXFSZ action, then write a file far past max_file_bytes
import signal

signal.signal(signal.SIGXFSZ, signal.SIG_DFL)
with open("huge", "wb") as handle:
    for _ in range(1024):
        handle.write(b"x" * (1 << 20))
        handle.flush()
print("ESCAPED wrote 1 GiB")
