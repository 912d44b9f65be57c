# status: ok
# limits: {"wall_time_s": 2}
# attack: raise every rlimit above its hard limit (and the hard limits themselves)
# stdout_has: b"blocked RLIMIT_CPU\n"
# stdout_has: b"blocked RLIMIT_FSIZE\n"
# stdout_has: b"blocked RLIMIT_NOFILE\n"
# stdout_has: b"blocked RLIMIT_CORE\n"
# stdout_has[gvisor]: b"blocked RLIMIT_FSIZE\n"
# stdout_has[gvisor]: b"blocked RLIMIT_NOFILE\n"
# stdout_has[gvisor]: b"blocked RLIMIT_CORE\n"
# note[gvisor]: no RLIMIT_CPU inside gVisor: the host cgroup alone enforces cpu_time_s
import resource
import sys

escaped = False
for name in sorted(n for n in dir(resource) if n.startswith("RLIMIT_")):
    kind = getattr(resource, name)
    soft, hard = resource.getrlimit(kind)
    if hard == resource.RLIM_INFINITY:
        print(f"unlimited {name}")
        continue
    try:
        resource.setrlimit(kind, (hard + 1, hard + 1))
    except (OSError, ValueError):
        print(f"blocked {name}")
    else:
        escaped = True
        print(f"ESCAPED {name} raised to {resource.getrlimit(kind)}")
sys.exit(1 if escaped else 0)
