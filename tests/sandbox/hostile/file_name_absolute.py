# raises: TaskError
# limits: {"wall_time_s": 2}
# attack: a provided file name that is an absolute host path through /proc/self/root
# files: {"/proc/self/root/tmp/{marker}": "escaped"}
print("ESCAPED the program ran although a file name is absolute")
