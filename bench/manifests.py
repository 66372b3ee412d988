"""Manifest rewrite at scale (issue 13): our ``rewrite_manifests`` against Spark's and a floor, at several
entry counts, to show whether memory stays flat as the table's entries grow.

Run by hand, never as a test::

    /work/main/.venv/bin/python bench/manifests.py [--entries 100000,1000000] [--manifests 2000]
        [--snapshots 20] [--days 365 | --unpartitioned] [--cases ours,spark,floor,read]
        [--spark-driver-memory 4g] [--out bench/out/manifests]

1. Generates once per entry count (cached under ``--out/<layout>-<entries>/pristine``) a format-version 2
   table ``(id long, day date, user_id long, amount double, name string)`` partitioned by identity on
   ``day`` (``--days`` partitions; ``--unpartitioned``: no partition) with ``--entries`` live data-file
   entries in ``--manifests`` data manifests, committed by ``--snapshots`` fast appends. Every entry has a
   distinct path, a random day, and metrics for every column (sizes, counts, bounds), as Spark writes them.
   No data file is written: the manifests are written directly with the engine's manifest writer
   (``engine.meta.manifests.new_manifest_writer``) and committed by a test-style fast-append producer
   (PyIceberg's ``_FastAppendFiles`` with its manifests replaced by ours). A manifest rewrite reads
   manifests only; that neither ours nor Spark's reads a data file is proven by their absence. The
   directory is laid out as a Hadoop catalog table (``bench/mor.py``'s), so Spark opens the same metadata.
2. Runs every case in its own child process from the same pristine metadata (``bench/mor.py``'s
   ``run_case``: new files under the run's directory, peak RSS of the whole process, load averages):

   - ``ours``: ``engine.ops.manifests.rewrite_manifests(table)`` (8 MiB default target), on the table
     registered into a fresh SQL catalog; peak RSS = the child's ``ru_maxrss``;
   - ``spark``: ``CALL spark_cat.system.rewrite_manifests(table => 'db.events')`` (``use_caching``
     default: true) through ``bench/mor.py``'s ``spark_procedure``; peak RSS = JVM + Python ``VmHWM``;
   - ``floor``: the engine's streaming reader reads every live entry and the engine's manifest writer
     writes them back, as EXISTING, in input order, into manifests rolled at 1.2 x 8 MiB: the same bytes
     read and written as a rewrite, with no planning (one pass, not two) and no commit;
   - ``read``: the engine's streaming reader alone over every live entry (the reading part of the floor).
3. Verifies every result twice: PyIceberg's own manifest reader (``ManifestFile.fetch_manifest_entry``)
   and Spark's ``entries``, ``files`` and ``data_files`` metadata tables must give the pristine table's
   live entry count and order-independent checksum over (path, snapshot id, data sequence number, file
   sequence number), and the same data-file count. A mismatch exits 1.

Results go to ``--out/results-<stamp>.json`` and ``--out/results-<stamp>.md``.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import glob
import importlib.util
import json
import os
import shutil
import sys
import time
from collections.abc import Iterator
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.abspath(__file__)


def _mor_bench() -> Any:
    """bench/mor.py as a module: its Hadoop layout, child-process machinery and Spark session."""
    spec = importlib.util.spec_from_file_location("bench_mor", os.path.join(HERE, "mor.py"))
    if spec is None or spec.loader is None:
        raise RuntimeError("cannot load bench/mor.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_mor"] = module
    spec.loader.exec_module(module)
    return module


MOR = _mor_bench()
CB = MOR.CB
MiB = MOR.MiB

CASES = ("ours", "spark", "floor", "read")
VERIFIED = ("ours", "spark")
TARGET_SIZE = 8 * MiB  # Java's and our default commit.manifest.target-size-bytes
ROLL_AT = int(TARGET_SIZE * 1.2)
FIRST_DAY = datetime.date(2025, 1, 1).toordinal() - datetime.date(1970, 1, 1).toordinal()
_MASK = (1 << 64) - 1


# --------------------------------------------------------------------------------------------- data


def _schema() -> Any:
    from pyiceberg.schema import Schema
    from pyiceberg.types import DateType, DoubleType, LongType, NestedField, StringType

    return Schema(
        NestedField(1, "id", LongType(), required=True),
        NestedField(2, "day", DateType(), required=True),
        NestedField(3, "user_id", LongType(), required=False),
        NestedField(4, "amount", DoubleType(), required=False),
        NestedField(5, "name", StringType(), required=False),
    )


def _spec(partitioned: bool) -> Any:
    from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionField, PartitionSpec
    from pyiceberg.transforms import IdentityTransform

    if not partitioned:
        return UNPARTITIONED_PARTITION_SPEC
    return PartitionSpec(PartitionField(2, 1000, IdentityTransform(), "day"))


class _Entries:
    """The data files of the generated table: distinct paths, random days, Spark-like metrics."""

    def __init__(self, table_dir: str, days: int, seed: int) -> None:
        import random

        from pyiceberg.typedef import Record

        self.rng = random.Random(seed)
        self.table_dir = table_dir
        self.days = days
        # one partition object per day, shared as PyIceberg's writer keeps each entry's partition
        self.partitions = [Record(FIRST_DAY + d) for d in range(days)] if days else [Record()]

    def data_file(self, number: int) -> Any:
        import struct

        from pyiceberg.manifest import DataFile, DataFileContent, FileFormat

        rng = self.rng
        day = rng.randrange(self.days) if self.days else 0
        rows = rng.randint(1_000, 200_000)
        first = number * 1_000_000
        user_lo, user_hi = sorted(rng.randrange(10**9) for _ in range(2))
        sizes = {c: rows * w // 3 + rng.randrange(4096) for c, w in ((1, 8), (2, 4), (3, 8), (4, 8), (5, 20))}
        folder = f"day={FIRST_DAY + day}" if self.days else "all"
        return DataFile.from_args(
            content=DataFileContent.DATA,
            file_path=f"file://{self.table_dir}/data/{folder}/{number:010d}-{rng.getrandbits(64):016x}.parquet",
            file_format=FileFormat.PARQUET,
            partition=self.partitions[day] if self.days else self.partitions[0],
            record_count=rows,
            file_size_in_bytes=sum(sizes.values()) + 4096,
            column_sizes=sizes,
            value_counts=dict.fromkeys(range(1, 6), rows),
            null_value_counts={1: 0, 2: 0, 3: rows // 50, 4: rows // 50, 5: rows // 100},
            nan_value_counts={4: rows // 200},
            lower_bounds={
                1: struct.pack("<q", first),
                2: struct.pack("<i", FIRST_DAY + day),
                3: struct.pack("<q", user_lo),
                4: struct.pack("<d", -rng.random() * 1000),
                5: b"aaa" + rng.randbytes(5).hex().encode(),
            },
            upper_bounds={
                1: struct.pack("<q", first + rows - 1),
                2: struct.pack("<i", FIRST_DAY + day),
                3: struct.pack("<q", user_hi),
                4: struct.pack("<d", rng.random() * 1000),
                5: b"zzz" + rng.randbytes(5).hex().encode(),
            },
            split_offsets=[4],
            sort_order_id=0,
        )


def _append_manifests(table: Any, entries: _Entries, start: int, per_manifest: list[int]) -> None:
    """One fast-append snapshot adding one manifest per count in ``per_manifest`` (test-style producer:
    PyIceberg's fast append with its one manifest replaced by the manifests we write)."""
    from pyiceberg.manifest import ManifestContent, ManifestEntry, ManifestEntryStatus
    from pyiceberg.table.snapshots import Operation
    from pyiceberg.table.update.snapshot import _FastAppendFiles

    from airflow_provider_iceberg_exec.engine.meta.manifests import new_manifest_writer

    class AppendManifests(_FastAppendFiles):
        def _manifests(self) -> list[Any]:
            metadata = self._transaction.table_metadata
            written, number = [], start
            for count in per_manifest:
                with new_manifest_writer(
                    format_version=2,
                    content=ManifestContent.DATA,
                    spec=metadata.spec(),
                    schema=metadata.schema(),
                    output_file=self.new_manifest_output(),
                    snapshot_id=self.snapshot_id,
                    avro_compression=self._compression,
                ) as writer:
                    for _ in range(count):
                        data_file = entries.data_file(number)
                        number += 1
                        writer.add_entry(
                            ManifestEntry.from_args(
                                status=ManifestEntryStatus.ADDED,
                                snapshot_id=self.snapshot_id,
                                sequence_number=None,
                                file_sequence_number=None,
                                data_file=data_file,
                            )
                        )
                written.append(writer.to_manifest_file())
            return [*written, *self._existing_manifests()]

    tx = table.transaction()
    producer = AppendManifests(Operation.APPEND, tx, table.io)
    producer.commit()
    tx.commit_transaction()
    table.refresh()


def _split(total: int, parts: int) -> list[int]:
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def generate(out: str, entries: int, manifests: int, snapshots: int, days: int, seed: int) -> dict[str, Any]:
    """The pristine table: ``entries`` entries in ``manifests`` manifests over ``snapshots`` appends."""
    pristine = os.path.join(out, "pristine")
    if os.path.exists(pristine):
        shutil.rmtree(pristine)
    catalog = CB._catalog("pristine", pristine)
    catalog.create_namespace_if_not_exists(CB.NAMESPACE)
    table_dir = MOR._hadoop_dir(os.path.join(pristine, "warehouse"))
    table = catalog.create_table(
        CB.TABLE,
        schema=_schema(),
        partition_spec=_spec(days > 0),
        location=f"file://{table_dir}",
        properties={"format-version": "2"},
    )
    source = _Entries(table_dir, days, seed)
    started = time.monotonic()
    per_manifest = _split(entries, manifests)
    number = 0
    for i, chunk in enumerate(_split(manifests, snapshots)):
        counts, per_manifest = per_manifest[:chunk], per_manifest[chunk:]
        _append_manifests(table, source, number, counts)
        number += sum(counts)
        print(
            f"  snapshot {i + 1}/{snapshots}: {number} entries ({time.monotonic() - started:.0f}s)",
            flush=True,
        )
    if os.path.exists(os.path.join(table_dir, "data")):
        raise RuntimeError("the generator wrote data files")
    manifest_files = glob.glob(os.path.join(table_dir, "metadata", "*-m*.avro"))
    return {
        "metadata_location": table.metadata_location,
        "table_dir": table_dir,
        "data_dir": os.path.join(table_dir, "data"),  # absent: no data file exists
        "manifest_bytes": sum(os.path.getsize(p) for p in manifest_files),
        "generate_seconds": round(time.monotonic() - started, 1),
    }


# ------------------------------------------------------------------------------------------ workers


def worker_ours(metadata_location: str, run_dir: str) -> dict[str, Any]:
    from airflow_provider_iceberg_exec.engine.ops.manifests import rewrite_manifests

    table = CB._run_table(run_dir, metadata_location)
    t0 = time.monotonic()
    result = rewrite_manifests(table)
    seconds = time.monotonic() - t0
    table.refresh()
    return {"seconds": seconds, "metadata_location": table.metadata_location, "procedure_result": result}


def _live_entries(io: Any, manifests: list[Any]) -> Iterator[Any]:
    from airflow_provider_iceberg_exec.engine.meta.manifests import iter_manifest_entries

    for manifest in manifests:
        yield from iter_manifest_entries(io, manifest, discard_deleted=True)


def _data_manifests(table: Any) -> list[Any]:
    from pyiceberg.manifest import ManifestContent

    return [m for m in table.current_snapshot().manifests(table.io) if m.content == ManifestContent.DATA]


def worker_read(metadata_location: str) -> dict[str, Any]:
    """The engine's streaming reader over every live entry; nothing written."""
    from pyiceberg.table import StaticTable

    table = StaticTable.from_metadata(metadata_location)
    t0 = time.monotonic()
    manifests = _data_manifests(table)
    count = sum(1 for _ in _live_entries(table.io, manifests))
    return {"seconds": time.monotonic() - t0, "entries": count, "manifests_in": len(manifests)}


def worker_floor(metadata_location: str, run_dir: str) -> dict[str, Any]:
    """Read every live entry and write it back, EXISTING, in input order, rolled at 1.2 x 8 MiB."""
    from pyiceberg.manifest import ManifestContent, ManifestEntry, ManifestEntryStatus
    from pyiceberg.table import StaticTable

    from airflow_provider_iceberg_exec.engine.meta.manifests import new_manifest_writer

    table = StaticTable.from_metadata(metadata_location)
    metadata = table.metadata
    os.makedirs(os.path.join(run_dir, "metadata"))
    t0 = time.monotonic()
    manifests = _data_manifests(table)
    written, count, writer = 0, 0, None
    for entry in _live_entries(table.io, manifests):
        if writer is None:
            writer = new_manifest_writer(
                format_version=2,
                content=ManifestContent.DATA,
                spec=metadata.spec(),
                schema=metadata.schema(),
                output_file=table.io.new_output(f"file://{run_dir}/metadata/floor-{written:05d}.avro"),
                snapshot_id=metadata.current_snapshot_id,
                avro_compression="gzip",
            ).__enter__()
        writer.add_entry(
            ManifestEntry.from_args(
                status=ManifestEntryStatus.EXISTING,
                snapshot_id=entry.snapshot_id,
                sequence_number=entry.sequence_number,
                file_sequence_number=entry.file_sequence_number,
                data_file=entry.data_file,
            )
        )
        count += 1
        if writer.tell() >= ROLL_AT:
            writer.__exit__(None, None, None)
            writer, written = None, written + 1
    if writer is not None:
        writer.__exit__(None, None, None)
        written += 1
    return {
        "seconds": time.monotonic() - t0,
        "entries": count,
        "manifests_in": len(manifests),
        "manifests_out": written,
    }


def worker_spark(metadata_location: str, run_dir: str, driver_memory: str) -> dict[str, Any]:
    return dict(MOR.spark_procedure(metadata_location, run_dir, driver_memory, "rewrite_manifests", {}))


# ------------------------------------------------------------------------------------- verification


def _entry_hash(path: str, snapshot_id: int, sequence: int, file_sequence: int) -> int:
    import hashlib

    text = f"{path}\0{snapshot_id}\0{sequence}\0{file_sequence}".encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little")


def _day_span(manifest: Any) -> int | None:
    """Days between a manifest's lowest and highest partition value, inclusive (None: unpartitioned)."""
    if not manifest.partitions:
        return None
    summary = manifest.partitions[0]
    if summary.lower_bound is None or summary.upper_bound is None:
        return None
    lower = int.from_bytes(summary.lower_bound, "little", signed=True)
    return int.from_bytes(summary.upper_bound, "little", signed=True) - lower + 1


def verify_python(listing: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """PyIceberg's own manifest reader over every live entry of each table (not the engine's reader)."""
    from pyiceberg.table import StaticTable

    checked = []
    for item in listing:
        t0 = time.monotonic()
        table = StaticTable.from_metadata(item["metadata_location"])
        manifests = _data_manifests(table)
        count, checksum = 0, 0
        for manifest in manifests:
            for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
                count += 1
                checksum += _entry_hash(
                    entry.data_file.file_path,
                    entry.snapshot_id,
                    entry.sequence_number,
                    entry.file_sequence_number,
                )
        spans = [s for s in map(_day_span, manifests) if s is not None]
        checked.append(
            {
                "case": item["case"],
                "entries": count,
                "checksum": f"{checksum & _MASK:016x}",
                "manifests": len(manifests),
                "manifest_bytes": sum(int(m.manifest_length) for m in manifests),
                "mean_days_per_manifest": round(sum(spans) / len(spans), 1) if spans else None,
                "seconds": round(time.monotonic() - t0, 1),
            }
        )
    return checked


def verify_spark(listing: list[dict[str, Any]], out: str, driver_memory: str) -> list[dict[str, Any]]:
    """Java Iceberg's metadata tables of each table: live entries and their checksum, files, manifests."""
    from tests.interop.spark import stop_spark

    spark = MOR._spark_session(
        os.path.join(out, "spark-verify"), os.path.join(out, "spark-verify", "wh"), driver_memory
    )
    checked = []
    try:
        for item in listing:
            location = item["metadata_location"]

            def load(name: str, location: str = location) -> Any:
                return spark.read.format("iceberg").load(f"{location}#{name}")

            row = (
                load("entries")
                .where("status <> 2")
                .selectExpr(
                    "count(*) AS n",
                    "coalesce(sum(CAST(xxhash64(data_file.file_path, snapshot_id, sequence_number, "
                    "file_sequence_number) AS DECIMAL(38,0))), 0) AS s",
                )
                .collect()[0]
            )
            checked.append(
                {
                    "case": item["case"],
                    "entries": int(row["n"]),
                    "checksum": f"{int(row['s']) & _MASK:016x}",
                    "files": int(load("files").count()),
                    "data_files": int(load("data_files").count()),
                    "manifests": int(load("manifests").where("content = 0").count()),
                }
            )
    finally:
        stop_spark(spark)
    return checked


def worker(args: argparse.Namespace) -> Any:
    """Body of a child process."""
    out = os.path.abspath(args.out)
    if args.action == "generate":
        return generate(out, args.entries_one, args.manifests, args.snapshots, _days(args), args.seed)
    if args.action in ("verify-python", "verify-spark"):
        with open(args.described) as f:
            listing = json.load(f)
        if args.action == "verify-python":
            return verify_python(listing)
        return verify_spark(listing, out, args.spark_driver_memory)
    with open(os.path.join(out, "dataset.json")) as f:
        location = json.load(f)["metadata_location"]
    run_dir = os.path.abspath(args.run_dir)
    if args.action == "ours":
        return {**worker_ours(location, run_dir), "engine_sha256": CB._engine_digest()}
    if args.action == "spark":
        return worker_spark(location, run_dir, args.spark_driver_memory)
    if args.action == "floor":
        return worker_floor(location, run_dir)
    if args.action == "read":
        return worker_read(location)
    raise SystemExit(f"unknown action {args.action}")


# ------------------------------------------------------------------------------------- orchestration


def _days(args: argparse.Namespace) -> int:
    return 0 if args.unpartitioned else int(args.days)


def _size_args(args: argparse.Namespace, entries: int) -> argparse.Namespace:
    """The arguments of one entry count: its own ``--out`` (cache, runs and Spark's scratch)."""
    layout = "unpartitioned" if args.unpartitioned else f"day{args.days}"
    size = copy.copy(args)
    size.out = os.path.join(os.path.abspath(args.out), f"{layout}-{entries}")
    size.entries_one = entries
    return size


def _gen_argv(args: argparse.Namespace) -> list[str]:
    argv = ["--entries", str(args.entries_one), "--manifests", str(args.manifests)]
    argv += ["--snapshots", str(args.snapshots), "--days", str(args.days), "--seed", str(args.seed)]
    return [*argv, "--unpartitioned"] if args.unpartitioned else argv


def ensure_dataset(args: argparse.Namespace) -> dict[str, Any]:
    """The cached pristine table of ``args.entries_one`` entries, generated in a child when missing."""
    out = args.out
    path = os.path.join(out, "dataset.json")
    shape = {
        "entries": args.entries_one,
        "manifests": args.manifests,
        "snapshots": args.snapshots,
        "days": _days(args),
        "seed": args.seed,
    }
    if os.path.exists(path):
        with open(path) as f:
            described = json.load(f)
        if {k: described.get(k) for k in shape} == shape and os.path.exists(
            MOR._local(described["metadata_location"])
        ):
            return dict(described)
    os.makedirs(out, exist_ok=True)
    print(
        f"generating {args.entries_one} entries in {args.manifests} manifests under {out}/pristine ...",
        flush=True,
    )
    generated = MOR.run_child(["generate", *_gen_argv(args)], out, os.path.join(out, "gen.json"), SCRIPT)
    described = {**shape, **generated["result"], "generate_peak_rss_bytes": generated["peak_rss_bytes"]}
    described["files_on_disk"] = MOR._walk(os.path.join(out, "pristine"))
    described["created"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    with open(path, "w") as f:
        json.dump(described, f, indent=2)
    return described


def _warm_manifests(dataset: dict[str, Any]) -> None:
    """Read every manifest once so that each case starts with the same (warm) page cache."""
    CB.read_through(glob.glob(os.path.join(dataset["table_dir"], "metadata", "*.avro")))


def _run(case: str, dataset: dict[str, Any], args: argparse.Namespace, stamp: str) -> dict[str, Any]:
    print(f"running {case} ({args.entries_one} entries) ...", flush=True)
    _warm_manifests(dataset)
    result: dict[str, Any] = MOR.run_case(case, dataset, args, stamp, 1, SCRIPT)
    print(
        f"  {case}: {result['seconds']:.1f} s (process {result['process_seconds']:.1f} s), "
        f"peak RSS {result['peak_rss_bytes'] / MiB:.0f} MiB, CPU {result['cpu_seconds']:.1f} s, "
        f"load {_loads(result)}",
        flush=True,
    )
    return result


def _verify_all(
    results: list[dict[str, Any]], dataset: dict[str, Any], args: argparse.Namespace, stamp: str
) -> list[str]:
    """PyIceberg's reader and Spark read the pristine table and every rewrite; returns the failures."""
    listing = [{"case": "pristine", "metadata_location": dataset["metadata_location"]}]
    listing += [
        {"case": r["case"], "metadata_location": r["metadata_location"]}
        for r in results
        if r["case"] in VERIFIED
    ]
    path = os.path.join(args.out, "runs", f"{stamp}-verify.json")
    with open(path, "w") as f:
        json.dump(listing, f)
    found: dict[str, dict[str, Any]] = {}
    for reader in ("python", "spark"):
        print(f"verifying with {reader} ...", flush=True)
        argv = [f"verify-{reader}", "--described", path, "--spark-driver-memory", args.spark_driver_memory]
        measured = MOR.run_child(
            argv, args.out, os.path.join(args.out, "runs", f"{stamp}-v-{reader}.json"), SCRIPT
        )
        found[reader] = {v["case"]: v for v in measured["result"]}
    dataset["verify"] = {reader: by["pristine"] for reader, by in found.items()}
    failures = []
    if found["python"]["pristine"]["entries"] != dataset["entries"]:
        failures.append(
            f"pristine: {found['python']['pristine']['entries']} live entries, not {dataset['entries']}"
        )
    for r in results:
        if r.get("stray_files_in_pristine_tree"):
            failures.append(
                f"{r['case']} wrote into the pristine tree: {r['stray_files_in_pristine_tree'][:5]}"
            )
        if r["case"] not in VERIFIED:
            continue
        r["verify"] = {reader: by[r["case"]] for reader, by in found.items()}
        for reader, keys in (
            ("python", ("entries", "checksum")),
            ("spark", ("entries", "checksum", "files", "data_files")),
        ):
            got, want = r["verify"][reader], found[reader]["pristine"]
            if any(got[k] != want[k] for k in keys):
                failures.append(f"{r['case']}: {reader} reads {got}, the pristine table {want}")
        r["matches"] = not any(f.startswith(f"{r['case']}:") for f in failures)
    return failures


def run_size(args: argparse.Namespace, stamp: str, cases: list[str]) -> tuple[dict[str, Any], list[str]]:
    """Every case at one entry count, then their verification: (the size's report, failures)."""
    dataset = ensure_dataset(args)
    print(
        f"table: {dataset['entries']} entries in {dataset['manifests']} manifests "
        f"({dataset['manifest_bytes'] / MiB:.1f} MiB), {dataset['snapshots']} snapshots, "
        f"{dataset['days'] or 'no'} partitions; generated in {dataset['generate_seconds']} s",
        flush=True,
    )
    os.makedirs(os.path.join(args.out, "runs"), exist_ok=True)
    results = [_run(case, dataset, args, stamp) for case in cases]
    failures = _verify_all(results, dataset, args, stamp)
    if not args.keep:
        for r in results:
            shutil.rmtree(r["run_dir"], ignore_errors=True)
    described = {k: v for k, v in dataset.items() if k != "files_on_disk"}
    return {"entries": args.entries_one, "dataset": described, "results": results}, failures


# ------------------------------------------------------------------------------------------- report


def _loads(r: dict[str, Any]) -> str:
    def fmt(loads: list[float]) -> str:
        return "/".join(f"{x:.1f}" for x in loads)

    return f"{fmt(r['load_before'])} → {fmt(r['load_after'])}"


def _manifests_after(r: dict[str, Any]) -> str:
    if "verify" in r:
        return str(r["verify"]["python"]["manifests"])
    return str(r.get("manifests_out", "-"))


def _check(r: dict[str, Any]) -> str:
    if "verify" not in r:
        return "-"
    return "match / match" if r.get("matches") else "**MISMATCH**"


def _row(size: dict[str, Any], r: dict[str, Any], by: dict[str, dict[str, Any]]) -> str:
    before = size["dataset"]["manifests"]
    ours = r["case"] == "ours"
    spark, floor = by.get("spark"), by.get("floor")

    def versus(base: dict[str, Any] | None, key: str) -> str:
        return MOR._ratio(r[key], base[key]) if ours and base else "-"

    days = r.get("verify", {}).get("python", {}).get("mean_days_per_manifest")
    rss = f"{r['peak_rss_bytes'] / MiB:.0f}"
    if r["case"] == "spark":
        rss += f" (JVM {r['jvm_peak_rss_bytes'] / MiB:.0f} + Python {r['python_peak_rss_bytes'] / MiB:.0f})"
    return (
        f"| {size['entries']:,} | {r['case']} | {r['seconds']:.1f} | {r['process_seconds']:.1f} "
        f"| {r['cpu_seconds']:.1f} | {rss} | {before} → {_manifests_after(r)} | {days if days else '-'} "
        f"| {versus(spark, 'seconds')} | {versus(spark, 'peak_rss_bytes')} "
        f"| {versus(floor, 'seconds')} | {versus(floor, 'peak_rss_bytes')} | {_check(r)} | {_loads(r)} |"
    )


def _growth(sizes: list[dict[str, Any]], cases: list[str]) -> list[str]:
    """Peak RSS and time of each case from the smallest to the largest entry count."""
    if len(sizes) < 2:
        return []
    small, large = sizes[0], sizes[-1]
    factor = large["entries"] / small["entries"]
    lines = [
        "",
        f"From {small['entries']:,} to {large['entries']:,} entries ({factor:.0f}x):",
        "",
        "| case | peak RSS (MiB) | RSS growth | time (s) | time growth |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    for case in cases:
        a = next((r for r in small["results"] if r["case"] == case), None)
        b = next((r for r in large["results"] if r["case"] == case), None)
        if a is None or b is None:
            continue
        ra, rb = a["peak_rss_bytes"] / MiB, b["peak_rss_bytes"] / MiB
        lines.append(
            f"| {case} | {ra:.0f} → {rb:.0f} | {rb - ra:+.0f} MiB ({rb / ra:.2f}x) "
            f"| {a['seconds']:.1f} → {b['seconds']:.1f} | {b['seconds'] / a['seconds']:.1f}x |"
        )
    return lines


def render(report: dict[str, Any]) -> str:
    """The Markdown tables of one run: every case at every size, then the growth."""
    lines = [
        "| entries | case | time (s) | process wall (s) | CPU (s) | peak RSS (MiB) "
        "| manifests before → after | days per manifest after | time vs Spark | RSS vs Spark "
        "| time vs floor | RSS vs floor "
        "| entries + checksum (PyIceberg / Spark) | load avg 1/5/15 start → end |",
        "| ---: | --- | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for size in report["sizes"]:
        by = {r["case"]: r for r in size["results"]}
        lines.extend(_row(size, by[case], by) for case in CASES if case in by)
    return "\n".join([*lines, *_growth(report["sizes"], [c for c in CASES if c in report["cases"]])])


def orchestrate(args: argparse.Namespace) -> int:
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    for case in cases:
        if case not in CASES:
            raise SystemExit(f"unknown case {case!r}; choose from {', '.join(CASES)}")
    entries = sorted(int(e) for e in args.entries.split(","))
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    if not args.no_snapshot:
        MOR.snapshot_code(out, stamp)
    report: dict[str, Any] = {
        **{k: v for k, v in MOR.report_header({}).items() if k != "dataset"},
        "cases": cases,
        "settings": {"target_size_bytes": TARGET_SIZE, "spark_driver_memory": args.spark_driver_memory},
        "sizes": [],
    }
    failures: list[str] = []
    for count in entries:
        size, failed = run_size(_size_args(args, count), stamp, cases)
        report["sizes"].append(size)
        failures += [f"{count} entries: {f}" for f in failed]
    report["failures"] = failures
    table = render(report)
    with open(os.path.join(out, f"results-{stamp}.json"), "w") as f:
        json.dump(report, f, indent=2, default=str)
    with open(os.path.join(out, f"results-{stamp}.md"), "w") as f:
        f.write(table + "\n")
    print()
    print(table)
    print(f"\nresults: {out}/results-{stamp}.json")
    CB.draw_charts(os.path.join(out, f"results-{stamp}.json"))
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures), file=sys.stderr)
        return 1
    return 0


def build_parser() -> argparse.ArgumentParser:
    """``bench/mor.py``'s command line (its child-process machinery passes its options), plus the shape."""
    parser = MOR.build_parser(__doc__ or "", os.path.join(HERE, "out", "manifests"), CASES)
    parser.add_argument("--entries", default="100000,1000000", help="comma-separated live entry counts")
    parser.add_argument(
        "--manifests", type=int, default=2000, help="data manifests of the table (default 2000)"
    )
    parser.add_argument("--snapshots", type=int, default=20, help="fast appends committing them (default 20)")
    parser.add_argument("--days", type=int, default=365, help="identity partitions on day (default 365)")
    parser.add_argument("--unpartitioned", action="store_true", help="an unpartitioned table instead")
    parser.add_argument("--entries-one", type=int, help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.action is None:
        return orchestrate(args)
    if args.action == "generate":
        args.entries_one = int(args.entries)
    result = worker(args)
    with open(args.result, "w") as f:
        json.dump(result, f, indent=2, default=str)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
