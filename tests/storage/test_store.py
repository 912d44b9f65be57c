"""One body, every backend: push, pull, pinning, corruption, logs, checkpoints and gc."""

from __future__ import annotations

import hashlib
import json
import os
from datetime import timedelta
from pathlib import Path

import pytest

from execgym.errors import (
    AmbiguousVersion,
    ArtifactNotFound,
    StorageCorruptionError,
    StorageError,
)
from execgym.storage import GcPolicy, Store, blob_key, open_store
from execgym.testing import FakeClock

TASKS = b'{"task_id": "t/1", "prompt": "def f():\\n"}\n{"task_id": "t/2", "prompt": "x"}\n'
TESTS = b"def test_f():\n    assert True\n"


def _tree(root: Path, **files: bytes) -> Path:
    for name, data in files.items():
        path = root / name.replace("__", "/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    return _tree(tmp_path / "ds", **{"tasks.jsonl": TASKS, "tests__test_f.py": TESTS})


def test_push_then_pull_gives_the_same_files_and_the_version_is_the_manifest_hash(
    store: Store, dataset: Path, tmp_path: Path
) -> None:
    pushed = store.push(dataset, name="toy", metadata={"kind": "tests"})
    _, manifest = store.manifest("toy")
    assert pushed.version == hashlib.sha256(manifest.canonical_json()).hexdigest()
    assert set(manifest.files) == {"tasks.jsonl", "tests/test_f.py"}
    assert manifest.files["tasks.jsonl"].sha256 == hashlib.sha256(TASKS).hexdigest()
    assert manifest.files["tasks.jsonl"].size_bytes == len(TASKS)
    assert manifest.metadata == {"kind": "tests"}
    assert (pushed.file_count, pushed.size_bytes) == (2, len(TASKS) + len(TESTS))

    pulled = store.pull("toy", tmp_path / "out")
    assert pulled.version == pushed.version
    assert (tmp_path / "out" / "tasks.jsonl").read_bytes() == TASKS
    assert (tmp_path / "out" / "tests" / "test_f.py").read_bytes() == TESTS
    assert store.read_file(f"toy@{pushed.version}", "tests/test_f.py") == TESTS


def test_pushing_the_same_content_again_is_the_same_version_and_stores_no_new_blob(
    store: Store, dataset: Path
) -> None:
    first = store.push(dataset, name="toy")
    blobs_before = store.objects.list("blobs")
    again = store.push(dataset, name="toy")
    assert again.version == first.version
    assert [b.key for b in store.objects.list("blobs")] == [b.key for b in blobs_before]
    assert [r.version for r in store.versions("toy")] == [first.version]
    # the same files under another name are the same version (content, not name)
    assert store.push(dataset, name="toy2").version == first.version
    assert [(r.name, r.version) for r in store.versions("toy")] == [("toy", first.version)]
    assert {r.name for r in store.versions()} == {"toy", "toy2"}


def test_versions_are_pinned_by_full_hash_or_unique_prefix_and_latest_is_the_default(
    store: Store, dataset: Path, clock: FakeClock, tmp_path: Path
) -> None:
    v1 = store.push(dataset, name="toy").version
    clock.advance(timedelta(minutes=1))
    (dataset / "tasks.jsonl").write_bytes(TASKS + b'{"task_id": "t/3"}\n')
    v2 = store.push(dataset, name="toy").version
    assert v1 != v2
    assert store.resolve("toy").version == v2
    assert store.resolve("toy@latest").version == v2
    assert store.resolve(f"toy@{v1}").version == v1
    assert store.resolve(f"toy@{v1[:10]}").version == v1
    store.pull(f"toy@{v1[:10]}", tmp_path / "old")
    assert (tmp_path / "old" / "tasks.jsonl").read_bytes() == TASKS
    assert [r.version for r in store.versions("toy")] == [v1, v2]


def test_an_ambiguous_prefix_and_unknown_names_are_clear_errors(
    store: Store, dataset: Path, clock: FakeClock
) -> None:
    by_first_digit: dict[str, list[str]] = {}
    index = 0
    while not any(len(v) > 1 for v in by_first_digit.values()):  # at most 17 pushes
        version = store.push(dataset, name="toy", metadata={"i": index}).version
        by_first_digit.setdefault(version[0], []).append(version)
        index += 1
        clock.advance(timedelta(seconds=1))
    digit, clash = next((d, v) for d, v in by_first_digit.items() if len(v) > 1)
    with pytest.raises(AmbiguousVersion, match="give more digits") as caught:
        store.resolve(f"toy@{digit}")
    assert set(clash) <= set(caught.value.candidates)
    with pytest.raises(ArtifactNotFound, match=r"no data set named 'nope'.*toy"):
        store.resolve("nope")
    with pytest.raises(ArtifactNotFound, match="no version starting with"):
        store.resolve("toy@" + "f" * 64 if digit != "f" else "toy@" + "0" * 64)
    with pytest.raises(ValueError, match="version is the hex hash"):
        store.resolve("toy@not-hex")
    with pytest.raises(ValueError, match="invalid data set name"):
        store.resolve("../etc")


def test_a_corrupted_blob_is_detected_on_read_and_never_written_out(
    store: Store, dataset: Path, tmp_path: Path
) -> None:
    version = store.push(dataset, name="toy").version
    sha = hashlib.sha256(TASKS).hexdigest()
    store.objects.write_bytes(blob_key(sha), TASKS.replace(b"t/1", b"t/9"))  # same size
    out = tmp_path / "out"
    _tree(out, **{"tasks.jsonl": b"what was there"})
    with pytest.raises(StorageCorruptionError) as caught:
        store.pull(f"toy@{version}", out)
    error = caught.value
    assert sha in str(error)
    assert store.url in str(error)
    assert error.key == blob_key(sha)
    assert (error.expected_sha256, error.actual_sha256) == (
        sha,
        hashlib.sha256(TASKS.replace(b"t/1", b"t/9")).hexdigest(),
    )
    assert (out / "tasks.jsonl").read_bytes() == b"what was there"
    assert [p.name for p in out.iterdir()] == ["tasks.jsonl"]  # no partial file left
    with pytest.raises(StorageCorruptionError):
        store.read_file("toy", "tasks.jsonl")


def test_a_corrupted_manifest_is_detected_on_read(store: Store, dataset: Path) -> None:
    version = store.push(dataset, name="toy").version
    key = f"manifests/{version}.json"
    changed = store.objects.read_bytes(key).replace(b'"tasks.jsonl"', b'"tasks.jsonX"')
    store.objects.write_bytes(key, changed)
    with pytest.raises(StorageCorruptionError, match=f"manifest {version}.*corrupted"):
        store.manifest("toy")


def test_batch_logs_round_trip_with_their_time(
    store: Store, tmp_path: Path, clock: FakeClock
) -> None:
    results = tmp_path / "results.jsonl"
    results.write_text(json.dumps({"task_id": "t/1", "verdict": "passed"}) + "\n")
    first = store.put_log("batch-1", results)
    clock.advance(timedelta(seconds=5))
    second = store.put_log("batch-1", b"worker log\n", file_name="worker.log")
    other = store.put_log("batch-2", b"x")
    assert first.created_at == second.created_at - timedelta(seconds=5)
    assert [r.file_name for r in store.logs("batch-1")] == ["results.jsonl", "worker.log"]
    assert store.read_log(store.logs("batch-1")[0]) == results.read_bytes()
    assert len(store.logs()) == 3
    assert store.logs("batch-2") == [other]
    with pytest.raises(ValueError, match="invalid batch id"):
        store.put_log("a/b", b"x")


def test_gc_expires_old_logs_and_removes_their_blobs_but_keeps_every_referenced_blob(
    store: Store, dataset: Path, clock: FakeClock
) -> None:
    pushed = store.push(dataset, name="toy")
    old_log = store.put_log("old", b"old results\n")
    clock.advance(timedelta(days=6))
    new_log = store.put_log("new", b"new results\n")
    shared = store.put_log("shares-a-blob", TASKS)  # the same bytes as a data set file
    clock.advance(timedelta(days=2))  # old: 8 days, new: 2 days, all blobs past the grace

    report = store.gc(GcPolicy(log_ttl=timedelta(days=7)))
    assert [r.batch_id for r in report.expired_logs] == ["old"]
    assert report.removed_blobs == (old_log.sha256,)
    assert report.removed_bytes == old_log.size_bytes
    assert [r.batch_id for r in store.logs()] == ["new", "shares-a-blob"]
    assert store.read_log(new_log) == b"new results\n"
    assert store.read_log(shared) == TASKS
    with pytest.raises(ArtifactNotFound):
        store.read_log(old_log)

    clock.advance(timedelta(days=30))  # every log expires; the data set's blobs stay
    report = store.gc(GcPolicy(log_ttl=timedelta(days=7)))
    assert {r.batch_id for r in report.expired_logs} == {"new", "shares-a-blob"}
    assert report.removed_blobs == (new_log.sha256,)
    _, manifest = store.manifest(f"toy@{pushed.version}")
    for entry in manifest.files.values():
        assert store.blobs.read_bytes(entry.sha256)


def test_gc_keeps_young_unreferenced_blobs_for_a_push_that_is_running(
    store: Store, clock: FakeClock
) -> None:
    orphan = store.blobs.put_bytes(b"written by a push that has not written its manifest")
    report = store.gc(GcPolicy(grace=timedelta(hours=1)))
    assert report.removed_blobs == ()
    assert report.young_unreferenced == 1
    clock.advance(timedelta(hours=2))
    dry = store.gc(GcPolicy(grace=timedelta(hours=1)), dry_run=True)
    assert dry.dry_run
    assert dry.removed_blobs == (orphan.sha256,)
    assert store.blobs.exists(orphan.sha256)  # a dry run deletes nothing
    report = store.gc(GcPolicy(grace=timedelta(hours=1)))
    assert report.removed_blobs == (orphan.sha256,)
    assert not store.blobs.exists(orphan.sha256)


def test_keep_versions_drops_old_versions_except_one_a_checkpoint_was_trained_on(
    store: Store, dataset: Path, clock: FakeClock
) -> None:
    versions = []
    for index in range(4):
        (dataset / "tasks.jsonl").write_bytes(TASKS + f"# {index}\n".encode())
        versions.append(store.push(dataset, name="toy").version)
        clock.advance(timedelta(minutes=1))
    checkpoint = store.add_checkpoint(
        "s3://models/run-1/step-100", step=100, dataset=f"toy@{versions[0][:12]}"
    )
    assert checkpoint.dataset_version == versions[0]
    clock.advance(timedelta(hours=2))

    report = store.gc(GcPolicy(keep_versions=2))
    dropped = {r.version for r in report.dropped_versions}
    assert dropped == {versions[1]}
    assert set(report.removed_manifests) == {versions[1]}
    assert len(report.removed_blobs) == 1  # only version 1's tasks.jsonl was its own
    assert [r.version for r in store.versions("toy")] == [versions[0], *versions[2:]]
    assert store.manifest(f"toy@{versions[0]}")[0].version == versions[0]

    with pytest.raises(ValueError, match=checkpoint.id):
        store.drop(f"toy@{versions[0]}")
    store.remove_checkpoint(checkpoint.id[:6])
    store.drop(f"toy@{versions[0]}")
    report = store.gc(GcPolicy(keep_versions=2))
    assert set(report.removed_manifests) == {versions[0]}
    assert [r.version for r in store.versions("toy")] == versions[2:]


def test_a_checkpoint_keeps_its_version_even_when_the_name_no_longer_lists_it(
    store: Store, dataset: Path, clock: FakeClock, tmp_path: Path
) -> None:
    version = store.push(dataset, name="toy").version
    checkpoint = store.add_checkpoint(
        "hf://org/model@rev", step=7, dataset="toy", metadata={"loss": 0.5}
    )
    assert store.add_checkpoint("hf://org/model@rev", step=7, dataset="toy").id == checkpoint.id
    assert len(store.checkpoints()) == 1
    store.objects.delete(f"refs/toy/{version}.json")  # as if the name's ref were gone
    clock.advance(timedelta(days=400))
    report = store.gc(GcPolicy())
    assert report.removed_manifests == ()
    assert report.removed_blobs == ()
    assert store.blobs.read_bytes(hashlib.sha256(TESTS).hexdigest()) == TESTS


def test_gc_stops_before_deleting_anything_when_a_kept_manifest_is_unreadable(
    store: Store, dataset: Path, clock: FakeClock
) -> None:
    version = store.push(dataset, name="toy").version
    store.put_log("old", b"old")
    orphan = store.blobs.put_bytes(b"orphan")
    store.objects.write_bytes(f"manifests/{version}.json", b"{}")
    clock.advance(timedelta(days=30))
    with pytest.raises(StorageCorruptionError, match=version):
        store.gc(GcPolicy())
    assert store.blobs.exists(orphan.sha256)
    assert len(store.logs()) == 1
    store.objects.delete(f"manifests/{version}.json")
    with pytest.raises(StorageError, match=r"nothing deleted.*manifest is missing"):
        store.gc(GcPolicy())


def test_one_unreadable_record_does_not_sink_a_listing(store: Store, dataset: Path) -> None:
    store.push(dataset, name="toy")
    store.objects.write_bytes("refs/toy/broken.json", b"not json")
    assert [r.name for r in store.versions()] == ["toy"]
    with pytest.raises(StorageCorruptionError, match=r"refs/toy/broken\.json"):
        store.gc(GcPolicy())  # gc must know every reference: it refuses instead


def test_pull_refuses_nothing_it_should_not_and_checks_file_names(store: Store) -> None:
    from execgym.storage import FileEntry, Manifest

    entry = FileEntry(sha256="0" * 64, size_bytes=0)
    for bad in ("../x", "/etc/passwd", "a//b", "a\\b", "./a"):
        with pytest.raises(ValueError, match="unsafe file name"):
            Manifest(files={bad: entry})


def test_a_push_rewrites_an_old_unreferenced_blob_so_a_concurrent_gc_cannot_take_it(
    store: Store, dataset: Path, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    store.blobs.put_bytes(TASKS)  # left by an interrupted push: no manifest names it
    uploads: list[str] = []
    real_upload = store.objects.upload
    monkeypatch.setattr(
        store.objects, "upload", lambda key, path: (uploads.append(key), real_upload(key, path))
    )
    store.push(dataset, name="toy")
    assert blob_key(hashlib.sha256(TASKS).hexdigest()) not in uploads  # fresh: reused
    clock.advance(timedelta(hours=2))  # now it is older than the 30-minute refresh
    uploads.clear()
    (dataset / "tests" / "test_f.py").write_bytes(TESTS + b"# v2\n")
    store.push(dataset, name="toy")
    assert blob_key(hashlib.sha256(TASKS).hexdigest()) in uploads  # written again


def test_local_writes_leave_no_temporary_files_and_gc_removes_stale_ones(
    tmp_path: Path, dataset: Path, clock: FakeClock
) -> None:
    store = open_store(tmp_path / "store", clock=clock)
    store.push(dataset, name="toy")
    store.put_log("b", b"log")
    assert not list((tmp_path / "store").rglob(".tmp-*"))
    stale = tmp_path / "store" / "blobs" / "ab" / ".tmp-0123-cdef"
    stale.parent.mkdir(parents=True, exist_ok=True)
    stale.write_bytes(b"half a blob from a killed push")
    clock.advance(timedelta(hours=2))
    past_grace = clock().timestamp() - 7200
    os.utime(stale, (past_grace, past_grace))
    report = store.gc(GcPolicy())
    assert report.removed_temp_files == 1
    assert report.removed_blobs == ()
    assert not stale.exists()


def test_scrub_reports_every_corrupted_and_missing_object_and_a_push_repairs_them(
    store: Store, dataset: Path, tmp_path: Path
) -> None:
    store.push(dataset, name="toy")
    assert store.scrub().is_clean
    tasks_key = blob_key(hashlib.sha256(TASKS).hexdigest())
    tests_key = blob_key(hashlib.sha256(TESTS).hexdigest())
    store.objects.write_bytes(tasks_key, b"X" * len(TASKS))  # same size: bit rot
    store.objects.delete(tests_key)
    report = store.scrub(delete_corrupted=True)
    assert report.corrupted == (tasks_key,)
    assert report.deleted == (tasks_key,)
    assert [m.split(":")[1] for m in report.missing] == ["tests/test_f.py"]
    assert not report.is_clean
    store.push(dataset, name="toy")  # the same files: the same version, blobs written back
    assert store.scrub().is_clean
    store.pull("toy", tmp_path / "out")
    assert (tmp_path / "out" / "tasks.jsonl").read_bytes() == TASKS
