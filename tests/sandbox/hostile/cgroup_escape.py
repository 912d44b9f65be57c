# status: ok
# limits: {"wall_time_s": 2}
# attack: leave or loosen the run's cgroup: find cgroupfs, mount it, raise memory and pids limits
# stdout_has: b"blocked mount cgroup\n"
import ctypes
import os
import sys

libc = ctypes.CDLL(None, use_errno=True)
escaped = False
with open("/proc/self/cgroup") as handle:
    print(handle.read(), end="")
for path in ("/sys/fs/cgroup", "/sys/fs/cgroup/memory", "/sys"):
    print(f"{path} exists: {os.path.exists(path)}")
os.makedirs("cg", exist_ok=True)
for fstype, options in ((b"cgroup2", None), (b"cgroup", b"memory"), (b"cgroup", b"pids")):
    if libc.mount(b"cgroup", b"/work/cg", fstype, 0, options) == 0:
        escaped = True
        print(f"ESCAPED mounted {fstype.decode()}")
print("blocked mount cgroup")
for path in (
    "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    "/sys/fs/cgroup/pids/pids.max",
    "/sys/fs/cgroup/cgroup.procs",
    "/sys/fs/cgroup/memory/cgroup.procs",
):
    try:
        with open(path, "w") as handle:
            handle.write(str(os.getpid()))
        escaped = True
        print(f"ESCAPED wrote {path}")
    except OSError:
        print(f"blocked {path}")
sys.exit(1 if escaped else 0)
