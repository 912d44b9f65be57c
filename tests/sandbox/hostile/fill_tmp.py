# status: ok
# limits: {"wall_time_s": 3, "disk_bytes": "16MiB", "max_file_bytes": "64MiB"}
# attack: fill /tmp (and then /work) until the disk is full
# stdout_has: b"/tmp: ENOSPC\n"
# stdout_has: b"/work: ENOSPC\n"
import errno
import os
import sys

marker = sys.argv[1]
for directory in ("/tmp", "/work"):
    written = 0
    try:
        with open(f"{directory}/{marker}", "wb") as handle:
            while written < 1 << 30:
                handle.write(b"x" * (1 << 20))
                handle.flush()
                written += 1 << 20
        print(f"ESCAPED wrote 1 GiB to {directory}")
    except OSError as error:
        print(f"{directory}: {errno.errorcode[error.errno]}")
        os.remove(f"{directory}/{marker}")
