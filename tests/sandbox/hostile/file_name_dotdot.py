# raises: TaskError
# limits: {"wall_time_s": 2}
# attack: a provided file name climbing out of the work dir with ../ (into the host's /tmp)
# files: {"../../../../tmp/{marker}": "escaped"}
# see: sandbox/test_sandbox.py::test_file_names_cannot_escape_the_work_dir
print("ESCAPED the program ran although a file name escapes")
