"""What only the gVisor sandbox guarantees (the shared contract is in test_sandbox.py)."""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path

import pytest

from execgym.errors import SandboxUnavailable
from execgym.judges import AssertJudge, Verdict
from execgym.limits import Limits, MiB
from execgym.sandbox import ISOLATIONS, Status, create_sandbox
from execgym.sandbox.gvisor import GVisorSandbox
from execgym.tasks import Task
from tests.conftest import ONE_TASK, processes_with, python, run_cgroups


async def test_runs_unprivileged_on_its_own_kernel_in_a_minimal_root(gvisor_sandbox) -> None:
    code = (
        "import os, json; print(json.dumps([os.getuid(), os.getgid(), os.getgroups(), "
        "sorted(os.listdir('/')), os.getcwd(), os.getpid(), os.uname().release]))"
    )
    result = await gvisor_sandbox.run_argv(python(code))
    assert result.status is Status.OK, result.stderr
    uid, gid, groups, root, cwd, pid, release = json.loads(result.stdout)
    assert (uid, gid) == (65534, 65534)
    assert set(groups) <= {65534}
    assert cwd == "/work"
    assert pid < 10  # the sandbox's own PID space
    assert release != os.uname().release  # gVisor's kernel answers, not the host's
    assert set(root) <= {"bin", "dev", "lib", "lib32", "lib64", "libx32", "proc", "root"} | {
        "sbin",
        "sys",
        "tmp",
        "usr",
        "work",
        "etc",  # only toolchain configuration (Java's /etc/java-*), checked below
        "opt",  # /opt/execgym/site-packages, for the pytest judge
    }
    listing = "import json, os; print(json.dumps(os.listdir('/etc')))"
    result = await gvisor_sandbox.run_argv(python(listing))
    if result.status is Status.OK:
        assert all(name.startswith("java-") for name in json.loads(result.stdout))


async def test_program_has_no_capabilities_and_no_new_privs(gvisor_sandbox) -> None:
    code = (
        "import ctypes\nprint([l.split()[1] for l in open('/proc/self/status') "
        "if l.startswith(('CapEff', 'CapPrm', 'CapBnd'))])\n"
        "print(ctypes.CDLL(None).prctl(39, 0, 0, 0, 0))"  # PR_GET_NO_NEW_PRIVS
    )
    result = await gvisor_sandbox.run_argv(python(code))
    assert result.status is Status.OK, result.stderr
    caps, no_new_privs = result.stdout.splitlines()
    assert caps == str(["0000000000000000"] * 3).encode()
    assert no_new_privs == b"1"


async def test_host_environment_is_invisible(gvisor_sandbox, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-secret")
    result = await gvisor_sandbox.run_argv(
        python("import os; print(sorted(os.environ))"), env={"ASKED_FOR": "1"}
    )
    assert b"OPENAI_API_KEY" not in result.stdout
    assert b"ASKED_FOR" in result.stdout
    result = await gvisor_sandbox.run_argv(python("print(open('/proc/1/environ','rb').read())"))
    assert b"sk-test-secret" not in result.stdout + result.stderr


async def test_host_files_are_invisible(gvisor_sandbox) -> None:
    checkout = Path(__file__).resolve().parents[2]
    for path in ("/etc/shadow", "/etc/passwd", str(checkout / "pyproject.toml"), "/root/.bashrc"):
        result = await gvisor_sandbox.run_argv(python(f"print(open({path!r}).read())"))
        assert result.status is Status.RUNTIME_ERROR, path
        assert b"FileNotFoundError" in result.stderr, path
    # What is there from the host (/usr, the interpreter's prefix) is read-only.
    code = "print([line.split()[1] for line in open('/proc/self/mounts') if ' ro,' in line])"
    result = await gvisor_sandbox.run_argv(python(code))
    read_only = result.stdout.decode()
    assert "'/'" in read_only
    assert "'/usr'" in read_only
    assert repr(os.path.realpath(sys.base_prefix)) in read_only


@pytest.mark.parametrize("network", ["none", "loopback"])
async def test_network_is_unreachable_even_the_hosts_loopback(gvisor_sandbox, network) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        code = (
            f"import os, socket\nfor where in [('127.0.0.1', {port}), ('1.1.1.1', 53)]:\n"
            "    try:\n        socket.create_connection(where, 2)\n        print('connected')\n"
            "    except OSError as e:\n        print('failed', e)\n"
            "print(os.listdir('/sys/class/net'))\n"
        )
        result = await gvisor_sandbox.run_argv(python(code), limits=Limits(network=network))
        server.setblocking(False)
        with pytest.raises(BlockingIOError):  # nothing ever connected to the host's port
            server.accept()
    assert result.status is Status.OK, result.stderr
    lines = result.stdout.decode().splitlines()
    assert [line.split()[0] for line in lines[:2]] == ["failed", "failed"]
    if network == "none":  # seccomp: no Internet socket at all
        assert lines[0].startswith("failed [Errno 1]")
    assert lines[2] == "['lo']"  # gVisor's own loopback is the only interface


async def test_loopback_network_is_the_sandboxs_own(gvisor_sandbox) -> None:
    code = (
        "import socket\nserver = socket.create_server(('127.0.0.1', 0))\n"
        "client = socket.create_connection(server.getsockname(), 2)\n"
        "peer, _ = server.accept(); client.sendall(b'ping'); print(peer.recv(4))\n"
    )
    result = await gvisor_sandbox.run_argv(python(code), limits=Limits(network="loopback"))
    assert (result.status, result.stdout) == (Status.OK, b"b'ping'\n"), result.stderr
    result = await gvisor_sandbox.run_argv(python(code))  # network="none": no Internet sockets
    assert result.status is Status.RUNTIME_ERROR
    assert b"PermissionError" in result.stderr


async def test_seccomp_refuses_namespaces_mounts_and_negative_nice(gvisor_sandbox) -> None:
    code = (
        "import ctypes, os, threading\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "def errno_of(result):\n    return ctypes.get_errno() if result < 0 else 0\n"
        "print(errno_of(libc.unshare(0x10000000)), errno_of(libc.unshare(0x20000)),\n"
        "      errno_of(libc.mount(b'none', b'/tmp', b'tmpfs', 0, None)))\n"
        "try:\n    os.setpriority(os.PRIO_PROCESS, 0, -5)\nexcept PermissionError:\n"
        "    print('no negative nice')\nos.setpriority(os.PRIO_PROCESS, 0, 5)\n"
        "thread = threading.Thread(target=print, args=('threads work',))\n"
        "thread.start(); thread.join()\n"
        "pid = os.fork()\nif pid == 0:\n    os._exit(7)\nprint(os.waitpid(pid, 0)[1] >> 8)\n"
    )
    result = await gvisor_sandbox.run_argv(python(code))
    assert result.status is Status.OK, result.stderr
    assert result.stdout == b"1 1 1\nno negative nice\nthreads work\n7\n"


async def test_nothing_is_left_behind_after_a_timeout(gvisor_sandbox, monkeypatch) -> None:
    commands: list[list[str]] = []
    original = GVisorSandbox._prepare

    def recording(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        command = original(self, *args, **kwargs)
        commands.append(command)
        return command

    monkeypatch.setattr(GVisorSandbox, "_prepare", recording)
    code = (
        "import os, subprocess, time\n"
        "subprocess.Popen(['/usr/bin/sleep', '300'], start_new_session=True)\n"
        "os.write(3, b'started')\ntime.sleep(300)\n"
    )
    result = await gvisor_sandbox.run_argv(
        python(code), files={"data/x.txt": b"x"}, want_report=True, limits=Limits(wall_time_s=2)
    )
    assert result.status is Status.TIME_LIMIT
    assert result.limit_hit == "wall_time_s"
    assert result.report == b"started"
    [command] = commands
    run_dir = next(arg for arg in command if arg.startswith("--root=")).split("=", 1)[1]
    run_dir = str(Path(run_dir).parent)
    container_id = command[-1]
    assert not Path(run_dir).exists()  # bundle, staged files, report FIFO, runsc state
    assert processes_with(run_dir) == []  # runsc, its Gofer and its Sentry
    assert processes_with(container_id) == []
    assert run_cgroups() == []
    # runsc makes a cgroup named after the container unless told not to (--ignore-cgroups).
    assert list(Path("/sys/fs/cgroup").glob(f"*/{container_id}")) == []
    mounts = Path("/proc/self/mountinfo").read_text()
    assert run_dir not in mounts


async def test_max_processes_counts_the_runs_own_processes(gvisor_sandbox) -> None:
    code = (
        "import threading, time\nthreads = []\ntry:\n    for _ in range(40):\n"
        "        t = threading.Thread(target=time.sleep, args=(5,), daemon=True)\n"
        "        t.start(); threads.append(t)\nexcept RuntimeError:\n    pass\n"
        "print(len(threads))\n"
    )
    result = await gvisor_sandbox.run_argv(python(code), limits=Limits(max_processes=16))
    assert result.status is Status.OK, result.stderr
    assert result.stdout == b"15\n"  # 16 tasks: the main thread and 15 more
    assert result.enforcement["max_processes"].startswith("rlimit-nproc in the gVisor kernel")


async def test_memory_limit_includes_gvisors_own_overhead(gvisor_sandbox, needs_cgroup) -> None:
    result = await gvisor_sandbox.run_argv(python("pass"))
    assert result.peak_memory_bytes is not None
    # The Sentry, Gofer and runsc count too: more than a bare interpreter, far below 64 MiB.
    assert 8 * MiB < result.peak_memory_bytes < 64 * MiB
    assert "gVisor's own" in result.enforcement["memory_bytes"]
    code = "x = bytearray(150 * 1024 * 1024); print(len(x))"
    result = await gvisor_sandbox.run_argv(python(code), limits=Limits(memory_bytes=256 * MiB))
    assert result.status is Status.OK, result


async def test_without_a_cgroup_memory_is_an_rlimit_in_the_gvisor_kernel(
    gvisor_sandbox, no_cgroups
) -> None:
    code = "x = bytearray(1024 ** 3)"
    result = await gvisor_sandbox.run_argv(python(code), limits=Limits(memory_bytes=256 * MiB))
    # The kernel refused the memory: a memory verdict, inferred from the MemoryError.
    assert (result.status, result.limit_hit) == (Status.MEMORY_LIMIT, "memory_bytes"), result
    assert b"MemoryError" in result.stderr
    assert result.enforcement["memory_bytes"].startswith("rlimit-as")
    assert result.enforcement["cpu_time_s"].startswith("not enforced")


async def test_work_dir_is_private_per_run_and_limited_by_tmpfs_size(gvisor_sandbox) -> None:
    first = await gvisor_sandbox.run_argv(
        python("open('/tmp/left', 'w').write('x'); open('kept','w')")
    )
    assert first.status is Status.OK, first.stderr
    second = await gvisor_sandbox.run_argv(
        python("import os; print(os.listdir('.'), os.listdir('/tmp'))")
    )
    assert second.stdout == b"[] []\n"
    code = (
        "f = open('big', 'wb')\ntry:\n    while True: f.write(b'x' * 1048576); f.flush()\n"
        "except OSError as e:\n    print(e.errno)\n"
    )
    result = await gvisor_sandbox.run_argv(
        python(code), limits=Limits(disk_bytes=8 * MiB, max_file_bytes=64 * MiB)
    )
    assert result.status is Status.OK, result
    assert result.stdout.strip() == b"28"  # ENOSPC


async def test_files_are_the_programs_own_to_change(gvisor_sandbox) -> None:
    code = (
        "import os\nopen('d/a.txt', 'a').write('+')\n"
        "print(open('d/a.txt').read(), sorted(os.listdir('d')))"
    )
    result = await gvisor_sandbox.run_argv(
        python(code), files={"d/a.txt": b"a", "d/b.bin": b"\x00"}
    )
    assert result.status is Status.OK, result.stderr
    assert result.stdout == b"a+ ['a.txt', 'b.bin']\n"


async def test_a_large_report_write_arrives_whole(gvisor_sandbox) -> None:
    # gVisor cuts short a write to a full host FIFO (Linux would block); the report
    # FIFO's 1 MiB buffer keeps any single write up to that size whole.
    code = "import os; print(os.write(3, b'r' * (1024 * 1024)))"
    result = await gvisor_sandbox.run_argv(python(code), want_report=True)
    assert result.stdout == b"1048576\n"
    assert len(result.report) == 1024 * 1024


async def test_isolation_gvisor_is_offered_by_create_sandbox(gvisor_sandbox) -> None:
    assert "gvisor" in ISOLATIONS
    assert isinstance(create_sandbox("gvisor"), GVisorSandbox)
    result = await create_sandbox("gvisor").run_argv(python("print('hi')"))
    assert (result.status, result.stdout, result.isolation) == (Status.OK, b"hi\n", "gvisor")


async def test_a_sandbox_runsc_cannot_start_is_a_sandbox_error_for_the_judge(
    gvisor_sandbox,
) -> None:
    broken = GVisorSandbox(read_only_paths=["/nonexistent-execgym-path"])
    judgement = await AssertJudge().judge(
        Task(**ONE_TASK), "    return 1\n", broken, Limits(wall_time_s=5)
    )
    assert judgement.verdict is Verdict.SANDBOX_ERROR
    assert "never started the test harness" in judgement.message
    assert "running container" in judgement.message  # runsc's own words


def test_missing_runsc_says_how_to_install_it(monkeypatch) -> None:
    monkeypatch.setattr("shutil.which", lambda name: None)
    with pytest.raises(SandboxUnavailable, match="apt-get install -y runsc"):
        GVisorSandbox()


def test_runsc_needs_root(monkeypatch) -> None:
    monkeypatch.setattr("shutil.which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr("os.geteuid", lambda: 1000)
    with pytest.raises(SandboxUnavailable, match="needs root"):
        GVisorSandbox()
