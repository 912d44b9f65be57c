"""``/run_code`` conformance with SandboxFusion, language by language.

Written from SandboxFusion's documented behaviour at commit
469de0845cb7d665bc68044d541aa3aa28c5b30a (github.com/bytedance/SandboxFusion):

- its runner tests ``sandbox/tests/runners/test_{python,bash,cpp,java,nodejs,
  typescript,rust,go,isolation}.py``: which request gives which ``status``,
  ``run_result.status``/``compile_result`` and which words in ``stderr``; the Java
  ``assert 1 == 2;`` failing (``test_java_assert``: SandboxFusion runs ``java -ea``);
  a Python server called on 127.0.0.1 by the program itself
  (``test_isolation_network_server_127``);
- its API models ``sandbox/server/sandbox_api.py`` (``RunCodeRequest``, ``RunStatus``,
  ``RunCodeResponse``; ``parse_run_status``: ``Failed`` on a timeout or a non-zero
  return code) and ``sandbox/runners/types.py`` (``CommandRunStatus``);
- its file guide ``docs/docs/docs/how-to/run-code/upload-download-files.mdx``: file
  names relative to the program's directory, or absolute such as ``/tmp/flag.txt``;
  ``fetch_files`` read back the same way.

Each language answers the same seven requests: print, stdin, timeout, assertion error,
syntax or compile error, files (upload and fetch) and a loopback server (the request
opts in with execgym's ``"network": "loopback"``). Every language here is installed by
``.ci/run``; under CI=1 a missing one fails instead of skipping. Where execgym
deliberately differs (no network beyond loopback, no third-party packages, writes
under /work and /tmp only, timeouts above the server's maximum lowered), the tests
check that the response's ``message`` says so.
"""

from __future__ import annotations

import base64
import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from fastapi.testclient import TestClient

from execgym.server import ServerSettings, create_app
from execgym.server.languages import LANGUAGES, find_toolchains
from tests.conftest import require

FLAG = base64.b64encode(b"hello, this is a test").decode()
TMP_FLAG = base64.b64encode(b"and from tmp").decode()
FILES = {"dir1/dir2/dir3/secret_flag": FLAG, "/tmp/flag.txt": TMP_FLAG}

# Per language: print 123, echo an integer from stdin, sleep 2 s, fail an assertion,
# fail to parse or compile, read two uploaded files and write answer.txt ("42"), and
# serve "served" on 127.0.0.1 to itself.
PROGRAMS: dict[str, dict[str, str]] = {
    "python": {
        "print": "print(123)",
        "stdin": "print(int(input()))",
        "timeout": "import time; time.sleep(2)",
        "assertion": "assert 1 == 2",
        "syntax": "int a = 1",
        "files": (
            'print(open("dir1/dir2/dir3/secret_flag").read(), open("/tmp/flag.txt").read())\n'
            'open("answer.txt", "w").write("42")'
        ),
        "loopback": (
            "import http.server, threading, urllib.request\n"
            "class Handler(http.server.BaseHTTPRequestHandler):\n"
            "    def do_GET(self):\n"
            "        self.send_response(200); self.end_headers(); self.wfile.write(b'served')\n"
            "server = http.server.HTTPServer(('127.0.0.1', 0), Handler)\n"
            "threading.Thread(target=server.serve_forever, daemon=True).start()\n"
            "url = 'http://127.0.0.1:%d' % server.server_address[1]\n"
            "print(urllib.request.urlopen(url, timeout=5).read().decode())"
        ),
    },
    "bash": {
        "print": "echo 123",
        "stdin": "read input\necho $input",
        "timeout": "sleep 2",
        "assertion": "test 1 -eq 2",
        "syntax": "if [",
        "files": "cat dir1/dir2/dir3/secret_flag /tmp/flag.txt\nprintf 42 > answer.txt",
    },
    "cpp": {
        "print": "#include <iostream>\nint main() { std::cout << 123 << std::endl; }",
        "stdin": (
            "#include <iostream>\nint main() { int n; std::cin >> n; std::cout << n << std::endl; }"
        ),
        "timeout": (
            "#include <chrono>\n#include <thread>\n"
            "int main() { std::this_thread::sleep_for(std::chrono::seconds(2)); }"
        ),
        "assertion": "#include <cassert>\nint main() { assert(1 == 2); }",
        "syntax": "int main() { object i = ?; return 0; }",
        "files": (
            "#include <fstream>\n#include <iostream>\n#include <sstream>\n"
            "std::string slurp(const char* p) { std::ifstream f(p); std::stringstream s;"
            " s << f.rdbuf(); return s.str(); }\n"
            "int main() { std::cout << slurp(\"dir1/dir2/dir3/secret_flag\") << ' '"
            ' << slurp("/tmp/flag.txt") << std::endl; std::ofstream("answer.txt") << 42; }'
        ),
        "loopback": (
            "#include <arpa/inet.h>\n#include <cstdio>\n#include <netinet/in.h>\n"
            "#include <sys/socket.h>\n#include <unistd.h>\n"
            "int main() {\n"
            "  int server = socket(AF_INET, SOCK_STREAM, 0);\n"
            "  sockaddr_in address{}; address.sin_family = AF_INET;\n"
            "  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);\n"
            "  if (bind(server, (sockaddr*)&address, sizeof address) || listen(server, 1))"
            ' { perror("listen"); return 1; }\n'
            "  socklen_t size = sizeof address; getsockname(server, (sockaddr*)&address, &size);\n"
            "  int client = socket(AF_INET, SOCK_STREAM, 0);\n"
            '  if (connect(client, (sockaddr*)&address, sizeof address)) { perror("connect");'
            " return 1; }\n"
            '  int peer = accept(server, nullptr, nullptr); write(peer, "served", 6);'
            " close(peer);\n"
            '  char buffer[16] = {}; read(client, buffer, 6); printf("%s\\n", buffer);\n'
            "}"
        ),
    },
    "java": {
        "print": (
            "public class Main { public static void main(String[] args) {"
            " System.out.println(123); } }"
        ),
        "stdin": (
            "import java.util.Scanner;\npublic class Main { public static void main(String[] a)"
            " { System.out.println(new Scanner(System.in).nextInt()); } }"
        ),
        "timeout": (
            "public class Main { public static void main(String[] a) throws Exception"
            " { Thread.sleep(2000); } }"
        ),
        # SandboxFusion's test_java_assert: `assert` must fail (java -ea).
        "assertion": "public class Main { public static void main(String[] a) { assert 1 == 2; } }",
        "syntax": (
            "public class Main { public static void main(String[] a) { System.uto.println(123); } }"
        ),
        "files": (
            "import java.nio.file.*;\npublic class Main { public static void main(String[] a)"
            " throws Exception { System.out.println(Files.readString(Path.of("
            '"dir1/dir2/dir3/secret_flag")) + " " + Files.readString(Path.of('
            '"/tmp/flag.txt")));'
            ' Files.writeString(Path.of("answer.txt"), "42"); } }'
        ),
        "loopback": (
            "import java.io.*;\nimport java.net.*;\n"
            "public class Main { public static void main(String[] a) throws Exception {\n"
            '  ServerSocket server = new ServerSocket(0, 1, InetAddress.getByName("127.0.0.1"));\n'
            '  Socket client = new Socket("127.0.0.1", server.getLocalPort());\n'
            '  Socket peer = server.accept(); peer.getOutputStream().write("served\\n".getBytes());'
            " peer.close();\n"
            "  System.out.println(new BufferedReader(new InputStreamReader("
            "client.getInputStream())).readLine()); } }"
        ),
    },
    "nodejs": {
        "print": "console.log(123)",
        "stdin": (
            "process.stdin.on('data', (input) => { console.log(parseInt(input.toString()));"
            " process.exit(); });"
        ),
        "timeout": "setTimeout(() => {}, 2000);",
        "assertion": "const assert = require('assert'); assert.strictEqual(1, 2, '1 !== 2');",
        "syntax": "const x = ;",
        "files": (
            "const fs = require('fs');\n"
            "console.log(fs.readFileSync('dir1/dir2/dir3/secret_flag', 'utf8'),"
            " fs.readFileSync('/tmp/flag.txt', 'utf8'));\n"
            "fs.writeFileSync('answer.txt', '42');"
        ),
        "loopback": (
            "const http = require('http');\n"
            "const server = http.createServer((req, res) => res.end('served'));\n"
            "server.listen(0, '127.0.0.1', () => {\n"
            "  http.get({host: '127.0.0.1', port: server.address().port}, (res) => {\n"
            "    let body = ''; res.on('data', (c) => body += c);\n"
            "    res.on('end', () => { console.log(body); server.close(); });\n"
            "  });\n"
            "});"
        ),
    },
    "typescript": {
        "print": "const n: number = 123;\nconsole.log(n);",
        "stdin": (
            "process.stdin.on('data', (input: Buffer) => {"
            " console.log(parseInt(input.toString())); process.exit(); });"
        ),
        "timeout": (
            "import util from 'util';\nconst sleep = util.promisify(setTimeout);\n"
            "async function main() { await sleep(2000); }\nmain();"
        ),
        "assertion": "import assert from 'assert';\nassert.strictEqual(1, 2, '1 !== 2');",
        "syntax": "const x: number = ;",
        "files": (
            "import * as fs from 'fs';\n"
            "console.log(fs.readFileSync('dir1/dir2/dir3/secret_flag', 'utf8'),"
            " fs.readFileSync('/tmp/flag.txt', 'utf8'));\n"
            "fs.writeFileSync('answer.txt', '42');"
        ),
        "loopback": (
            "import http from 'http';\nimport { AddressInfo } from 'net';\n"
            "const server = http.createServer((req, res) => res.end('served'));\n"
            "server.listen(0, '127.0.0.1', () => {\n"
            "  const port = (server.address() as AddressInfo).port;\n"
            "  http.get({host: '127.0.0.1', port}, (res) => {\n"
            "    let body = ''; res.on('data', (c) => body += c);\n"
            "    res.on('end', () => { console.log(body); server.close(); });\n"
            "  });\n"
            "});"
        ),
    },
    "rust": {
        "print": 'fn main() { println!("123"); }',
        "stdin": (
            "fn main() { let mut s = String::new(); std::io::stdin().read_line(&mut s).unwrap();"
            ' let n: i32 = s.trim().parse().unwrap(); println!("{}", n); }'
        ),
        "timeout": "fn main() { std::thread::sleep(std::time::Duration::from_millis(2000)); }",
        "assertion": "fn main() { assert_eq!(1, 2); }",
        "syntax": 'fn main() { let x: u32 = "Hello, world!"; println!("{}", x); }',
        "files": (
            "use std::fs;\nfn main() {\n"
            '  println!("{} {}", fs::read_to_string("dir1/dir2/dir3/secret_flag").unwrap(),'
            ' fs::read_to_string("/tmp/flag.txt").unwrap());\n'
            '  fs::write("answer.txt", "42").unwrap();\n}'
        ),
        "loopback": (
            "use std::io::{Read, Write};\nuse std::net::{TcpListener, TcpStream};\n"
            "fn main() {\n"
            '  let server = TcpListener::bind("127.0.0.1:0").unwrap();\n'
            "  let mut client = TcpStream::connect(server.local_addr().unwrap()).unwrap();\n"
            '  let (mut peer, _) = server.accept().unwrap(); peer.write_all(b"served").unwrap();'
            " drop(peer);\n"
            "  let mut body = String::new(); client.read_to_string(&mut body).unwrap();"
            ' println!("{}", body);\n}'
        ),
    },
    "go": {
        "print": 'package main\nimport "fmt"\nfunc main() { fmt.Println("123") }',
        "stdin": (
            'package main\nimport "fmt"\nfunc main() { var n int; fmt.Scan(&n); fmt.Println(n) }'
        ),
        "timeout": 'package main\nimport "time"\nfunc main() { time.Sleep(2 * time.Second) }',
        "assertion": (
            'package main\nfunc main() { if 1 != 2 { panic("assertion failed: 1 == 2") } }'
        ),
        "syntax": "package main\nfunc main() { x := }",
        "files": (
            'package main\nimport ("fmt"; "os")\nfunc main() {\n'
            '  a, _ := os.ReadFile("dir1/dir2/dir3/secret_flag")\n'
            '  b, _ := os.ReadFile("/tmp/flag.txt")\n'
            "  fmt.Println(string(a), string(b))\n"
            '  os.WriteFile("answer.txt", []byte("42"), 0o644)\n}'
        ),
        "loopback": (
            'package main\nimport ("fmt"; "io"; "net"; "net/http")\nfunc main() {\n'
            '  ln, err := net.Listen("tcp", "127.0.0.1:0"); if err != nil { panic(err) }\n'
            "  go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request)"
            ' { io.WriteString(w, "served") }))\n'
            '  resp, err := http.Get("http://" + ln.Addr().String())\n'
            "  if err != nil { panic(err) }\n"
            "  body, _ := io.ReadAll(resp.Body); fmt.Println(string(body))\n}"
        ),
    },
}

COMPILED = {"cpp", "java", "rust", "go", "typescript"}
"""Languages whose syntax or compile error is the compile step's (``run_result`` null)."""

ASSERTION_WORDS = {
    "python": "AssertionError",
    "bash": "",  # `test 1 -eq 2` fails silently, as in test_bash_false_condition
    "cpp": "Assertion",
    "java": "java.lang.AssertionError",
    "nodejs": "AssertionError",
    "typescript": "AssertionError",
    "rust": "assertion",
    "go": "panic: assertion failed",
}
SYNTAX_WORDS = {
    "python": "SyntaxError: invalid syntax",
    "bash": "syntax error",
    "nodejs": "SyntaxError",
}


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    """One app for the module (the warm pool, the default, on bwrap)."""
    require(shutil.which("bwrap") is not None, "bubblewrap (apt-get install bubblewrap)")
    settings = ServerSettings(workers=2, max_in_flight=256)
    with TestClient(create_app(settings)) as test_client:
        yield test_client


@pytest.fixture(scope="module")
def installed() -> set[str]:
    toolchains = find_toolchains()
    return {name for name in PROGRAMS if not toolchains.missing(LANGUAGES[name])}


def need(installed: set[str], language: str) -> None:
    hint = LANGUAGES[language].install_hint
    require(language in installed, f"{language}'s toolchain ({hint}; .ci/run installs it)")


def post(client: TestClient, language: str, code: str, **fields: Any) -> dict[str, Any]:
    body = {"language": language, "code": code, "run_timeout": 10, "compile_timeout": 30, **fields}
    response = client.post("/run_code", json=body)
    assert response.status_code == 200, response.text
    return response.json()


LANGUAGE_NAMES = sorted(PROGRAMS)


@pytest.mark.parametrize("language", LANGUAGE_NAMES)
def test_print(client: TestClient, installed: set[str], language: str) -> None:
    need(installed, language)
    answer = post(client, language, PROGRAMS[language]["print"])
    assert answer["status"] == "Success", answer
    assert answer["run_result"]["status"] == "Finished"
    assert answer["run_result"]["return_code"] == 0
    assert answer["run_result"]["stdout"] == "123\n"
    if language in COMPILED:
        assert answer["compile_result"]["status"] == "Finished"
        assert answer["compile_result"]["return_code"] == 0


@pytest.mark.parametrize("language", LANGUAGE_NAMES)
def test_stdin(client: TestClient, installed: set[str], language: str) -> None:
    need(installed, language)
    answer = post(client, language, PROGRAMS[language]["stdin"], stdin="65535")
    assert answer["status"] == "Success", answer
    assert answer["run_result"]["stdout"] == "65535\n"


@pytest.mark.parametrize("language", LANGUAGE_NAMES)
def test_timeout(client: TestClient, installed: set[str], language: str) -> None:
    need(installed, language)
    answer = post(client, language, PROGRAMS[language]["timeout"], run_timeout=0.5)
    assert answer["status"] == "Failed", answer
    assert answer["run_result"]["status"] == "TimeLimitExceeded"


@pytest.mark.parametrize("language", LANGUAGE_NAMES)
def test_assertion_error(client: TestClient, installed: set[str], language: str) -> None:
    need(installed, language)
    answer = post(client, language, PROGRAMS[language]["assertion"])
    assert answer["status"] == "Failed", answer
    assert answer["run_result"]["status"] == "Finished"
    assert answer["run_result"]["return_code"] != 0
    assert ASSERTION_WORDS[language] in answer["run_result"]["stderr"]


@pytest.mark.parametrize("language", LANGUAGE_NAMES)
def test_syntax_or_compile_error(client: TestClient, installed: set[str], language: str) -> None:
    need(installed, language)
    answer = post(client, language, PROGRAMS[language]["syntax"])
    assert answer["status"] == "Failed", answer
    if language in COMPILED:
        assert answer["compile_result"]["status"] == "Finished"
        assert answer["compile_result"]["return_code"] != 0
        assert answer["run_result"] is None
    else:
        assert answer["run_result"]["status"] == "Finished"
        assert answer["run_result"]["return_code"] != 0
        assert SYNTAX_WORDS[language] in answer["run_result"]["stderr"]


@pytest.mark.parametrize("language", LANGUAGE_NAMES)
def test_files_uploaded_and_fetched(client: TestClient, installed: set[str], language: str) -> None:
    need(installed, language)
    answer = post(
        client, language, PROGRAMS[language]["files"], files=FILES, fetch_files=["answer.txt"]
    )
    assert answer["status"] == "Success", answer
    assert "hello, this is a test" in answer["run_result"]["stdout"]
    assert "and from tmp" in answer["run_result"]["stdout"]
    assert base64.b64decode(answer["files"]["answer.txt"]) == b"42"


@pytest.mark.parametrize("language", sorted(set(PROGRAMS) - {"bash"}))
def test_loopback_server(client: TestClient, installed: set[str], language: str) -> None:
    """A program that serves and calls itself on 127.0.0.1 (bash cannot listen)."""
    need(installed, language)
    answer = post(client, language, PROGRAMS[language]["loopback"], network="loopback")
    assert answer["status"] == "Success", answer
    assert answer["run_result"]["stdout"].strip() == "served"


# --- where a user of SandboxFusion would notice execgym -------------------------------

BACKENDS = {
    "bwrap, warm pool": {"isolation": "bwrap", "warm_pool": True},
    "bwrap, no warm pool": {"isolation": "bwrap", "warm_pool": False},
    "gvisor": {"isolation": "gvisor"},
    "none": {"isolation": "none", "allow_root": True},
}
TRACEBACK = "def f():\n    return 1 / 0\n\nprint('before')\nf()\n"


def backend_settings(name: str) -> ServerSettings:
    if name == "gvisor":
        import os

        require(shutil.which("runsc") is not None, "gVisor (apt-get install -y runsc)")
        require(os.geteuid() == 0, "root (runsc needs it)")
    else:
        require(shutil.which("bwrap") is not None, "bubblewrap (apt-get install bubblewrap)")
    return ServerSettings(workers=1, **BACKENDS[name])  # type: ignore[arg-type]


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_python_errors_are_the_programs_on_every_backend(backend: str) -> None:
    """A SyntaxError reaches stderr, as from ``python main.py`` (with the warm pool it
    went to the zygote's descriptor: exit 125, empty stderr); a traceback shows the
    program's file and lines, and no frame of ours (``"<string>", line 539, in
    become_program``)."""
    with TestClient(create_app(backend_settings(backend))) as test_client:
        syntax = post(test_client, "python", "x = 1\nint a = 1\n")
        crash = post(test_client, "python", TRACEBACK)
    assert syntax["status"] == "Failed", syntax
    assert syntax["run_result"]["return_code"] == 1
    stderr = syntax["run_result"]["stderr"]
    assert "line 2\n    int a = 1\n" in stderr
    assert "SyntaxError: invalid syntax" in stderr
    assert "Traceback" not in stderr  # nothing ran: no frame at all, as in CPython
    stderr = crash["run_result"]["stderr"]
    assert crash["run_result"]["stdout"] == "before\n"
    assert stderr.startswith("Traceback (most recent call last):\n"), stderr
    assert ", line 5, in <module>\n    f()\n" in stderr
    assert ", line 2, in f\n    return 1 / 0\n" in stderr
    assert stderr.rstrip().endswith("ZeroDivisionError: division by zero")
    frames = [line for line in stderr.splitlines() if line.startswith("  File ")]
    assert len(frames) == 2, stderr
    assert "<string>" not in stderr
    assert "become_program" not in stderr
    assert all(frame.startswith('  File "') and '/runner.py", line' in frame for frame in frames)


def test_timeouts_and_memory_above_the_maximum_are_lowered_and_said(
    client: TestClient,
) -> None:
    """SandboxFusion sets no maximum; verl turns a refused request into every test case
    failing, so execgym runs with its maximum and says so."""
    answer = post(
        client, "python", "print(1)", run_timeout=300, compile_timeout=500, memory_limit_MB=10**6
    )
    assert answer["status"] == "Success", answer
    assert answer["run_result"]["stdout"] == "1\n"
    assert "run_timeout 300 s is more than this server allows" in answer["message"]
    assert "ran with 120 s" in answer["message"]
    assert "compile_timeout 500 s" in answer["message"]
    assert "memory_limit_MB 1000000" in answer["message"]


def test_loopback_is_the_servers_choice_too() -> None:
    """``--run-code-network loopback``: a request that does not say gets loopback, so
    SandboxFusion's own requests (they have no such field) can serve themselves."""
    require(shutil.which("bwrap") is not None, "bubblewrap (apt-get install bubblewrap)")
    settings = ServerSettings(workers=1, run_code_network="loopback")
    with TestClient(create_app(settings)) as test_client:
        answer = post(test_client, "python", PROGRAMS["python"]["loopback"])
    assert answer["status"] == "Success", answer
    assert answer["run_result"]["stdout"] == "served\n"


@pytest.mark.parametrize(
    ("code", "fields", "said"),
    [
        ("import requests", {}, "'requests' is not installed"),
        (
            "import urllib.request\nurllib.request.urlopen('http://example.com', timeout=3)",
            {"network": "loopback"},
            "no network beyond loopback",
        ),
        (
            "import socket\nsocket.create_server(('127.0.0.1', 0))",
            {},
            'send "network": "loopback"',
        ),
        ("open('/usr/answer.txt', 'w')", {}, "may write only under /work"),
        ("open('/mnt/b', 'w').write('sauce')", {"fetch_files": ["/mnt/b"]}, "['/mnt/b']"),
    ],
    ids=["package", "internet", "no-network", "read-only", "fetch-outside"],
)
def test_deliberate_differences_are_said(
    client: TestClient, code: str, fields: dict[str, Any], said: str
) -> None:
    answer = post(client, "python", code, **fields)
    assert answer["status"] == "Failed", answer
    assert said in answer["message"], answer["message"]


def test_files_outside_the_writable_directories_are_refused_by_name(client: TestClient) -> None:
    response = client.post(
        "/run_code", json={"language": "python", "code": "", "files": {"/etc/x": FLAG}}
    )
    assert response.status_code == 422
    assert "'/etc/x' is outside the writable directories" in response.json()["message"]


def test_loopback_ports_are_per_run(client: TestClient) -> None:
    """Two programs serving on the same port at once both work: each run has its own
    loopback (SandboxFusion's ``test_isolation_network_server_port_conflict``)."""
    code = PROGRAMS["python"]["loopback"].replace("('127.0.0.1', 0)", "('127.0.0.1', 38123)")
    code = code.replace("import http.server,", "import time, http.server,")
    code += "\ntime.sleep(1)"  # both hold the port at the same time

    def serve() -> dict[str, Any]:
        return post(client, "python", code, network="loopback")

    with ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(lambda _: serve(), range(2)))
    for answer in answers:
        assert answer["status"] == "Success", answer
        assert answer["run_result"]["stdout"] == "served\n"
