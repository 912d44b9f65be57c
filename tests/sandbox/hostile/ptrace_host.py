# status: ok
# limits: {"wall_time_s": 3}
# attack: ptrace-attach (ctypes, gdb, strace) to pid 1 and to the host pids of the test
# stdout_has: b"blocked ptrace 1\n"
# stdout_has: b"blocked process_vm_readv\n"
import ctypes
import os
import subprocess
import sys

libc = ctypes.CDLL(None, use_errno=True)
PTRACE_ATTACH, PTRACE_SEIZE = 16, 0x4206
escaped = False
targets = [1, int(os.environ["HOSTILE_TEST_PID"]), int(os.environ["HOSTILE_SENTINEL_PID"])]
for pid in targets:
    for request in (PTRACE_ATTACH, PTRACE_SEIZE):
        if libc.ptrace(request, pid, None, None) == 0:
            escaped = True
            print(f"ESCAPED ptrace({request}) {pid}")
    print(f"blocked ptrace {pid}")
buffer = ctypes.create_string_buffer(16)
local = (ctypes.c_void_p * 2)(ctypes.cast(buffer, ctypes.c_void_p), 16)
if libc.syscall(310, 1, local, 1, local, 1, 0) >= 0:  # process_vm_readv on pid 1
    escaped = True
    print("ESCAPED process_vm_readv")
else:
    print("blocked process_vm_readv")
for tool in (["/usr/bin/gdb", "-batch", "-p", "1"], ["/usr/bin/strace", "-p", "1"]):
    if os.path.exists(tool[0]):
        done = subprocess.run(tool, capture_output=True, timeout=2, check=False)
        print(f"{tool[0]} exited {done.returncode}")
try:
    with open("/proc/1/mem", "rb") as handle:
        handle.read(1)
    escaped = True
    print("ESCAPED read /proc/1/mem")
except OSError:
    print("blocked /proc/1/mem")
sys.exit(1 if escaped else 0)
