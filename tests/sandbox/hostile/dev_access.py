# status: ok
# limits: {"wall_time_s": 2}
# attack: open raw devices (/dev/mem, /dev/sda, /dev/vda, /dev/kmsg...), mknod and open new ones
# stdout_has: b"blocked /dev/mem\n"
# stdout_has: b"blocked /dev/kmsg\n"
# stdout_has: b"blocked mknod block 8:0\n"
# stdout_has[gvisor]: b"blocked /dev/mem\n"
# stdout_has[gvisor]: b"mknod block 8:0: created, but unreachable\n"
# note[gvisor]: gVisor lets uid 65534 mknod without CAP_MKNOD, but its nodes lead nowhere (ENXIO)
import fcntl
import os
import stat
import struct
import sys

devices = [
    "/dev/mem",
    "/dev/kmem",
    "/dev/port",
    "/dev/sda",
    "/dev/vda",
    "/dev/nvme0n1",
    "/dev/kmsg",
    "/dev/console",
    "/dev/loop0",
    "/dev/vsock",
    "/dev/cpu/0/msr",
]
escaped = False
for path in devices:
    try:
        fd = os.open(path, os.O_RDWR)
        os.close(fd)
        escaped = True
        print(f"ESCAPED opened {path} read-write")
    except OSError:
        print(f"blocked {path}")
try:  # /dev/net/tun is 0666 on Linux: opening it is normal, making an interface is not
    with open("/dev/net/tun", "r+b", buffering=0) as tun:
        fcntl.ioctl(tun, 0x400454CA, struct.pack("16sH", b"evil0", 0x0001))  # TUNSETIFF
    escaped = True
    print("ESCAPED created a tun interface")
except OSError:
    print("blocked tun interface")
for label, kind, major, minor in (
    ("block 8:0", stat.S_IFBLK, 8, 0),
    ("block 254:0", stat.S_IFBLK, 254, 0),
    ("char 1:1", stat.S_IFCHR, 1, 1),
):
    node = f"node-{major}-{minor}"
    try:
        os.mknod(node, kind | 0o666, os.makedev(major, minor))
    except OSError:
        print(f"blocked mknod {label}")
        continue
    try:
        fd = os.open(node, os.O_RDONLY)
        data = os.read(fd, 16)
        escaped = True
        print(f"ESCAPED mknod {label}: read {data!r}")
    except OSError:
        print(f"mknod {label}: created, but unreachable")
sys.exit(1 if escaped else 0)
