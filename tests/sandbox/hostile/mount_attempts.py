# status: ok
# limits: {"wall_time_s": 2}
# attack: mount a tmpfs (setuid /usr/bin/mount and the raw syscall), remount /usr rw, umount /proc
# stdout_has: b"blocked mount(2) tmpfs\n"
# stdout_has: b"blocked remount /usr rw\n"
import ctypes
import os
import subprocess
import sys

libc = ctypes.CDLL(None, use_errno=True)
MS_REMOUNT, MS_BIND = 0x20, 0x1000
os.makedirs("mnt", exist_ok=True)
escaped = False


def check(label: str, result: int) -> None:
    global escaped
    if result == 0:
        escaped = True
        print(f"ESCAPED {label}")
    else:
        print(f"blocked {label}")


check("mount(2) tmpfs", libc.mount(b"none", b"/work/mnt", b"tmpfs", 0, None))
check("remount /usr rw", libc.mount(None, b"/usr", None, MS_REMOUNT | MS_BIND, None))
check("bind / onto /work/mnt", libc.mount(b"/", b"/work/mnt", None, MS_BIND, None))
check("umount /proc", libc.umount2(b"/proc", 2))
check("chroot /tmp", libc.chroot(b"/tmp"))
check("pivot_root", libc.syscall(155, b"/tmp", b"/tmp"))
for argv in (
    ["/usr/bin/mount", "-t", "tmpfs", "none", "/work/mnt"],
    ["/usr/bin/mount", "-o", "remount,rw", "/usr"],
    ["/usr/bin/umount", "/usr"],
):
    done = subprocess.run(argv, capture_output=True, check=False)
    check(" ".join(argv), done.returncode)
with open("/proc/self/mountinfo") as handle:
    if any(" /work/mnt " in line for line in handle):
        escaped = True
        print("ESCAPED /work/mnt is a mount point")
sys.exit(1 if escaped else 0)
