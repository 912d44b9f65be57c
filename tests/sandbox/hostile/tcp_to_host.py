# status: ok
# limits: {"wall_time_s": 3}
# attack: connect to a TCP server the test runs on the host (127.0.0.1 and the host's address)
# see: test_field_cases.py::test_bc26_host_services_are_unreachable
# stdout_has: b"blocked 127.0.0.1\n"
import os
import socket
import sys

port = int(os.environ["HOSTILE_PORT"])
targets = ["127.0.0.1", "localhost", "::1", os.environ.get("HOSTILE_HOST_ADDRESS", "")]
escaped = False
for host in filter(None, targets):
    try:
        socket.create_connection((host, port), timeout=1).close()
        escaped = True
        print(f"ESCAPED connected to {host}:{port}")
    except OSError:
        print(f"blocked {host}")
sys.exit(1 if escaped else 0)
