# status: ok
# limits: {"wall_time_s": 2}
# attack: bpf(2): create a map and load a socket-filter program (kernel attack surface)
# stdout_has: b"blocked BPF_MAP_CREATE\n"
# stdout_has: b"blocked BPF_PROG_LOAD\n"
import ctypes
import struct
import sys

libc = ctypes.CDLL(None, use_errno=True)
SYS_BPF = 321
BPF_MAP_CREATE, BPF_PROG_LOAD = 0, 5
BPF_MAP_TYPE_ARRAY, BPF_PROG_TYPE_SOCKET_FILTER = 2, 1
escaped = False
attr = ctypes.create_string_buffer(struct.pack("=IIII", BPF_MAP_TYPE_ARRAY, 4, 4, 1), 128)
fd = libc.syscall(SYS_BPF, BPF_MAP_CREATE, attr, 128)
print(f"ESCAPED BPF_MAP_CREATE fd {fd}" if fd >= 0 else "blocked BPF_MAP_CREATE")
escaped |= fd >= 0
program = ctypes.create_string_buffer(
    struct.pack("=BBhi", 0xB7, 0, 0, 0) + struct.pack("=BBhi", 0x95, 0, 0, 0)  # r0 = 0; exit
)
license_ = ctypes.create_string_buffer(b"GPL")
attr = ctypes.create_string_buffer(
    struct.pack(
        "=IIQQ",
        BPF_PROG_TYPE_SOCKET_FILTER,
        2,
        ctypes.addressof(program),
        ctypes.addressof(license_),
    ),
    128,
)
fd = libc.syscall(SYS_BPF, BPF_PROG_LOAD, attr, 128)
print(f"ESCAPED BPF_PROG_LOAD fd {fd}" if fd >= 0 else "blocked BPF_PROG_LOAD")
escaped |= fd >= 0
sys.exit(1 if escaped else 0)
