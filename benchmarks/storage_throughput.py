"""Push, pull and gc throughput of execgym.storage: a local directory vs S3 (moto).

A data set of ``--files`` files of ``--file-mib`` MiB of random bytes is pushed (hash +
upload), pushed again (nothing to upload: same version), pulled (download + verify),
then ``--logs`` batch logs are stored and gc runs over them all (every log expired).
The S3 store is moto's server mode on a free port of this machine (no network), so its
figures are an upper bound of a real S3's request rate and a lower bound of its cost per
request. Rounds alternate between the two stores.

    .venv/bin/python benchmarks/storage_throughput.py [--rounds 3] [--files 8] [--file-mib 4]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from datetime import timedelta
from pathlib import Path

from execgym.storage import GcPolicy, Store, open_store
from execgym.testing import FakeClock, MotoS3Server


def one_round(store: Store, source: Path, dest: Path, logs: int, clock: FakeClock) -> dict:
    size_mib = sum(p.stat().st_size for p in source.iterdir()) / (1 << 20)
    started = time.perf_counter()
    version = store.push(source, name="bench").version
    push_s = time.perf_counter() - started
    started = time.perf_counter()
    assert store.push(source, name="bench").version == version
    repush_s = time.perf_counter() - started
    started = time.perf_counter()
    store.pull(f"bench@{version[:12]}", dest)
    pull_s = time.perf_counter() - started
    started = time.perf_counter()
    for index in range(logs):
        store.put_log(f"batch-{index}", f"results {index}\n".encode())
    log_s = time.perf_counter() - started
    clock.advance(timedelta(days=30))
    started = time.perf_counter()
    report = store.gc(GcPolicy(log_ttl=timedelta(days=7)))
    gc_s = time.perf_counter() - started
    assert len(report.expired_logs) == logs
    return {
        "push MiB/s": size_mib / push_s,
        "re-push (no upload) s": repush_s,
        "pull+verify MiB/s": size_mib / pull_s,
        "put_log ms": 1000 * log_s / logs,
        "gc s": gc_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--file-mib", type=float, default=4)
    parser.add_argument("--logs", type=int, default=50)
    args = parser.parse_args()
    os.environ.setdefault("AWS_ACCESS_KEY_ID", MotoS3Server.key)
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", MotoS3Server.secret)
    server = MotoS3Server()
    server.start()
    figures: dict[str, list[dict]] = {"local": [], "s3 (moto)": []}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            source = Path(tmp) / "source"
            source.mkdir()
            for index in range(args.files):
                (source / f"part-{index}.bin").write_bytes(
                    os.urandom(int(args.file_mib * (1 << 20)))
                )
            for round_index in range(args.rounds):
                for way in figures:
                    clock = FakeClock()
                    if way == "local":
                        url, options = f"{tmp}/store-{round_index}", {}
                    else:
                        bucket = f"bench-{round_index}"
                        server.create_bucket(bucket)
                        url, options = f"s3://{bucket}/x", server.storage_options
                    store = open_store(url, storage_options=options, clock=clock)
                    dest = Path(tmp) / f"pulled-{way[:2]}-{round_index}"
                    figures[way].append(one_round(store, source, dest, args.logs, clock))
    finally:
        server.stop()
    total = args.files * args.file_mib
    print(
        f"{args.files} files x {args.file_mib} MiB = {total} MiB, {args.logs} logs, "
        f"{args.rounds} rounds (median)"
    )
    names = list(figures["local"][0])
    print(f"{'':24}" + "".join(f"{way:>14}" for way in figures))
    for name in names:
        cells = [statistics.median(r[name] for r in rows) for rows in figures.values()]
        print(f"{name:24}" + "".join(f"{cell:14.2f}" for cell in cells))


if __name__ == "__main__":
    main()
