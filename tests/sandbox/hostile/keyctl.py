# status: ok
# limits: {"wall_time_s": 2}
# attack: kernel keyrings (not namespaced): plant a key in uid 65534's user keyring for later runs
# stdout_has: b"blocked add_key @u\n"
# stdout_has: b"blocked keyctl read @u\n"
import ctypes
import sys

libc = ctypes.CDLL(None, use_errno=True)
SYS_ADD_KEY, SYS_KEYCTL, SYS_REQUEST_KEY = 248, 250, 249
KEY_SPEC_USER_KEYRING, KEY_SPEC_SESSION_KEYRING = -4, -3
KEYCTL_GET_KEYRING_ID, KEYCTL_JOIN_SESSION_KEYRING, KEYCTL_READ = 0, 1, 11
marker = sys.argv[1].encode()
escaped = False


def check(label: str, result: int) -> None:
    global escaped
    if result >= 0:
        escaped = True
        print(f"ESCAPED {label} = {result}")
    else:
        print(f"blocked {label}")


for ring, label in ((KEY_SPEC_USER_KEYRING, "@u"), (KEY_SPEC_SESSION_KEYRING, "@s")):
    check(
        f"add_key {label}",
        libc.syscall(SYS_ADD_KEY, b"user", marker, b"planted", 7, ring),
    )
check("keyctl join session", libc.syscall(SYS_KEYCTL, KEYCTL_JOIN_SESSION_KEYRING, None))
check("keyctl get @u", libc.syscall(SYS_KEYCTL, KEYCTL_GET_KEYRING_ID, KEY_SPEC_USER_KEYRING, 0))
buffer = ctypes.create_string_buffer(4096)
check(
    "keyctl read @u",
    libc.syscall(SYS_KEYCTL, KEYCTL_READ, KEY_SPEC_USER_KEYRING, buffer, 4096),
)
check(
    "request_key",
    libc.syscall(SYS_REQUEST_KEY, b"user", marker, None, KEY_SPEC_USER_KEYRING),
)
sys.exit(1 if escaped else 0)
