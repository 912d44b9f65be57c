"""``execgym env``: import, build, list, push, pull and collect environments.

Thin commands over :mod:`execgym.environments`. Every command takes ``--cache DIR`` (the
local environment cache; default ``$EXECGYM_ENV_CACHE`` or
``~/.cache/execgym/environments``); ``push`` and ``pull`` take ``--store URL`` as the
``data`` commands do. Failures exit 1 with the library's message.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from execgym.cli.options import json_flag
from execgym.environments import Environment, EnvironmentCache
from execgym.errors import Error

_cache_option = click.option(
    "--cache",
    "cache_dir",
    default=None,
    metavar="DIR",
    type=click.Path(file_okay=False, path_type=Path),
    help="The environment cache [default: $EXECGYM_ENV_CACHE or ~/.cache/execgym/environments].",
)
_store_option = click.option(
    "--store",
    "store_url",
    default=None,
    metavar="URL",
    help="A directory or s3://bucket/prefix [default: $EXECGYM_STORE or ~/.cache/execgym/store].",
)


@contextlib.contextmanager
def _failures() -> Iterator[None]:
    """The library's errors (and bad input) as one clear line, exit 1."""
    try:
        yield
    except (Error, ValueError, LookupError, OSError, RuntimeError) as error:
        raise click.ClickException(str(error)) from error


def _describe(environment: Environment, cache: EnvironmentCache) -> dict[str, Any]:
    record = cache.record(environment)
    return {
        "digest": environment.digest,
        "names": list(environment.names),
        "layers": list(environment.layers),
        "python": environment.config.python,
        "source": environment.source,
        "rootfs": str(environment.rootfs) if environment.rootfs else None,
        "built_at": record.get("built_at"),
    }


def _show(environment: Environment, cache: EnvironmentCache, as_json: bool, note: str) -> None:
    if as_json:
        click.echo(json.dumps({**_describe(environment, cache), "note": note}))
    else:
        click.echo(f"{note}: {', '.join(environment.names) or '-'} {environment.digest}", err=True)
        click.echo(environment.digest)


@click.group("env")
def env() -> None:
    """Environments: the root file systems tasks run in (OCI images, built specs)."""


@env.command("import")
@click.argument("image")
@click.option("--name", default=None, help="Name it in the cache.")
@_cache_option
@json_flag("Print the environment as JSON.")
def import_(image: str, name: str | None, cache_dir: Path | None, as_json: bool) -> None:
    """Import IMAGE: an OCI layout directory or docker/podman save tar, as PATH[:TAG].

    From a registry, copy it first: skopeo copy docker://debian:bookworm oci:DIR:bookworm
    """
    cache = EnvironmentCache(cache_dir)
    with _failures():
        environment = cache.import_image(image, name=name)
    _show(environment, cache, as_json, "imported")


@env.command("build")
@click.argument("spec_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--name", default=None, help="Name it in the cache.")
@_cache_option
@json_flag("Print the environment as JSON.")
def build_(spec_file: Path, name: str | None, cache_dir: Path | None, as_json: bool) -> None:
    """Build the spec in SPEC_FILE (JSON: base, pip, npm, setup, env), once.

    A spec built before (same content, same base) is not built again.
    """
    from execgym.environments.spec import EnvironmentSpec, build

    cache = EnvironmentCache(cache_dir)
    with _failures():
        built = build(EnvironmentSpec.read(spec_file), cache, name=name)
    note = f"built in {built.seconds:.1f} s" if built.built else "cached (not rebuilt)"
    _show(built.environment, cache, as_json, note)


@env.command("list")
@_cache_option
@json_flag("One JSON object per environment.")
def list_(cache_dir: Path | None, as_json: bool) -> None:
    """List the environments in the cache, and the disk they use."""
    cache = EnvironmentCache(cache_dir)
    with _failures():
        environments = cache.list()
        use = cache.disk_use() if environments else None
    for environment in environments:
        if as_json:
            click.echo(json.dumps(_describe(environment, cache)))
        else:
            names = ",".join(environment.names) or "-"
            click.echo(f"{environment.short}  {names:24}  {environment.source}")
    if use is not None and not as_json:
        click.echo(
            f"disk: {use.layers_bytes / 2**20:.0f} MiB of layers, "
            f"{use.environments_bytes / 2**20:.0f} MiB of roots (hard links counted once)",
            err=True,
        )


@env.command("push")
@click.argument("reference")
@click.option("--as", "as_name", default=None, help="The store name [default: its name].")
@_cache_option
@_store_option
def push_(
    reference: str, as_name: str | None, cache_dir: Path | None, store_url: str | None
) -> None:
    """Push the environment REFERENCE (name or digest) to the object store."""
    from execgym.environments.remote import push
    from execgym.storage import open_store

    cache = EnvironmentCache(cache_dir)
    with _failures():
        environment = cache.get(reference)
        name = as_name or (
            environment.names[0] if environment.names else f"env-{environment.short}"
        )
        pushed = push(open_store(store_url), environment, name)
    click.echo(f"pushed {name}@{pushed.record.version[:12]} ({pushed.layers} layers)", err=True)
    click.echo(f"{name}@{pushed.record.version}")


@env.command("pull")
@click.argument("spec")
@click.option("--name", default=None, help="Name it in the cache [default: the store name].")
@_cache_option
@_store_option
@json_flag("Print the environment as JSON.")
def pull_(
    spec: str, name: str | None, cache_dir: Path | None, store_url: str | None, as_json: bool
) -> None:
    """Pull the environment SPEC (NAME[@VERSION]) from the object store into the cache."""
    from execgym.environments.remote import pull
    from execgym.storage import open_store

    cache = EnvironmentCache(cache_dir)
    with _failures():
        environment = pull(open_store(store_url), spec, cache, name=name)
    _show(environment, cache, as_json, "pulled")


@env.command("rm")
@click.argument("reference")
@_cache_option
def rm_(reference: str, cache_dir: Path | None) -> None:
    """Forget the environment REFERENCE (its layers go at the next gc)."""
    cache = EnvironmentCache(cache_dir)
    with _failures():
        removed = cache.remove(reference)
    click.echo(f"removed {removed.digest}", err=True)


@env.command("gc")
@click.option("--unnamed", is_flag=True, help="Also remove environments no name points to.")
@_cache_option
def gc_(unnamed: bool, cache_dir: Path | None) -> None:
    """Delete layers no environment uses (and, with --unnamed, unnamed environments)."""
    cache = EnvironmentCache(cache_dir)
    with _failures():
        removed = cache.gc(keep_unnamed=not unnamed)
    click.echo(f"removed {len(removed)} environments and layers", err=True)
    for digest in removed:
        click.echo(digest)
