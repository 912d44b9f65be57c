"""Declarative environments: a base environment plus packages and setup, built once.

An :class:`EnvironmentSpec` names a base environment (imported or built before) and what
to add: Python packages (``pip``), npm packages (``npm``), environment variables and
shell commands (``setup``). :func:`build` runs the build once in a bwrap sandbox that
has the host's network (the only sandbox that ever does), on a private copy of the
base's root, then turns what changed into one new layer (added and changed entries,
whiteouts for deleted ones) in the layer store; the environment is the base's layers
plus that one. The result is cached by the spec's digest (the sha256 of its canonical
JSON with the base's digest in place of its name): building the same spec again
returns the cached environment without running anything (``built=False``).

Inside the build:

- ``pip`` packages are installed with the environment's own interpreter into
  :data:`~execgym.toolchains.PYTHON_LIBRARIES_DIR` (``/opt/execgym/site-packages``),
  where the pytest judge's harness and the episode tools already look for libraries;
  when the base has no pip, the host's ``pip`` package is lent read-only on
  ``PYTHONPATH`` for the build only. pip runs ``--isolated`` (the host's pip
  configuration is not the build's), from ``pip_index_url`` if given.
- ``npm`` packages are installed globally with the environment's own ``npm``
  (``npm install -g``); the base must have Node.js and npm.
- ``setup`` commands run last, in order, with ``/bin/sh -e -c``, as root of the build
  (uid 0: real root when execgym runs as root, else root of a user namespace).

The build's writable places are the copy of the root and ``/tmp`` (a tmpfs, not kept);
``/etc/resolv.conf`` is the host's, read-only, for DNS, and is not kept either.
"""

from __future__ import annotations

import contextlib
import difflib
import fcntl
import json
import os
import shutil
import stat
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from execgym.environments.cache import EnvironmentCache
from execgym.environments.layers import remove_tree
from execgym.environments.model import Environment, canonical_json, sha256_digest
from execgym.environments.mounts import SKIPPED
from execgym.errors import SandboxUnavailable
from execgym.toolchains import PYTHON_LIBRARIES_DIR

BUILD_TIMEOUT_S = 1800.0
"""The longest a build may take before it is killed (seconds)."""
_BUILD_CAPS = (
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETUID",
    "CAP_SETGID",
    "CAP_SETFCAP",
    "CAP_SYS_CHROOT",
)
_PIP_LENT = "/tmp/execgym-pip"  # noqa: S108 - inside the build, on its private tmpfs
_CA_LENT = "/tmp/execgym-ca/ca-certificates.crt"  # noqa: S108 - likewise
_BUILD_ENV = {
    "HOME": "/root",
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "DEBIAN_FRONTEND": "noninteractive",
    "LANG": "C.UTF-8",
    "SSL_CERT_FILE": _CA_LENT,
    "PIP_CERT": _CA_LENT,
    "NODE_EXTRA_CA_CERTS": _CA_LENT,
    "npm_config_cafile": _CA_LENT,
}


class EnvironmentSpec(BaseModel):
    """What to build on top of a base environment; see the module docstring.

    Attributes:
        base: The base environment: a name or digest in the local cache.
        pip: Requirement strings for pip (``"requests==2.32.3"``).
        npm: Package specs for npm (``"left-pad@1.3.0"``).
        setup: Shell commands run last, in order, as the build's root.
        env: Environment variables the built environment sets (over the base's).
        pip_index_url: The package index pip reads; PyPI by default.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    base: str = Field(min_length=1)
    pip: tuple[str, ...] = ()
    npm: tuple[str, ...] = ()
    setup: tuple[str, ...] = ()
    env: dict[str, str] = Field(default_factory=dict)
    pip_index_url: str | None = None

    def digest(self, base: Environment) -> str:
        """The spec's digest with ``base`` (the environment ``self.base`` names)."""
        body = self.model_dump(mode="json")
        body["base"] = base.digest
        return sha256_digest(canonical_json(body))

    @classmethod
    def read(cls, path: Path) -> EnvironmentSpec:
        """Read a spec from a JSON file.

        Raises:
            ValueError: Not JSON, or not a spec: the message names the file, each wrong
                field (with the spec field a misspelt key was likely meant to be) and
                the fields a spec has.
        """
        text = Path(path).read_text()
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(
                f"{path} is not JSON ({error.msg} at line {error.lineno} column {error.colno}); "
                'a spec is one JSON object, e.g. {"base": "debian", "pip": ["pytest==8.4.2"]}'
            ) from None
        try:
            return cls.model_validate(data)
        except ValidationError as error:
            raise ValueError(
                f"{path} is not an environment spec: {_spec_problems(error)}"
            ) from None


def _spec_problems(error: ValidationError) -> str:
    """``error``'s problems, one per field, and the fields a spec has."""
    fields = list(EnvironmentSpec.model_fields)
    parts = []
    for item in error.errors():
        where = ".".join(str(p) for p in item["loc"]) or "the spec"
        if item["type"] == "extra_forbidden":
            close = difflib.get_close_matches(where, fields, n=1, cutoff=0.6)
            meant = f" (did you mean {close[0]!r}?)" if close else ""
            parts.append(f"{where!r} is not a spec field{meant}")
        else:
            message = str(item["msg"]).replace("a valid tuple", "a JSON list of strings")
            parts.append(f"{where}: {message}")
    return "; ".join(parts) + f"; a spec's fields are {', '.join(fields)} (docs/environments.md)"


@dataclass(frozen=True)
class Built:
    """What :func:`build` returned.

    Attributes:
        environment: The built environment.
        built: Whether this call ran the build (``False``: it was cached).
        seconds: How long this call took.
        spec_digest: The spec's digest (what the cache keys it by).
    """

    environment: Environment
    built: bool
    seconds: float
    spec_digest: str


class BuildFailed(RuntimeError):
    """A spec's build exited non-zero; the message ends with its output."""


def _script(spec: EnvironmentSpec, python: str | None, lend_pip: bool) -> str:
    lines = ["set -e"]
    if spec.pip:
        if python is None:
            raise ValueError(f"spec on {spec.base!r} installs pip packages but it has no Python")
        prefix = f"PYTHONPATH={_PIP_LENT} " if lend_pip else ""
        index = f" --index-url {_quote(spec.pip_index_url)}" if spec.pip_index_url else ""
        packages = " ".join(_quote(p) for p in spec.pip)
        lines.append(
            f"{prefix}{python} -m pip install --isolated --no-cache-dir --disable-pip-version-check"
            f" --no-warn-script-location --cert {_CA_LENT}"
            f" --target {PYTHON_LIBRARIES_DIR}{index} {packages}"
        )
    if spec.npm:
        lines.append("npm install -g --no-fund --no-audit " + " ".join(_quote(p) for p in spec.npm))
    lines += spec.setup
    return "\n".join(lines)


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def _has_pip(rootfs: Path, python: str | None) -> bool:
    if python is None:
        return False
    version = Path(python).name.removeprefix("python")
    candidates = [
        f"usr/lib/python{version}/site-packages/pip",
        "usr/lib/python3/dist-packages/pip",
        f"usr/local/lib/python{version}/site-packages/pip",
    ]
    return any((rootfs / c).is_dir() for c in candidates)


def host_ca_bundle() -> str:
    """The CA certificates the host trusts, lent to a build for its HTTPS.

    ``$PIP_CERT``, ``$SSL_CERT_FILE``, OpenSSL's default file or Debian's bundle: so
    HTTPS works through the same proxies and mirrors as on the host.

    Raises:
        SandboxUnavailable: None is found.
    """
    import ssl

    paths = ssl.get_default_verify_paths()
    candidates = (
        os.environ.get("PIP_CERT"),
        os.environ.get("SSL_CERT_FILE"),
        paths.cafile,
        "/etc/ssl/certs/ca-certificates.crt",
    )
    for candidate in candidates:
        if candidate and Path(candidate).is_file():
            return os.path.realpath(candidate)
    raise SandboxUnavailable(
        "no CA certificate bundle for an environment build's HTTPS: install ca-certificates "
        "or set SSL_CERT_FILE"
    )


def _host_pip() -> Path:
    import pip  # the host's pip: lent to a base without one

    return Path(pip.__file__).parent


def _bwrap_build_argv(root: Path, script: str, lend_pip: bool) -> list[str]:
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise SandboxUnavailable(
            "building an environment needs bubblewrap (apt-get install bubblewrap)"
        )
    argv = [
        bwrap,
        "--die-with-parent",
        "--new-session",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--hostname",
        "execgym-build",
    ]
    if os.geteuid() != 0:
        argv += ["--unshare-user", "--uid", "0", "--gid", "0"]
    argv += ["--cap-drop", "ALL"]
    for cap in _BUILD_CAPS:
        argv += ["--cap-add", cap]
    argv += ["--bind", str(root), "/", "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]  # noqa: S108
    if Path("/etc/resolv.conf").exists():
        argv += ["--ro-bind", os.path.realpath("/etc/resolv.conf"), "/etc/resolv.conf"]
    if lend_pip:
        argv += ["--ro-bind", str(_host_pip()), f"{_PIP_LENT}/pip"]
    argv += ["--ro-bind", host_ca_bundle(), _CA_LENT]
    env = [arg for key, value in _BUILD_ENV.items() for arg in ("--setenv", key, value)]
    return [*argv, *env, "--chdir", "/", "--", "/bin/sh", "-c", script]


def _key(info: os.stat_result) -> tuple[int, ...]:
    return (
        stat.S_IFMT(info.st_mode),
        stat.S_IMODE(info.st_mode),
        info.st_uid,
        info.st_gid,
        info.st_size,
        info.st_mtime_ns,
    )


def _diff_layer(environment: Environment, built: Path, out: Path) -> None:
    """Write the layer tar that turns ``environment``'s root into ``built`` (module docstring)."""
    base = environment.host_path
    as_root = os.geteuid() == 0
    me = os.geteuid()

    def owner(info: tarfile.TarInfo) -> tarfile.TarInfo:
        if not as_root:  # the build's root was the user: stored as root, as in the image
            info.uid = 0 if info.uid == me else info.uid
            info.gid = 0 if info.gid == os.getegid() else info.gid
        info.uname = info.gname = ""
        return info

    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        for root, dirs, files in os.walk(built):
            below = os.path.relpath(root, built)
            if below == ".":
                dirs[:] = [d for d in dirs if d not in SKIPPED]
                files = [f for f in files if f not in SKIPPED]
            dirs.sort()
            lower = base(below)
            if lower.is_dir() and not lower.is_symlink():
                present = set(dirs) | set(files)
                for gone in sorted(os.listdir(lower)):
                    if gone not in present and not (below == "." and gone in SKIPPED):
                        info = tarfile.TarInfo(os.path.normpath(os.path.join(below, ".wh." + gone)))
                        info.mtime = int(time.time())
                        tar.addfile(info)
            for name in [*dirs, *sorted(files)]:
                path = os.path.join(root, name)
                relative = os.path.normpath(os.path.join(below, name))
                mine = os.lstat(path)
                try:
                    theirs = os.lstat(base(relative))
                except FileNotFoundError:
                    theirs = None
                same = theirs is not None and _key(mine) == _key(theirs)
                if same and stat.S_ISLNK(mine.st_mode):
                    same = os.readlink(path) == os.readlink(base(relative))
                if same and stat.S_ISDIR(mine.st_mode):
                    continue  # walked into: its changed children are written
                if same:
                    continue
                tar.add(path, arcname=relative, recursive=False, filter=owner)


@contextlib.contextmanager
def _spec_lock(cache: EnvironmentCache, digest: str) -> Iterator[None]:
    folder = cache.root / "specs"
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f"{digest.removeprefix('sha256:')}.lock", "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _cached(cache: EnvironmentCache, digest: str) -> Environment | None:
    record = cache.root / "specs" / f"{digest.removeprefix('sha256:')}.json"
    if not record.is_file():
        return None
    environment_digest = json.loads(record.read_text())["environment"]
    try:
        return cache.get(environment_digest)
    except LookupError:
        return None


def build(
    spec: EnvironmentSpec,
    cache: EnvironmentCache | None = None,
    *,
    name: str | None = None,
    timeout_s: float = BUILD_TIMEOUT_S,
) -> Built:
    """The environment ``spec`` describes, built once (see the module docstring).

    Args:
        spec: What to build.
        cache: Where the base is and the result goes (default: the default cache).
        name: A name to give the result in the cache.
        timeout_s: Kill the build after this many seconds.

    Returns:
        The environment, and whether this call built it.

    Raises:
        EnvironmentNotFound: The base is not in the cache.
        BuildFailed: A command of the build failed (its output is in the message).
        SandboxUnavailable: No bwrap.
        ValueError: ``pip`` packages on a base without Python.
    """
    started = time.monotonic()
    cache = cache or EnvironmentCache()
    base = cache.get(spec.base)
    if base.rootfs is None:
        raise ValueError("a spec builds on an imported or built environment, not on the host")
    digest = spec.digest(base)
    with _spec_lock(cache, digest):
        found = _cached(cache, digest)
        if found is not None:
            if name is not None:
                found = cache.create(
                    [cache.layer(d) for d in found.layers], env=dict(found.config.env), name=name
                )
            return Built(found, False, time.monotonic() - started, digest)
        environment = _build(spec, cache, base, digest, name, timeout_s, started)
    return Built(environment, True, time.monotonic() - started, digest)


def _build(
    spec: EnvironmentSpec,
    cache: EnvironmentCache,
    base: Environment,
    digest: str,
    name: str | None,
    timeout_s: float,
    started: float,
) -> Environment:
    if base.rootfs is None:
        raise ValueError("a spec builds on an imported or built environment, not on the host")
    (cache.root / "tmp").mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(dir=cache.root / "tmp", prefix="build-"))
    try:
        root = scratch / "root"
        copy = shutil.which("cp") or "/bin/cp"
        subprocess.run([copy, "-a", "--reflink=auto", str(base.rootfs), str(root)], check=True)
        for inside, host in base.shared:  # the directories it shares with its own base
            (root / inside.lstrip("/")).rmdir()
            subprocess.run(
                [copy, "-a", "--reflink=auto", host, str(root / inside.lstrip("/"))], check=True
            )
        resolv = root / "etc" / "resolv.conf"
        made_resolv = not resolv.exists() and not resolv.is_symlink() and (root / "etc").is_dir()
        if made_resolv:
            resolv.touch()
        lend_pip = bool(spec.pip) and not _has_pip(root, base.config.python)
        argv = _bwrap_build_argv(root, _script(spec, base.config.python, lend_pip), lend_pip)
        try:
            done = subprocess.run(argv, capture_output=True, timeout=timeout_s, env={})
        except subprocess.TimeoutExpired as error:
            raise BuildFailed(f"the build of {digest} took over {timeout_s:.0f} s") from error
        if done.returncode != 0:
            output = (done.stdout + done.stderr).decode(errors="replace")[-4000:]
            raise BuildFailed(f"the build of {digest} failed ({done.returncode}):\n{output}")
        if made_resolv:
            resolv.unlink()
        _diff_layer(base, root, scratch / "layer.tar")
        layer = cache.add_layer(lambda: (scratch / "layer.tar").open("rb"), None)
        record: dict[str, Any] = {
            "spec": spec.model_dump(mode="json"),
            "spec_digest": digest,
            "built_at": time.time(),
            "build_seconds": time.monotonic() - started,
        }
        layers = [cache.layer(d) for d in base.layers] + [layer]
        environment = cache.create(
            layers,
            env={**base.config.env, **spec.env},
            name=name,
            source=f"spec:{digest}",
            extra=record,
        )
        (cache.root / "specs" / f"{digest.removeprefix('sha256:')}.json").write_text(
            json.dumps({"environment": environment.digest, **record})
        )
        cache._count("environments_built")
        return environment
    finally:
        remove_tree(scratch)
