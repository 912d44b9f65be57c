# status: runtime_error
# exit_code: 7
# limits: {"wall_time_s": 2}
# attack: point stdout and stderr at /dev/null, keep writing, then exit 7
# stdout_has: b"before\n"
# output_lacks: b"after"
import os

os.write(1, b"before\n")
devnull = os.open("/dev/null", os.O_WRONLY)
os.dup2(devnull, 1)
os.dup2(devnull, 2)
for _ in range(1000):
    os.write(1, b"after\n")
    os.write(2, b"after\n")
os._exit(7)
