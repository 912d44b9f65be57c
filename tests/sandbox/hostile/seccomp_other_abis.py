# status: ok
# limits: {"wall_time_s": 2}
# attack: dodge a 64-bit-only seccomp filter through the i386 (int 0x80) and x32 syscall tables
# stdout_re: rb"^(blocked i386 unshare: errno 1|no ia32 emulation.*|not x86_64)$"
# stdout_has: b"blocked x32 unshare"
import ctypes
import os
import platform
import sys

if platform.machine() != "x86_64":
    print("not x86_64\nblocked x32 unshare: nothing to try")
    sys.exit(0)
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int]
libc.mmap.argtypes += [ctypes.c_int, ctypes.c_long]
PROT_RWX, MAP_PRIVATE_ANON_32BIT = 7, 0x02 | 0x20 | 0x40
page = libc.mmap(None, 4096, PROT_RWX, MAP_PRIVATE_ANON_32BIT, -1, 0)
# long f(nr, a, b, c, d, e): eax=nr ebx=a ecx=b edx=c esi=d edi=e; int 0x80; sign-extend
code = bytes.fromhex("53 55 89f8 89f3 4989d3 89ca 4489d9 4489c6 4489cf cd80 4863c0 5d 5b c3")
ctypes.memmove(page, code, len(code))
int80 = ctypes.CFUNCTYPE(ctypes.c_long, *[ctypes.c_long] * 6)(page)
strings = page + 1024  # below 4 GiB, as 32-bit pointers must be
ctypes.memmove(strings, b"user\0planted\0", 13)
I386 = {  # name: (number, args) in the i386 table
    "unshare": (310, (0x10000000, 0, 0, 0, 0)),
    "add_key": (286, (strings, strings + 5, strings + 5, 7, -4 & 0xFFFFFFFF)),
    "keyctl": (288, (0, -4 & 0xFFFFFFFF, 0, 0, 0)),
    "ptrace": (26, (16, 1, 0, 0, 0)),
    "mount": (21, (strings, strings, strings, 0, 0)),
}
read_end, write_end = os.pipe()
child = os.fork()
if child == 0:  # int 0x80 is SIGSEGV where ia32 emulation is off: try it in a child
    os.close(read_end)
    if int80(20, 0, 0, 0, 0, 0) != os.getpid():
        os.write(write_end, b"no ia32 emulation: getpid failed\n")
        os._exit(0)
    for name, (number, args) in I386.items():
        result = int80(number, *args)
        if result >= 0:
            line = f"ESCAPED i386 {name} = {result}"
        else:
            line = f"blocked i386 {name}: errno {-result}"
        os.write(write_end, line.encode() + b"\n")
    os._exit(0)
os.close(write_end)
with os.fdopen(read_end, "rb") as pipe:
    report = pipe.read().decode()
_, status = os.waitpid(child, 0)
print(report or f"no ia32 emulation (wait status {status})")
X32 = 0x40000000
for name, number, args in (
    ("unshare", 272, (0x10000000,)),
    ("keyctl", 250, (0, -4, 0)),
    ("bpf", 321, (0, None, 0)),
):
    result = libc.syscall(X32 | number, *args)
    error = ctypes.get_errno()
    print(f"ESCAPED x32 {name}" if result >= 0 else f"blocked x32 {name}: errno {error}")
sys.exit(1 if "ESCAPED" in report else 0)
