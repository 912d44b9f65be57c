# status: time_limit
# limit_hit: wall_time_s
# limits: {"wall_time_s": 1}
# attack: print, then sleep for an hour: the clock must run while the program sleeps
# stdout_has: b"going to sleep\n"
import time

print("going to sleep", flush=True)
time.sleep(3600)
