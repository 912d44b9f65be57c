"""Importing OCI images: layers in order, whiteouts, shared layers, docker archives."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from execgym.environments import (
    Environment,
    EnvironmentCache,
    EnvironmentNotFound,
    ImageError,
    LayerError,
)
from execgym.environments.layers import unpack_layer
from tests.environments.images import layer_tar

# The first test of a session may import the Debian image (15-40 s; 75 s seen with the
# machine's load at 30) and build it on a new machine (mmdebstrap: 40-80 s more); builds
# copy its 210 MB root.
pytestmark = pytest.mark.timeout(600)


def test_base_image_is_debian_with_its_python(debian: Environment) -> None:
    assert debian.rootfs is not None
    assert "bookworm" in (debian.rootfs / "etc/os-release").read_text()
    assert debian.config.python == "/usr/bin/python3.11"  # /usr/bin/python3 resolved inside
    assert debian.config.env["PATH"] == "/usr/local/bin:/usr/bin:/bin"
    assert (debian.rootfs / "etc/issue").is_file()
    assert len(debian.layers) == 1
    assert debian.digest.startswith("sha256:")


def test_upper_layers_whiteouts_and_opaque_directories(debian_top: Environment) -> None:
    root = debian_top.rootfs
    assert root is not None
    assert not (root / "etc/issue").exists()  # .wh.issue in layer 2 hides the base's file
    assert os.path.lexists(debian_top.host_path("/etc/os-release"))  # its siblings stay
    assert sorted(p.name for p in (root / "opt/data").iterdir()) == ["c"]  # opaque in layer 3
    assert not (root / "opt/gone").exists()  # added by layer 2, whited out by layer 3
    assert (root / "opt/replaced").read_text() == "layer 3\n"
    assert not list(root.rglob(".wh.*"))  # no marker reaches the root


def test_shared_layers_are_stored_once(
    env_cache: EnvironmentCache, debian: Environment, debian_top: Environment
) -> None:
    assert debian_top.layers[0] == debian.layers[0]
    assert env_cache.stats()["layers_unpacked"] == 3  # base once, plus the two small ones
    assert debian.rootfs is not None
    assert debian_top.rootfs is not None
    python = debian.config.python or ""
    assert debian_top.host_path(python).stat().st_ino == debian.host_path(python).stat().st_ino
    use = env_cache.disk_use()
    # the second root costs its directories, not another copy of the files
    assert use.environments_bytes < 0.2 * use.layers_bytes


def test_an_upper_image_shares_the_unchanged_directories_of_its_base(
    env_cache: EnvironmentCache, debian: Environment, debian_top: Environment
) -> None:
    assert debian.rootfs is not None
    assert debian_top.rootfs is not None
    shared = dict(debian_top.shared)
    # its layers change /etc and /opt only: /usr and /var are the base's own directories
    assert shared["/usr"] == str(debian.rootfs / "usr")
    assert shared["/var"] == str(debian.rootfs / "var")
    assert "/etc" not in shared
    assert "/opt" not in shared
    assert not any((debian_top.rootfs / "usr").iterdir())  # an empty mount point
    # directories inside /etc it does not change are shared too
    assert shared["/etc/apt"] == str(debian.rootfs / "etc/apt")
    assert (debian_top.rootfs / "etc/os-release").is_symlink()  # /etc itself is its own
    # the second root costs a few directories, not its own copy of the base's 1,300
    own_dirs = sum(len(dirs) for _r, dirs, _f in os.walk(debian_top.rootfs))
    base_dirs = sum(len(dirs) for _r, dirs, _f in os.walk(debian.rootfs))
    assert base_dirs > 1000
    assert own_dirs < 100


def test_a_removed_base_stays_while_an_environment_shares_from_it(tmp_path: Path) -> None:
    cache = EnvironmentCache(tmp_path / "cache")
    tree = [(d, None) for d in ("usr/", "usr/lib/", "usr/lib/a/", "usr/lib/b/", "etc/")]
    with cache.locked():
        lower, middle, upper = (
            cache.add_layer(lambda entries=entries: io.BytesIO(layer_tar(entries)), None)
            for entries in ([*tree, ("usr/lib/a/f", b"f\n")], [("etc/y", b"y\n")], [("opt/z", b"")])
        )
    base = cache.create([lower], name="b")
    top = cache.create([lower, middle], name="t")
    higher = cache.create([lower, middle, upper], name="h")
    assert base.rootfs is not None
    assert top.rootfs is not None
    assert top.shared == (("/usr", str(base.rootfs / "usr")),)
    assert higher.shared == top.shared  # from where its base gets it: no chains
    cache.remove("b")
    assert {n for e in cache.list() for n in e.names} == {"t", "h"}
    assert (base.rootfs / "usr/lib/a/f").is_file()  # hidden, kept: top and higher bind it
    assert top.host_path("/usr/lib/a/f").read_text() == "f\n"
    again = cache.create([lower], name="b")  # back, unchanged
    assert (again.digest, again.shared) == (base.digest, ())
    cache.remove("b")
    cache.remove("t")
    assert base.rootfs.exists()  # higher still shares from it
    cache.gc(keep_unnamed=False)
    cache.remove("h")  # the last one sharing from it: all go
    assert cache.list() == []
    assert not any((cache.root / "envs").iterdir())
    cache.gc()
    assert not any((cache.root / "layers").iterdir())


def test_docker_archive_reuses_the_layers(
    test_image: Path, env_cache: EnvironmentCache, debian_top: Environment
) -> None:
    unpacked = env_cache.stats()["layers_unpacked"]
    again = env_cache.import_image(f"{test_image / 'top-docker.tar'}:execgym/top:latest")
    assert again.digest == debian_top.digest  # same layers and config: same environment
    assert env_cache.stats()["layers_unpacked"] == unpacked
    assert env_cache.get(debian_top.digest[:20]).digest == debian_top.digest


def test_bad_references_say_what_is_wrong(test_image: Path, env_cache: EnvironmentCache) -> None:
    with pytest.raises(ImageError, match="no image tagged 'nope'; it has: base, top"):
        env_cache.import_image(f"{test_image / 'layout'}:nope")
    with pytest.raises(ImageError, match="several images"):
        env_cache.import_image(test_image / "layout")
    with pytest.raises(ImageError, match="skopeo copy"):
        env_cache.import_image(test_image / "missing")
    with pytest.raises(EnvironmentNotFound, match="execgym env import"):
        env_cache.get("no-such-environment")


def _tar(entries: dict[str, bytes], symlinks: dict[str, str] | None = None) -> io.BytesIO:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, target in (symlinks or {}).items():  # first: files may go through them
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    out.seek(0)
    return out


def test_a_layer_must_match_its_digest_and_stay_inside(tmp_path: Path) -> None:
    with pytest.raises(LayerError, match="but the image names it"):
        unpack_layer(_tar({"a": b"1"}), tmp_path / "one", "sha256:" + "0" * 64)
    with pytest.raises(LayerError):  # tarfile's 'tar' filter (PEP 706) refuses it
        unpack_layer(_tar({"../escape": b"1"}), tmp_path / "two")
    assert not (tmp_path / "escape").exists()
    with pytest.raises(LayerError):  # a file through a symlink pointing out of the layer
        unpack_layer(_tar({"link/evil": b"1"}, {"link": str(tmp_path)}), tmp_path / "three")
    assert not (tmp_path / "evil").exists()


def test_without_tarfiles_filters_the_same_entries_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Debian 12's Python 3.11.2 has no extraction filters (PEP 706 came in 3.11.4)
    monkeypatch.delattr(tarfile, "tar_filter")
    with pytest.raises(LayerError, match="leave its directory"):
        unpack_layer(_tar({"../escape": b"1"}), tmp_path / "two")
    with pytest.raises(LayerError, match="outside"):
        unpack_layer(_tar({"link/evil": b"1"}, {"link": str(tmp_path)}), tmp_path / "three")
    assert not (tmp_path / "escape").exists()
    assert not (tmp_path / "evil").exists()
    layer = unpack_layer(_tar({"a/b": b"1"}, {"c": "/etc"}), tmp_path / "fine")
    assert (layer.tree / "a/b").read_bytes() == b"1"


def test_an_ordinary_users_unpack_changes_no_mode_through_a_symlink(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir(mode=0o500)
    monkeypatch.setattr("os.geteuid", lambda: 1000)  # the non-root branch: dirs made u+rwx
    layer = unpack_layer(_tar({"d/f": b"1"}, {"link": str(outside)}), tmp_path / "layer")
    assert (outside.stat().st_mode & 0o777) == 0o500  # the symlink's target is untouched
    assert (layer.tree / "d").stat().st_mode & 0o700 == 0o700
