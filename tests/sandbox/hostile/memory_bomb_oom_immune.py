# status: memory_limit
# limit_hit: memory_bytes
# limits: {"wall_time_s": 3, "memory_bytes": "128MiB"}
# attack: make itself immune to the OOM killer (oom_score_adj -1000), then eat memory with mmap
# stdout_has: b"oom_score_adj: blocked\n"
# stdout_has[gvisor]: b"oom_score_adj: "
# note[gvisor]: gVisor accepts -1000 for its own bookkeeping; the host cgroup still kills the run
import mmap
import sys

try:
    with open("/proc/self/oom_score_adj", "w") as handle:
        handle.write("-1000")
    print("oom_score_adj: set to -1000", flush=True)  # the verdict tells whether it helped
except OSError:
    print("oom_score_adj: blocked", flush=True)
maps = []
while True:
    block = mmap.mmap(-1, 16 << 20)
    for offset in range(0, len(block), 4096):
        block[offset] = 1
    maps.append(block)
    print(len(maps), file=sys.stderr)
