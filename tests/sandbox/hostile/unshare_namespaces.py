# status: ok
# limits: {"wall_time_s": 2}
# attack: create user (and other) namespaces: unshare(2), clone(2) flags, /usr/bin/unshare -r
# stdout_has: b"blocked unshare CLONE_NEWUSER\n"
# stdout_has: b"blocked /usr/bin/unshare -r\n"
# note[gvisor]: the backend's OCI seccomp profile refuses unshare and clone namespace flags,
#   as bwrap's filter does
import ctypes
import os
import subprocess
import sys

libc = ctypes.CDLL(None, use_errno=True)
FLAGS = {
    "CLONE_NEWUSER": 0x10000000,
    "CLONE_NEWNS": 0x00020000,
    "CLONE_NEWPID": 0x20000000,
    "CLONE_NEWNET": 0x40000000,
    "CLONE_NEWIPC": 0x08000000,
    "CLONE_NEWUTS": 0x04000000,
    "CLONE_NEWCGROUP": 0x02000000,
    "CLONE_NEWTIME": 0x00000080,
}
SIGCHLD = 17
escaped = False
for name, flag in FLAGS.items():
    if libc.unshare(flag) == 0:
        escaped = True
        print(f"ESCAPED unshare {name}")
    else:
        print(f"blocked unshare {name}")
    if name == "CLONE_NEWTIME":
        continue  # not a clone(2) flag (it is CSIGNAL's bit there)
    pid = libc.syscall(56, flag | SIGCHLD, 0, 0, 0, 0)  # raw clone(2): fork-like
    if pid == 0:
        os._exit(0)
    if pid > 0:
        os.waitpid(pid, 0)
        escaped = True
        print(f"ESCAPED clone {name}")
    else:
        print(f"blocked clone {name}")
for argv in (
    ["/usr/bin/unshare", "-r", "/usr/bin/true"],
    ["/usr/bin/unshare", "-U", "/usr/bin/true"],
    ["/usr/bin/nsenter", "-t", "1", "-m", "-p", "/usr/bin/true"],
):
    label = " ".join(argv[:2])
    try:
        done = subprocess.run(argv, capture_output=True, check=False)
    except OSError as error:  # e.g. ENOMEM: fork after the init of an unshared pid ns died
        print(f"could not run {label}: {error}")
        continue
    if done.returncode == 0:
        escaped = True
        print(f"ESCAPED {label}")
    else:
        print(f"blocked {label}")
sys.exit(1 if escaped else 0)
