# status: memory_limit
# limit_hit: memory_bytes
# limits: {"wall_time_s": 3, "memory_bytes": "128MiB", "disk_bytes": "512MiB",
#   "max_file_bytes": "1GiB"}
# attack: a tmpfs bigger than the memory limit: fill the work dir to hold memory outside the heap
# status[rlimits]: runtime_error
# limit_hit[rlimits]: none
# stderr_has[rlimits]: b"No space left on device"
# note[rlimits]: without a memory cgroup nothing counts tmpfs pages against memory_bytes;
#   the tmpfs size (disk_bytes) is what stops the program, at 512 MiB
with open("big", "wb") as handle:
    while True:
        handle.write(b"x" * (1 << 20))
        handle.flush()
