# status: ok
# limits: {"wall_time_s": 5}
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
        try:  # informational: the ptrace calls above decide; a loaded host starts gdb slowly
            done = subprocess.run(tool, capture_output=True, timeout=2, check=False)
        except subprocess.TimeoutExpired:
            print(f"{tool[0]} did not finish in 2 s")
        else:
            print(f"{tool[0]} exited {done.returncode}")
# /proc/1/mem of a same-uid, dumpable init opens for writing (no ptrace call needed), and
# then its exit status could be rewritten. Reading at address 0 fails anyway: read at a
# mapped address, and opening it at all is the escape.
try:
    with open("/proc/1/maps", "rb") as handle:
        mapped = int(handle.readline().split(b"-")[0], 16)
except (OSError, ValueError):
    mapped = 0x400000
for mode in ("rb", "r+b") if os.getpid() != 1 else ():  # gVisor: the program is PID 1
    try:
        with open("/proc/1/mem", mode) as handle:
            escaped = True
            print(f"ESCAPED open /proc/1/mem {mode}")
            handle.seek(mapped)
            handle.read(1)
    except OSError:
        pass
if not escaped:
    print("blocked /proc/1/mem")
sys.exit(1 if escaped else 0)
