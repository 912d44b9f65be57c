"""The agent of a persistent session. Runs INSIDE a bwrap sandbox, unprivileged.

As an ordinary user it is uid 65534 of the sandbox's user namespace; as root, a host
uid of the session's own (:mod:`execgym.sandbox._uids`).

It serves requests from the host over a Unix SEQPACKET socket (its fd number is the
last argument), each a JSON header plus descriptors:

- ``{"op": "write", "id": n}`` + [archive]: write files into /work (the archive packs,
  per file: name size (4 bytes), name, size (8 bytes), content);
- ``{"op": "read", "id": n, "name": str, "max_bytes": int}``: answered with the file's
  bytes in an in-memory file passed back;
- ``{"op": "run", "id": n, "argv": [...], "env": {...}, "rlimits": [[kind, soft, hard]...]}``
  + [stdin, stdout, stderr, report?]: start the command in its own session (process
  group) with those descriptors on fds 0-3; answered ``{"id", "started": pid}``, then
  ``{"id", "status": wait status}`` when it ends;
- ``{"op": "kill", "id": n}``: SIGKILL the command's process group;
- ``{"op": "list", "id": n, "name": str, "max_entries": int}``: answered ``{"id",
  "entries": [[name, "file"|"dir"|"link"|"other", size]...], "truncated"}``;
- ``{"op": "export", "id": n, "skip": [dir names]}``: answered with a tar archive of
  /work (regular files, directories and symlinks, never following one) in an in-memory
  file passed back.

Every answer carries ``"id"``; a failed request is answered ``{"id", "error": text}``.
The agent holds no secret: the commands run as the same user and may kill it, which
ends the session (the host then reports it closed).
"""

import array
import json
import os
import resource
import select
import signal
import socket
import stat
import subprocess
import sys
import tarfile


def unpack(data):
    offset = 0
    while offset < len(data):
        size = int.from_bytes(data[offset : offset + 4], "little")
        name = data[offset + 4 : offset + 4 + size].decode("utf-8")
        offset += 4 + size
        length = int.from_bytes(data[offset : offset + 8], "little")
        yield name, data[offset + 8 : offset + 8 + length]
        offset += 8 + length


def inside_work(name):
    path = os.path.realpath(os.path.join("/work", name))
    if path != "/work" and not path.startswith("/work/"):
        raise ValueError(f"file name {name!r} leaves /work")
    return path


def write_files(fd):
    data = os.pread(fd, os.fstat(fd).st_size, 0)
    for name, content in unpack(data):
        path = inside_work(name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(content)


def read_file(name, max_bytes):
    with open(inside_work(name), "rb") as handle:
        content = handle.read(max_bytes + 1)
    fd = os.memfd_create("execgym-read", os.MFD_CLOEXEC)
    os.write(fd, content)
    return fd, len(content) > max_bytes


def list_dir(name, max_entries):
    path = inside_work(name)
    entries = []
    with os.scandir(path) as listing:
        for entry in sorted(listing, key=lambda e: e.name):
            if len(entries) >= max_entries:
                return entries, True
            if entry.is_symlink():
                kind = "link"
            elif entry.is_dir():
                kind = "dir"
            elif entry.is_file():
                kind = "file"
            else:
                kind = "other"
            size = entry.stat(follow_symlinks=False).st_size if kind == "file" else 0
            entries.append([entry.name, kind, size])
    return entries, False


def make_readable(top):
    # The commands may have taken permissions away (chmod 000): every file here is
    # ours, so give them back before packing.
    for root, dirs, files in os.walk(top):
        for name in dirs + files:
            path = os.path.join(root, name)
            try:
                mode = os.lstat(path).st_mode
                if not stat.S_ISLNK(mode):
                    os.chmod(path, mode | (0o700 if stat.S_ISDIR(mode) else 0o600))
            except OSError:
                pass


def export(skip):
    fd = os.memfd_create("execgym-export", os.MFD_CLOEXEC)
    skipped = set(skip)
    make_readable("/work")

    def keep(info):
        parts = info.name.split("/")
        if skipped.intersection(parts) or not (info.isfile() or info.isdir() or info.issym()):
            return None
        return info

    with (
        os.fdopen(os.dup(fd), "wb") as handle,
        tarfile.open(fileobj=handle, mode="w", format=tarfile.PAX_FORMAT) as archive,
    ):
        for entry in sorted(os.listdir("/work")):
            archive.add(os.path.join("/work", entry), arcname=entry, filter=keep)
    return fd


def start(header, fds):
    stdin, stdout, stderr = fds[:3]
    report = fds[3] if len(fds) > 3 else None
    rlimits = header.get("rlimits", [])

    def prepare():
        if report is not None:
            os.dup2(report, 3, inheritable=True)
        for kind, soft, hard in rlimits:
            resource.setrlimit(kind, (soft, hard))

    return subprocess.Popen(
        header["argv"],
        stdin=stdin,
        stdout=stdout,
        stderr=stderr,
        env=header["env"],
        cwd=header.get("cwd", "/work"),
        start_new_session=True,
        preexec_fn=prepare,
        pass_fds=(3,) if report is not None else (),
        close_fds=True,
    )


def serve(control):
    commands = {}  # pid -> (request id, Popen)
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    control.send(json.dumps({"ready": os.getpid()}).encode())
    while True:
        readable, _, _ = select.select([control, wake_read], [], [])
        if wake_read in readable:
            os.read(wake_read, 4096)
        for pid, (request, process) in list(commands.items()):
            status = process.poll()
            if status is not None:
                del commands[pid]
                wait_status = (-status) if status < 0 else status << 8
                control.send(json.dumps({"id": request, "status": wait_status}).encode())
        if control not in readable:
            continue
        fds = array.array("i")
        message, ancillary, _, _ = control.recvmsg(1 << 20, socket.CMSG_SPACE(8 * 4))
        if not message:
            return
        for level, kind, data in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(data[: len(data) - (len(data) % fds.itemsize)])
        header = json.loads(message)
        request = header.get("id")
        try:
            if header["op"] == "write":
                write_files(fds[0])
                control.send(json.dumps({"id": request, "ok": True}).encode())
            elif header["op"] == "read":
                fd, truncated = read_file(header["name"], header["max_bytes"])
                control.sendmsg(
                    [json.dumps({"id": request, "ok": True, "truncated": truncated}).encode()],
                    [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd]))],
                )
                os.close(fd)
            elif header["op"] == "run":
                process = start(header, list(fds))
                commands[process.pid] = (request, process)
                control.send(json.dumps({"id": request, "started": process.pid}).encode())
            elif header["op"] in ("list", "export"):
                if header["op"] == "list":
                    entries, truncated = list_dir(header["name"], header["max_entries"])
                    answer, given = {"entries": entries, "truncated": truncated}, []
                else:
                    answer, given = {}, [export(header.get("skip", []))]
                control.sendmsg(
                    [json.dumps({"id": request, "ok": True, **answer}).encode()],
                    [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", given))]
                    if given
                    else [],
                )
                for fd in given:
                    os.close(fd)
            elif header["op"] == "kill":
                for pid, (running, _) in commands.items():
                    if running == header["target"]:
                        try:
                            os.killpg(pid, signal.SIGKILL)
                        except OSError:
                            pass
        except Exception as error:  # a bad request fails alone; the session goes on
            control.send(
                json.dumps({"id": request, "error": f"{type(error).__name__}: {error}"}).encode()
            )
        finally:
            for fd in fds:
                os.close(fd)


serve(socket.socket(fileno=int(sys.argv[-1])))
