"""Resolving --store / $EXECGYM_STORE, S3 options, and the errors of unusable stores."""

from __future__ import annotations

import sys
from pathlib import Path

import fsspec
import pytest

from execgym.errors import StorageUnavailable
from execgym.storage import open_store, resolve_location
from execgym.storage.location import redact


def test_default_env_and_argument_precedence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert resolve_location().root == str(tmp_path / ".cache" / "execgym" / "store")
    monkeypatch.setenv("EXECGYM_STORE", str(tmp_path / "from-env"))
    assert resolve_location().root == str(tmp_path / "from-env")
    assert resolve_location(tmp_path / "arg").root == str(tmp_path / "arg")
    assert resolve_location(f"file://{tmp_path}/url").root == str(tmp_path / "url")
    assert resolve_location("~/x").root == str(tmp_path / "x")


def test_s3_urls_take_the_endpoint_from_the_environment_or_the_options(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("EXECGYM_S3_ENDPOINT_URL", "http://minio:9000")
    location = resolve_location("s3://bucket/some/prefix/")
    assert (location.protocol, location.root, location.is_local) == (
        "s3",
        "bucket/some/prefix",
        False,
    )
    assert location.storage_options["client_kwargs"] == {"endpoint_url": "http://minio:9000"}
    assert location.storage_options["use_listings_cache"] is False
    given = resolve_location("s3://bucket", {"endpoint_url": "http://other:1"})
    assert given.storage_options["client_kwargs"] == {"endpoint_url": "http://other:1"}
    with pytest.raises(StorageUnavailable, match="names no bucket"):
        resolve_location("s3://")


def test_passwords_never_reach_messages() -> None:
    assert redact("s3://user:secret@bucket/x") == "s3://user:***@bucket/x"
    assert "secret" not in resolve_location("memory://user:secret@name").url


def test_a_missing_s3fs_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    assert fsspec.get_filesystem_class("memory")  # fsspec itself is always installed
    monkeypatch.setitem(sys.modules, "s3fs", None)  # import s3fs raises ImportError
    registry = sys.modules["fsspec.registry"]._registry  # where imported backends are kept
    monkeypatch.delitem(registry, "s3", raising=False)
    with pytest.raises(StorageUnavailable, match=r"pip install 'execgym\[storage\]'"):
        open_store("s3://bucket/prefix")


def test_an_unknown_protocol_is_refused() -> None:
    with pytest.raises(StorageUnavailable, match="unknown store protocol 'nosuch'"):
        open_store("nosuch://x")


def test_a_store_root_that_is_a_file_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    store = open_store(tmp_path / "file")
    with pytest.raises(
        StorageUnavailable, match=r"cannot look up blobs/.*Not a directory.*pass another --store"
    ):
        store.put_log("b", b"x")


def test_memory_stores_work_for_tests() -> None:
    store = open_store("memory://test-location")
    record = store.put_log("b-1", b"abc")
    assert store.read_log(record) == b"abc"
    assert [r.batch_id for r in store.logs()] == ["b-1"]
