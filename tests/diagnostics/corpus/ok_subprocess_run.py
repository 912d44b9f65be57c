# expect: none
# A child process per call, waited for by subprocess.run.
import subprocess


def f(x):
    subprocess.run(["true"], check=True)
    return x
