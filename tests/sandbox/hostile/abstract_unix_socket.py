# status: ok
# limits: {"wall_time_s": 2}
# attack: connect to an abstract Unix socket the test listens on in the host's network namespace
# stdout_has: b"blocked abstract socket\n"
import os
import socket
import sys

name = "\0" + os.environ["HOSTILE_ABSTRACT_SOCKET"]
client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
client.settimeout(1)
try:
    client.connect(name)
    client.sendall(b"hello from the sandbox")
    print("ESCAPED connected to the host's abstract socket")
    sys.exit(1)
except OSError:
    print("blocked abstract socket")
