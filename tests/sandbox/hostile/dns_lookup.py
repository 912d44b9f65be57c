# status: ok
# limits: {"wall_time_s": 3}
# attack: resolve a public name, then send a DNS query straight to public resolvers
# see: test_field_cases.py::test_bc26_egress_fails_at_once
# stdout_has: b"blocked getaddrinfo\n"
import socket
import sys

escaped = False
try:
    found = socket.getaddrinfo("example.com", 443)
    escaped = True
    print(f"ESCAPED resolved example.com: {found[0][4]}")
except OSError:
    print("blocked getaddrinfo")
query = bytes.fromhex("abcd01000001000000000000076578616d706c6503636f6d0000010001")
for resolver in ("1.1.1.1", "8.8.8.8", "2606:4700:4700::1111"):
    family = socket.AF_INET6 if ":" in resolver else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as udp:
            udp.settimeout(1)
            udp.sendto(query, (resolver, 53))
            udp.recv(512)
        escaped = True
        print(f"ESCAPED answer from {resolver}")
    except OSError:
        print(f"blocked {resolver}")
sys.exit(1 if escaped else 0)
