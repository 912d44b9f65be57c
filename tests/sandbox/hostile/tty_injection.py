# status: ok
# limits: {"wall_time_s": 2}
# attack: reach the operator's terminal: open /dev/tty, TIOCSTI keystrokes into fds 0-2
# stdout_has: b"blocked /dev/tty\n"
# stdout_has: b"blocked TIOCSTI fd 0\n"
import fcntl
import os
import sys
import termios

escaped = False
try:
    fd = os.open("/dev/tty", os.O_RDWR)
    os.write(fd, b"\x1b]0;pwned\x07")
    escaped = True
    print("ESCAPED wrote to /dev/tty")
except OSError:
    print("blocked /dev/tty")
for fd in (0, 1, 2):
    try:
        fcntl.ioctl(fd, termios.TIOCSTI, b"#")
        escaped = True
        print(f"ESCAPED TIOCSTI fd {fd}")
    except OSError:
        print(f"blocked TIOCSTI fd {fd}")
sys.exit(1 if escaped else 0)
