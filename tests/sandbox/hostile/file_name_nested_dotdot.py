# raises: TaskError
# limits: {"wall_time_s": 2}
# attack: a harmless file plus one whose ../ is hidden behind a real directory and ./
# files: {"pkg/ok.py": "", "pkg/./sub/../../../{marker}": "escaped"}
print("ESCAPED the program ran although a file name escapes")
