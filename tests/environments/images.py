"""A real OCI image for the environment tests, built on this machine from Debian packages.

``mmdebstrap --variant=apt --include=python3 --format=tar bookworm`` makes a Debian root
file system with Python (about 40 s, 210 MB), ``umoci`` turns it into an OCI image
layout (tag ``base``, one layer) and appends two hand-made layers (tag ``top``) that
exercise the layer rules of the OCI image spec (``layer.md``): a whiteout ``.wh.NAME``
hiding a file of a lower layer, an opaque marker ``.wh..wh..opq`` hiding a directory's
lower contents, and a file replaced by an upper layer. ``skopeo copy`` writes the ``top``
image again as a ``docker save``-style archive. The result is kept under a cache
directory keyed by this recipe, so only the first test session on a machine pays.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

SUITE = "bookworm"
INCLUDE = "python3,util-linux"
RECIPE_VERSION = 1
TOOLS = ("mmdebstrap", "umoci", "skopeo")


def image_cache_root() -> Path:
    """Where built test images are kept: ``$EXECGYM_TEST_IMAGES`` or the XDG cache."""
    explicit = os.environ.get("EXECGYM_TEST_IMAGES")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "execgym-tests" / "images"


def layer_tar(entries: list[tuple[str, bytes | None]]) -> bytes:
    """An uncompressed layer tar: ``(path, content)`` files, ``(path/, None)`` dirs."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, content in entries:
            info = tarfile.TarInfo(name.rstrip("/"))
            info.mtime = 1_700_000_000
            if content is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                info.size, info.mode = len(content), 0o644
                tar.addfile(info, io.BytesIO(content))
    return out.getvalue()


SECOND_LAYER = [
    ("opt/", None),
    ("opt/data/", None),
    ("opt/data/a", b"lower a\n"),
    ("opt/data/b", b"lower b\n"),
    ("opt/gone", b"added by layer 2, whited out by layer 3\n"),
    ("opt/replaced", b"layer 2\n"),
    ("etc/", None),
    ("etc/.wh.issue", b""),  # hides Debian's /etc/issue from the base layer
]
THIRD_LAYER = [
    ("opt/", None),
    ("opt/data/", None),
    ("opt/data/.wh..wh..opq", b""),  # hides a and b
    ("opt/data/c", b"upper c\n"),
    ("opt/.wh.gone", b""),
    ("opt/replaced", b"layer 3\n"),
]


def _run(argv: list[str], cwd: Path) -> None:
    done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr[-3000:]}")


def build_test_image(root: Path | None = None) -> Path:
    """The directory holding ``layout/`` (OCI layout, tags ``base`` and ``top``) and
    ``top-docker.tar`` (the ``top`` image as a docker archive), built once per recipe.

    Raises:
        RuntimeError: mmdebstrap, umoci or skopeo failed (with its error output).
    """
    recipe = {
        "suite": SUITE,
        "include": INCLUDE,
        "version": RECIPE_VERSION,
        "layers": [repr(SECOND_LAYER), repr(THIRD_LAYER)],
    }
    key = hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]
    top = (root or image_cache_root()) / key
    if (top / "done").is_file():
        return top
    top.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=top.parent, prefix=".build-"))
    try:
        _run(
            [
                "mmdebstrap",
                "--quiet",
                "--variant=apt",
                f"--include={INCLUDE}",
                "--format=tar",
                SUITE,
                "rootfs.tar",
            ],
            work,
        )
        _run(["umoci", "init", "--layout", "layout"], work)
        _run(["umoci", "new", "--image", "layout:base"], work)
        _run(["umoci", "raw", "add-layer", "--image", "layout:base", "rootfs.tar"], work)
        _run(
            [
                "umoci",
                "config",
                "--image",
                "layout:base",
                "--config.env",
                "PATH=/usr/local/bin:/usr/bin:/bin",
            ],
            work,
        )
        (work / "rootfs.tar").unlink()
        (work / "layer2.tar").write_bytes(layer_tar(SECOND_LAYER))
        (work / "layer3.tar").write_bytes(layer_tar(THIRD_LAYER))
        _run(
            ["umoci", "raw", "add-layer", "--image", "layout:base", "--tag", "top", "layer2.tar"],
            work,
        )
        _run(["umoci", "raw", "add-layer", "--image", "layout:top", "layer3.tar"], work)
        _run(["umoci", "gc", "--layout", "layout"], work)
        _run(
            [
                "skopeo",
                "copy",
                "--quiet",
                "oci:layout:top",
                "docker-archive:top-docker.tar:execgym/top:latest",
            ],
            work,
        )
        (work / "done").write_text(json.dumps(recipe))
        if top.exists():
            shutil.rmtree(top)
        os.rename(work, top)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return top
