# status: ok
# limits: {"wall_time_s": 2}
# attack: symlinks and hard links made in /work to host paths, then read and written through
# stdout_has: b"blocked read link-shadow: "
# stdout_has: b"blocked write link-etc\n"
import os
import sys

marker = sys.argv[1]
checkout = os.environ.get("HOSTILE_CHECKOUT", "/work/main")
links = {
    "link-shadow": "/etc/shadow",
    "link-etc": "/etc",
    "link-root": "/root",
    "link-checkout": checkout,
    "link-pyproject": os.path.join(checkout, "pyproject.toml"),
    "link-pid1-root": "/proc/1/root/etc/shadow",
    "link-pid1-cwd": "/proc/1/cwd",
    "link-up": "../../../../../../../etc",
    "link-tmp": "/tmp/../../etc/shadow",
}
escaped = False
for name, target in links.items():
    os.symlink(target, name)
    try:
        if os.path.isdir(name):
            print(f"listed {name}: {sorted(os.listdir(name))[:5]}")
        with open(name, "rb") as handle:
            data = handle.read(64)
        escaped = True
        print(f"ESCAPED read {name} -> {target}: {data!r}")
    except OSError as error:
        print(f"blocked read {name}: {error.strerror}")
    try:
        with open(os.path.join(name, marker), "w") as handle:
            handle.write("x")
    except OSError:
        print(f"blocked write {name}")
        continue
    landed = os.path.realpath(os.path.join(name, marker))
    if landed.startswith(("/work/", "/tmp/")):  # e.g. /proc/1/cwd when pid 1 is ours
        print(f"write {name} stayed inside: {landed}")
    else:
        escaped = True
        print(f"ESCAPED write {name} -> {landed}")
for source in ("/usr/bin/python3", sys.executable, "/proc/1/exe"):
    try:
        os.link(source, f"hard-{os.path.basename(source)}")
        print(f"linked {source} (read-only, same mount only)")
    except OSError as error:
        print(f"blocked link {source}: {error.strerror}")
sys.exit(1 if escaped else 0)
