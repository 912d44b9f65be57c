# status: memory_limit
# limit_hit: memory_bytes
# limits: {"wall_time_s": 3, "memory_bytes": "128MiB"}
# attack: memory bomb: keep allocating and touching 8 MiB blocks forever
# see: test_field_cases.py::test_bc15_memory_hog_is_mle_and_its_neighbour_is_unaffected
import sys

blocks = []
while True:
    blocks.append(bytearray(b"x" * (8 << 20)))
    print(len(blocks), file=sys.stderr)
