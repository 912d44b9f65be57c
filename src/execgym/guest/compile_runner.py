"""The compile driver, run INSIDE the sandbox (standard library only).

Protocol: it writes ``START_MARKER`` to fd 3 first; stdin holds a JSON job
``{"argv": [...], "outputs": [...]}``. It runs the compiler in the work dir with its
stdout and stderr merged, then writes to fd 3 one JSON line ``{"exit_code": N,
"message": "<compiler output, last 16000 characters>"}`` and, when the compiler
succeeded, the outputs (each file under the named files and directories) as records:
name length (4 bytes, big-endian), UTF-8 name, size (8 bytes), contents.
"""

import json
import os
import subprocess
import sys

START_MARKER = b"EXECGYM-START\n"


def write_all(data):
    view = memoryview(data)
    while view:
        view = view[os.write(3, view) :]


def files_under(path):
    if os.path.isdir(path):
        for root, _, names in os.walk(path):
            for name in sorted(names):
                yield os.path.join(root, name)
    elif os.path.isfile(path):
        yield path


def main():
    os.write(3, START_MARKER)
    job = json.loads(sys.stdin.read())
    try:
        done = subprocess.run(
            job["argv"], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        code, output = done.returncode, done.stdout
    except OSError as error:
        code, output = 127, f"cannot start the compiler: {error}".encode()
    message = output.decode("utf-8", "replace")[-16000:]
    write_all(json.dumps({"exit_code": code, "message": message}).encode() + b"\n")
    if code != 0:
        return
    for output_path in job["outputs"]:
        for path in files_under(output_path):
            name = path.encode("utf-8")
            with open(path, "rb") as handle:
                data = handle.read()
            write_all(len(name).to_bytes(4, "big") + name + len(data).to_bytes(8, "big"))
            write_all(data)


main()
