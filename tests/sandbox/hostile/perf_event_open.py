# status: ok
# limits: {"wall_time_s": 2}
# attack: perf_event_open(2) on itself and system-wide (side channels, kernel attack surface)
# stdout_has: b"blocked perf_event_open self\n"
# stdout_has: b"blocked perf_event_open system-wide\n"
import ctypes
import struct
import sys

libc = ctypes.CDLL(None, use_errno=True)
SYS_PERF_EVENT_OPEN = 298
PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK = 1, 0
attr = ctypes.create_string_buffer(
    struct.pack("=IIQ", PERF_TYPE_SOFTWARE, 128, PERF_COUNT_SW_CPU_CLOCK), 128
)
escaped = False
for label, pid, cpu in (("self", 0, -1), ("system-wide", -1, 0), ("pid 1", 1, -1)):
    fd = libc.syscall(SYS_PERF_EVENT_OPEN, attr, pid, cpu, -1, 0)
    if fd >= 0:
        escaped = True
        print(f"ESCAPED perf_event_open {label}")
    else:
        print(f"blocked perf_event_open {label}")
sys.exit(1 if escaped else 0)
