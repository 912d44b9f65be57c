"""``execgym data``, ``storage`` and ``checkpoints``: thin commands over the store.

They call :mod:`execgym.storage`; ``score --store`` uploads its results through
:func:`upload_results`.

Every command takes ``--store URL`` (a directory or ``s3://bucket/prefix``; default
``$EXECGYM_STORE`` or ``~/.cache/execgym/store``). Store failures exit 1 with the
library's message, which names what is wrong and how to fix it.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import click
from pydantic import BaseModel, JsonValue

from execgym.cli.options import json_flag
from execgym.errors import Error
from execgym.storage import GcPolicy, GcReport, Store, open_store, parse_duration
from execgym.storage.records import check_name

_store_option = click.option(
    "--store",
    "store_url",
    default=None,
    metavar="URL",
    help="A directory or s3://bucket/prefix [default: $EXECGYM_STORE or "
    "~/.cache/execgym/store]; S3's endpoint from $EXECGYM_S3_ENDPOINT_URL.",
)
_meta_option = click.option(
    "--meta",
    "meta",
    multiple=True,
    metavar="KEY=VALUE",
    help="Metadata (repeatable); VALUE is read as JSON when it parses, else as text.",
)


@contextlib.contextmanager
def _failures() -> Iterator[None]:
    """Turn the library's errors (and bad arguments) into one clear line, exit 1."""
    try:
        yield
    except (Error, ValueError, OSError) as error:
        raise click.ClickException(str(error)) from error


def _open(store_url: str | None) -> Store:
    """The store, contacted once (so a missing bucket is named as such)."""
    with _failures():
        store = open_store(store_url)
        store.check()
        return store


def _metadata(pairs: tuple[str, ...]) -> dict[str, JsonValue]:
    metadata: dict[str, JsonValue] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint="--meta")
        try:
            metadata[key] = json.loads(value)
        except json.JSONDecodeError:
            metadata[key] = value
    return metadata


def format_size(size_bytes: int) -> str:
    """``1.5 KiB``-style size for listings (powers of 1024)."""
    size = float(size_bytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{size_bytes} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def _when(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%SZ")


def _name_row(record: Any, versions: int) -> list[str]:
    size = format_size(record.size_bytes)
    return [record.name, str(versions), record.version[:12], _when(record.pushed_at), size]


def _echo_json_or_empty(records: Sequence[BaseModel], as_json: bool, empty: str) -> bool:
    """Print ``records`` as JSON lines, or ``empty`` when there are none.

    Returns False when the caller still has to print its table.
    """
    if as_json:
        for record in records:
            click.echo(record.model_dump_json())
        return True
    if not records:
        click.echo(empty)
        return True
    return False


def _print_stored(what: str, key: str) -> None:
    """Say what was stored on stderr, and print its key alone on stdout (for scripts)."""
    click.echo(what, err=True)
    click.echo(key)


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


@click.group()
def data() -> None:
    """Versioned data sets and test suites in the object store.

    \b
    Examples:
      execgym data push tasks.jsonl --name humaneval
      execgym data push suites/ --name my-tests --meta kind=tests
      execgym data pull humaneval@3fa2c1 ./data
      execgym data ls humaneval --store s3://bucket/execgym
    """  # noqa: D301 - click keeps the lines after a backspace character ("\b") as they are


@data.command("push")
@click.argument("path", type=click.Path(exists=True, path_type=Path))
@click.option("--name", required=True, help="The data set's name (letters, digits, . _ -).")
@_meta_option
@_store_option
def push(path: Path, name: str, meta: tuple[str, ...], store_url: str | None) -> None:
    """Store the file or directory PATH as a version of NAME and print the version."""
    store = _open(store_url)
    with _failures():
        record = store.push(path, name=name, metadata=_metadata(meta))
    _print_stored(
        f"pushed {name}@{record.version[:12]}: {record.file_count} files, "
        f"{format_size(record.size_bytes)} to {store.url}",
        record.version,
    )


@data.command("pull")
@click.argument("spec", metavar="NAME[@VERSION]")
@click.argument("dest", type=click.Path(file_okay=False, path_type=Path))
@_store_option
def pull(spec: str, dest: Path, store_url: str | None) -> None:
    """Write the files of a data set version under the directory DEST.

    NAME alone is its latest version; NAME@VERSION pins one (the full hash or a unique
    prefix). Each file is verified against its hash before it is written.
    """
    store = _open(store_url)
    with _failures():
        pulled = store.pull(spec, dest)
    click.echo(
        f"pulled {pulled.name}@{pulled.version}: {len(pulled.files)} files, "
        f"{format_size(pulled.size_bytes)} into {dest}"
    )


@data.command("ls")
@click.argument("name", required=False)
@json_flag("One JSON object per line.")
@_store_option
def ls(name: str | None, as_json: bool, store_url: str | None) -> None:
    """List data set names (with their latest version), or the versions of NAME."""
    store = _open(store_url)
    with _failures():
        records = store.versions(name)
    empty = f"no versions of {name} in {store.url}" if name else f"{store.url} is empty"
    if _echo_json_or_empty(records, as_json, empty):
        return
    if name is None:
        latest: dict[str, Any] = {}
        counts: dict[str, int] = {}
        for record in records:  # oldest first: the last one seen is the latest
            latest[record.name] = record
            counts[record.name] = counts.get(record.name, 0) + 1
        rows = [["NAME", "VERSIONS", "LATEST", "PUSHED", "SIZE"]] + [
            _name_row(r, counts[r.name]) for r in latest.values()
        ]
    else:
        rows = [["VERSION", "PUSHED", "FILES", "SIZE"]] + [
            [r.version, _when(r.pushed_at), str(r.file_count), format_size(r.size_bytes)]
            for r in reversed(records)
        ]
    click.echo(_table(rows))


@data.command("rm")
@click.argument("spec", metavar="NAME@VERSION")
@_store_option
def rm(spec: str, store_url: str | None) -> None:
    """Stop listing a version of a data set; `execgym storage gc` then frees its bytes.

    Refused while a registered checkpoint was trained on it.
    """
    if "@" not in spec:
        raise click.UsageError("name the version to remove: NAME@VERSION (see `execgym data ls`)")
    store = _open(store_url)
    with _failures():
        record = store.drop(spec)
    click.echo(f"removed {record.name}@{record.version} from the listing of {store.url}")


@click.group()
def storage() -> None:
    """The object store's lifecycle: logs and garbage collection."""


def _render_gc(report: GcReport, store: Store) -> str:
    verb = "would remove" if report.dry_run else "removed"
    lines = [
        f"{verb}: {len(report.expired_logs)} expired logs, "
        f"{len(report.dropped_versions)} versions, {len(report.removed_manifests)} manifests, "
        f"{len(report.removed_blobs)} blobs, {report.removed_temp_files} temporary files "
        f"({format_size(report.removed_bytes)})",
        f"kept: {report.kept_manifests} manifests, {report.kept_blobs} referenced blobs, "
        f"{report.kept_logs} logs, {report.young_unreferenced} unreferenced objects younger "
        "than the grace period",
    ]
    lines += [
        f"  log {log.batch_id}/{log.file_name} ({_when(log.created_at)})"
        for log in report.expired_logs
    ]
    lines += [f"  version {r.name}@{r.version[:12]}" for r in report.dropped_versions]
    lines.append(f"store: {store.url}")
    return "\n".join(lines)


@storage.command("gc")
@click.option(
    "--log-ttl",
    default="7d",
    show_default=True,
    help="Batch logs older than this expire (s, m, h, d or w).",
)
@click.option(
    "--grace",
    default="1h",
    show_default=True,
    help="Unreferenced objects younger than this are kept (a push may be writing them).",
)
@click.option(
    "--keep-versions",
    type=click.IntRange(min=1),
    default=None,
    help="Keep only the N latest versions of each name (and any a checkpoint names) "
    "[default: keep all].",
)
@click.option("--dry-run", is_flag=True, help="Report what would be removed; delete nothing.")
@_store_option
def gc(
    log_ttl: str, grace: str, keep_versions: int | None, dry_run: bool, store_url: str | None
) -> None:
    """Expire old logs and remove blobs that no kept manifest or log references.

    Nothing referenced by a kept manifest is ever deleted.
    """
    store = _open(store_url)
    with _failures():
        policy = GcPolicy(
            log_ttl=parse_duration(log_ttl),
            grace=parse_duration(grace),
            keep_versions=keep_versions,
        )
        report = store.gc(policy, dry_run=dry_run)
    click.echo(_render_gc(report, store))


@storage.command("verify")
@click.option(
    "--delete-corrupted",
    is_flag=True,
    help="Delete corrupted blobs, so that pushing their data set again writes them back.",
)
@_store_option
def verify(delete_corrupted: bool, store_url: str | None) -> None:
    """Read every blob and manifest back and check its hash; exit 1 if any is bad."""
    store = _open(store_url)
    with _failures():
        report = store.scrub(delete_corrupted=delete_corrupted)
    click.echo(
        f"checked {report.checked_blobs} blobs ({format_size(report.checked_bytes)}) and "
        f"{report.checked_manifests} manifests in {store.url}"
    )
    for key in report.corrupted:
        state = " (deleted)" if key in report.deleted else ""
        click.echo(f"corrupted: {key}{state}")
    for where in report.missing:
        click.echo(f"missing: {where}")
    if not report.is_clean:
        raise click.ClickException(
            f"{len(report.corrupted)} corrupted and {len(report.missing)} missing objects: "
            "push the data sets that hold them again (after --delete-corrupted)"
        )


@storage.command("logs")
@click.argument("batch_id", required=False)
@_store_option
def logs(batch_id: str | None, store_url: str | None) -> None:
    """List the stored batch logs (of BATCH_ID, or all)."""
    store = _open(store_url)
    with _failures():
        records = store.logs(batch_id)
    if not records:
        click.echo(f"no batch logs in {store.url}")
        return
    rows = [["BATCH", "FILE", "STORED", "SIZE", "SHA256"]] + [
        [r.batch_id, r.file_name, _when(r.created_at), format_size(r.size_bytes), r.sha256[:12]]
        for r in records
    ]
    click.echo(_table(rows))


@click.group()
def checkpoints() -> None:
    """The registry of model checkpoints and the data set versions they were trained on.

    \b
    Examples:
      execgym checkpoints add s3://models/run-7/step-1000 --step 1000 --dataset humaneval@3fa2
      execgym checkpoints ls --dataset humaneval
    """  # noqa: D301 - click keeps the lines after a backspace character ("\b") as they are


@checkpoints.command("add")
@click.argument("uri")
@click.option("--step", type=click.IntRange(min=0), required=True, help="The training step.")
@click.option(
    "--dataset",
    "dataset",
    required=True,
    metavar="NAME[@VERSION]",
    help="The data set version it was trained on (NAME alone: its latest now).",
)
@_meta_option
@_store_option
def add(uri: str, step: int, dataset: str, meta: tuple[str, ...], store_url: str | None) -> None:
    """Register the checkpoint whose weights are at URI; prints its id."""
    store = _open(store_url)
    with _failures():
        checkpoint = store.add_checkpoint(uri, step=step, dataset=dataset, metadata=_metadata(meta))
    _print_stored(
        f"registered step {step} on {checkpoint.dataset}@{checkpoint.dataset_version[:12]} "
        f"in {store.url}",
        checkpoint.id,
    )


@checkpoints.command("ls")
@click.option("--dataset", default=None, help="Only those trained on this data set name.")
@json_flag("One JSON object per line.")
@_store_option
def ls_checkpoints(dataset: str | None, as_json: bool, store_url: str | None) -> None:
    """List registered checkpoints."""
    store = _open(store_url)
    with _failures():
        found = store.checkpoints(dataset)
    if _echo_json_or_empty(found, as_json, f"no checkpoints in {store.url}"):
        return
    rows = [["ID", "STEP", "DATASET", "REGISTERED", "URI"]] + [
        [c.id, str(c.step), f"{c.dataset}@{c.dataset_version[:12]}", _when(c.registered_at), c.uri]
        for c in found
    ]
    click.echo(_table(rows))


@checkpoints.command("rm")
@click.argument("checkpoint_id", metavar="ID")
@_store_option
def rm_checkpoint(checkpoint_id: str, store_url: str | None) -> None:
    """Unregister a checkpoint (ID or a unique prefix); its weights are not touched."""
    store = _open(store_url)
    with _failures():
        removed = store.remove_checkpoint(checkpoint_id)
    click.echo(f"unregistered {removed.id} ({removed.uri}, step {removed.step})")


def check_store(store_url: str, batch_id: str | None) -> None:
    """Fail before a batch runs when its ``--store`` is unusable, not after it.

    Unusable: a bad URL, no s3fs, unreachable, no such bucket, or a bad ``--batch-id``.

    Raises:
        click.ClickException: The store cannot be used; the message says why.
    """
    if batch_id is not None:
        try:
            check_name(batch_id, "--batch-id")
        except ValueError as error:
            raise click.BadParameter(str(error), param_hint="--batch-id") from error
    _open(store_url)


def upload_results(store_url: str, batch_id: str | None, results: Path) -> str:
    """Store a scoring batch's results JSONL as its batch log; returns a summary line.

    Args:
        store_url: The ``--store`` URL.
        batch_id: The batch's id [default: ``score-<UTC time>``].
        results: The results file.

    Raises:
        click.ClickException: The store failed (the results file stays where it is).
    """
    store = _open(store_url)
    batch = batch_id or "score-" + store.clock().strftime("%Y%m%dT%H%M%SZ")
    try:
        record = store.put_log(batch, results)
    except (Error, ValueError, OSError) as error:
        raise click.ClickException(
            f"the results were written to {results} but not stored: {error}"
        ) from error
    return f"batch log: {record.batch_id}/{record.file_name} in {store.url}"
