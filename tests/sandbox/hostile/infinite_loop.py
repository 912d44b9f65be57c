# status: time_limit
# limit_hit: wall_time_s
# limits: {"wall_time_s": 1}
# attack: a busy infinite loop
# see: test_field_cases.py::test_bc10_timeouts_kill_every_process_of_the_run
while True:
    pass
