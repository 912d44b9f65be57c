# status: time_limit
# limit_hit: wall_time_s
# limits: {"wall_time_s": 1}
# attack: close stdin, stdout and stderr (EOF on every pipe), then keep running
import os

os.write(1, b"closing\n")
for fd in (0, 1, 2):
    os.close(fd)
while True:
    pass
