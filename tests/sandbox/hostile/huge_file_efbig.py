# status: ok
# limits: {"wall_time_s": 3, "max_file_bytes": "4MiB", "disk_bytes": "64MiB"}
# attack: write a file far past max_file_bytes (Python ignores SIGXFSZ, so write() fails)
# stdout_has: b"EFBIG at 4194304 bytes\n"
import errno
import os

with open("huge", "wb", buffering=0) as handle:
    try:
        for _ in range(1024):
            handle.write(b"x" * (1 << 20))
        print("ESCAPED wrote 1 GiB")
    except OSError as error:
        print(f"{errno.errorcode[error.errno]} at {os.path.getsize('huge')} bytes")
