# status: output_limit
# limit_hit: max_output_bytes
# limits: {"wall_time_s": 3, "max_output_bytes": "1MiB"}
# wall_time_below_s: 2.0
# attack: write 1 GB to stdout as fast as possible
import os

chunk = b"x" * (1 << 20)
for _ in range(1000):
    os.write(1, chunk)
