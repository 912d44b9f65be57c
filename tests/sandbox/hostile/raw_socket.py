# status: ok
# limits: {"wall_time_s": 2}
# attack: open raw IP and packet sockets (SOCK_RAW, AF_PACKET) to forge or sniff; ping out
# stdout_has: b"blocked AF_INET SOCK_RAW\n"
# stdout_has: b"blocked AF_PACKET SOCK_RAW\n"
# stdout_has: b"blocked ping 1.1.1.1\n"
import socket
import sys

attempts = {
    "AF_INET SOCK_RAW": (socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP),
    "AF_INET6 SOCK_RAW": (socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6),
    "AF_INET SOCK_RAW IPPROTO_RAW": (socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW),
    "AF_PACKET SOCK_RAW": (socket.AF_PACKET, socket.SOCK_RAW, 0x0300),
}
escaped = False
for label, args in attempts.items():
    try:
        socket.socket(*args).close()
        escaped = True
        print(f"ESCAPED {label}")
    except OSError:
        print(f"blocked {label}")
try:  # an unprivileged ICMP "ping socket": harmless unless an echo request can leave
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM, socket.IPPROTO_ICMP) as ping:
        ping.sendto(bytes.fromhex("0800f7ff00000000"), ("1.1.1.1", 0))
    escaped = True
    print("ESCAPED ping 1.1.1.1 sent")
except OSError:
    print("blocked ping 1.1.1.1")
sys.exit(1 if escaped else 0)
