# status: ok
# limits: {"wall_time_s": 2}
# attack: look for host secrets: env API keys, /etc/shadow, /root, the checkout, /proc/*/environ
# see: test_field_cases.py::test_bc28_host_secrets_and_files_are_invisible
# stdout_has: b"no key in os.environ\n"
# stdout_has: b"blocked /etc/shadow\n"
import os
import sys

checkout = os.environ.get("HOSTILE_CHECKOUT", "/work/main")
escaped = False
keys = sorted(k for k in os.environ if any(w in k for w in ("KEY", "TOKEN", "SECRET")))
print(f"ESCAPED keys {keys}" if keys else "no key in os.environ")
escaped |= bool(keys)
paths = [
    "/etc/shadow",
    "/etc/passwd",
    "/root/.bash_history",
    "/root/.ssh/id_rsa",
    "/root/.gitconfig",
    os.path.join(checkout, "pyproject.toml"),
    os.path.join(checkout, ".git/config"),
    os.path.join(checkout, "src/execgym/sandbox/bwrap.py"),
]
for path in paths:
    try:
        with open(path, "rb") as handle:
            handle.read(1)
        escaped = True
        print(f"ESCAPED read {path}")
    except OSError:
        print(f"blocked {path}")
for pid in sorted(p for p in os.listdir("/proc") if p.isdigit()):
    for part in ("environ", "cmdline"):
        try:
            with open(f"/proc/{pid}/{part}", "rb") as handle:
                text = handle.read()
        except OSError as error:
            print(f"blocked /proc/{pid}/{part}: {error.strerror}")
            continue
        if b"KEY" in text or b"TOKEN" in text:
            escaped = True
            print(f"ESCAPED secret-looking text in /proc/{pid}/{part}")
        print(f"/proc/{pid}/{part}: {len(text)} bytes")
try:
    listing = sorted(os.listdir("/root"))
    print(f"/root holds {listing}")
except OSError:
    print("blocked /root")
sys.exit(1 if escaped else 0)
