r"""The waiting program of a prestarted bwrap sandbox. Runs INSIDE it; standard library only.

A prestarted sandbox (see :mod:`execgym.sandbox._prestart`) is a complete bwrap sandbox
(namespaces, mounts, seccomp filter, uid 65534, no capabilities) whose command is this
script, started before its run is known. It waits, with no untrusted code and nothing
of any run in it, for one job on the descriptor named by its first argument (after
writing one byte on the second, to say it has started): a ``marshal``
dump, written by the host and ended by EOF, of a dict with

- ``argv``, ``env``: the program and its complete environment;
- ``dirs``, ``files``: directories and ``(name, bytes)`` to create in the work dir
  (names already checked by the host to stay inside it);
- ``stdin``: bytes for stdin (empty: ``/dev/null``);
- ``report``: whether fd 3 (the report channel) stays open for the program;
- ``rlimits``: ``(resource, soft, hard)``.

It writes the files, puts stdin in place, closes every descriptor but 0-2 (and 3 when
the program wants the report channel), sets the rlimits and ``execve``\ s the program,
which so replaces it in the same process: the program's process, namespaces and limits
are those of a freshly started bwrap sandbox. The CPU rlimit is raised by the CPU time
this script used itself, so the program gets exactly its budget. If the program cannot
be executed it says so on stderr and exits with 127, as a shell does. EOF without a job
(the host dropped the sandbox) exits quietly.
"""

import marshal
import os
import resource
import sys


def find(program, path):
    if "/" in program:
        return program
    for directory in path.split(":"):
        candidate = os.path.join(directory or ".", program)
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return candidate
    return program


def main():
    fd, ready = int(sys.argv[1]), int(sys.argv[2])
    os.write(ready, b"r")  # started: the host starts the run's clock after this
    os.close(ready)
    chunks = []
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            break
        chunks.append(chunk)
    if not chunks:
        os._exit(0)
    job = marshal.loads(b"".join(chunks))
    del chunks
    os.close(fd)
    for directory in job["dirs"]:
        os.mkdir(directory, 0o777)
        os.chmod(directory, 0o777)
    for name, content in job["files"]:
        out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
        view = memoryview(content)
        while view:
            view = view[os.write(out, view) :]
        os.close(out)
        os.chmod(name, 0o666)
    if job["stdin"]:
        data = os.memfd_create("stdin")
        view = memoryview(job["stdin"])
        while view:
            view = view[os.write(data, view) :]
        os.lseek(data, 0, os.SEEK_SET)
        os.dup2(data, 0)
        os.close(data)
    keep = 4 if job["report"] else 3
    os.closerange(keep, 1 << 16)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    used_s = int(usage.ru_utime + usage.ru_stime) + 1
    for kind, soft, hard in job["rlimits"]:
        if kind == resource.RLIMIT_CPU:
            soft, hard = soft + used_s, hard + used_s
        resource.setrlimit(kind, (soft, hard))
    argv, env = job["argv"], job["env"]
    program = find(argv[0], env.get("PATH", "/usr/bin:/bin"))
    try:
        os.execve(program, argv, env)
    except OSError as error:
        message = "execgym: cannot execute " + repr(argv[0]) + ": " + str(error.strerror)
        os.write(2, (message + "\n").encode())
        os._exit(127)


main()
