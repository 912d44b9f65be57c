# status: ok
# limits: {"wall_time_s": 2}
# attack: open an AF_VSOCK socket: vsock ignores network namespaces and reaches the hypervisor
# stdout_has: b"blocked AF_VSOCK: EPERM\n"
# note: the seccomp filter allow-lists socket families; vsock is always refused
# note[gvisor]: the same allow-list, as the OCI seccomp profile (gVisor has no vsock)
import errno
import socket
import sys

AF_VSOCK = getattr(socket, "AF_VSOCK", 40)
try:
    socket.socket(AF_VSOCK, socket.SOCK_STREAM).close()
except OSError as error:
    # EPERM is the sandbox refusing; EAFNOSUPPORT is a kernel without vsock.
    print(f"blocked AF_VSOCK: {errno.errorcode[error.errno]}")
    sys.exit(0)
# No connect: the far end would be the hypervisor, which is not ours to poke.
print("ESCAPED created an AF_VSOCK socket")
sys.exit(1)
