# status: ok
# limits: {"wall_time_s": 2}
# attack: create files in /, /usr, /etc, /root, the interpreter's prefix, /proc/sys and /dev
# stdout_has: b"blocked /usr/"
# stdout_has: b"blocked /root/"
import os
import sys

marker = sys.argv[1]
targets = [
    "/",
    "/usr",
    "/usr/bin",
    "/usr/lib",
    "/etc",
    "/root",
    "/bin",
    "/lib",
    "/dev",
    "/proc",
    "/proc/sys/kernel",
    os.path.dirname(sys.executable),
    sys.prefix,
    sys.base_prefix,
]
escaped = False
for directory in targets:
    path = os.path.join(directory, marker)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except OSError as error:
        print(f"blocked {path}: {error.strerror}")
        continue
    os.write(fd, marker.encode())
    escaped = True
    print(f"ESCAPED created {path}")
for path in ("/proc/sys/kernel/hostname", "/proc/sysrq-trigger", "/proc/sys/vm/drop_caches"):
    try:
        with open(path, "w") as handle:
            handle.write("1")
        escaped = True
        print(f"ESCAPED wrote {path}")
    except OSError as error:
        print(f"blocked {path}: {error.strerror}")
sys.exit(1 if escaped else 0)
