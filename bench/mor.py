"""Merge-on-read compaction benchmark: our engine against Spark's ``rewrite_data_files`` and the floor.

Run by hand, never as a test::

    /work/venv/bin/python bench/mor.py [--rows 20000000 --files 400] [--memory-limit 64]
        [--cases ours,spark,floor] [--spark-driver-memory 4g] [--out bench/out/mor]

1. Generates once (cached under ``--out``) a format-version 2 table with deletes, shared by PyIceberg and
   Java Iceberg:

   - ``--rows`` rows in ``--files`` data files, the columns of ``bench/compaction.py``'s table plus a
     required string ``key`` (field id 10) of 97 characters, unique per row (tenant / region / customer /
     32 hex digits of an order hash / line number), written with PyIceberg's writer into a PyIceberg SQL
     catalog (SQLite) and committed in one fast append. The table's directory is laid out as a Hadoop
     catalog table (``warehouse/db/events``, ``vN.metadata.json`` + ``version-hint.text``), so that Spark's
     Hadoop catalog ``spark_cat`` opens the same metadata;
   - 10 % of the rows deleted through position deletes: Spark 3.5 + Iceberg 1.10 (Java 17) runs
     ``DELETE FROM spark_cat.db.events WHERE id % 10 = 3`` in merge-on-read mode (one position delete
     file per data file);
   - then 5 % through equality deletes on ``key`` (the rows with ``id % 20 = 7``), newer than every data
     file and every position delete: the key column is written by PyArrow to ``--eq-files`` Parquet files
     (field id 10), Java Iceberg builds each DeleteFile with its metrics read from the file
     (``ParquetUtil.fileMetrics``) and commits them in one ``RowDelta`` over py4j. The keys' Arrow size is
     printed next to the memory limit given to our engine (it must be larger).

   The final metadata.json is registered in the PyIceberg SQL catalog too. Spark reads the pristine live
   rows' count and checksum (``tests/interop/spark.py``: sum of xxhash64 over every column).
2. Runs every case in its own child process from the same pristine metadata, new files landing under the
   run's directory (the pristine files are only read):

   - ``ours``: ``compact(table, options={"rewrite-all": "true", "target-file-size-bytes": 128 MiB})`` with
     ``ResourceLimits(memory_limit_bytes=--memory-limit MiB, spill_dir=<run>/spill)`` on the table
     registered into a fresh SQL catalog; peak RSS = the child's ``ru_maxrss`` (``wait4``);
   - ``spark``: a local[2] SparkSession with ``spark.driver.memory=--spark-driver-memory``, a Hadoop
     catalog whose ``db.events`` is a copy of the pristine metadata.json, and
     ``CALL spark_cat.system.rewrite_data_files(table => 'db.events', options => map('rewrite-all', 'true',
     'target-file-size-bytes', '134217728', 'remove-dangling-deletes', 'true'))``; peak RSS = the JVM's
     ``VmHWM`` (read from /proc just before it exits) + the Python driver's ``VmHWM``; CPU = the child's
     with its reaped JVM;
   - ``floor``: PyArrow streams every data file and writes the same rows as zstd Parquet (no deletes
     applied, no Iceberg work), as in ``bench/compaction.py``.
3. Verifies each Iceberg case in one Spark child: the live rows' count and checksum read by Spark must
   equal the pristine ones, and no delete file may be left in the new snapshot. A mismatch exits 1.

Results go to ``--out/results-<stamp>.json`` and a Markdown table to ``--out/results-<stamp>.md``.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Collection
from typing import Any

MiB = 1024 * 1024
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
CASES = ("ours", "spark", "floor")
ICEBERG_CASES = ("ours", "spark")
#: Spark leaves the equality delete files in the table (see worker_spark): reported, not a failure.
MAY_LEAVE_DELETES = ("spark",)
TARGET_FILE_SIZE = 128 * MiB
OVERHEAD_TARGET = 350 * MiB
KEY_FIELD_ID = 10
SPARK_NAMESPACE = "db"  # tests.interop.spark.NAMESPACE: the Hadoop catalog's table is spark_cat.db.events
SPARK_TABLE = "events"
POSITION_DELETE_WHERE = "id % 10 = 3"
EQUALITY_MODULUS, EQUALITY_REMAINDER = 20, 7  # disjoint from the position deletes (7 is not 3 mod 10)
#: the rows both kinds of deletes leave
LIVE_WHERE = f"NOT ({POSITION_DELETE_WHERE}) AND id % {EQUALITY_MODULUS} != {EQUALITY_REMAINDER}"


def _compaction_bench() -> Any:
    """bench/compaction.py as a module: its data generator, catalog, floor and run-table helpers."""
    spec = importlib.util.spec_from_file_location("bench_compaction", os.path.join(HERE, "compaction.py"))
    if spec is None or spec.loader is None:
        raise RuntimeError("cannot load bench/compaction.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_compaction"] = module
    spec.loader.exec_module(module)
    return module


CB = _compaction_bench()


# --------------------------------------------------------------------------------------------- data

_HEX = b"0123456789abcdef"
_KEY_PARTS = (("tenant-", 4), ("/region-", 2), ("/customer-", 9), ("/order-", 32), ("/line-", 12))
KEY_LENGTH = sum(len(p) + w for p, w in _KEY_PARTS)


def make_keys(ids: Any) -> Any:
    """The ``key`` of each id: 97 fixed-width characters, unique (the line number is the id), vectorized."""
    import numpy as np
    import pyarrow as pa

    ids = np.asarray(ids, dtype=np.int64)
    n = len(ids)
    words = ids.astype(np.uint64)
    h1 = CB._mix(words + np.uint64(0x1234567))
    h2 = CB._mix(words ^ np.uint64(0x9E3779B97F4A7C15))
    fields = [ids % 1000, (ids // 1000) % 17, (h1 % np.uint64(10**9)).astype(np.int64), (h1, h2), ids]
    out = np.empty((n, KEY_LENGTH), dtype=np.uint8)
    col = 0
    for (prefix, width), value in zip(_KEY_PARTS, fields, strict=True):
        out[:, col : col + len(prefix)] = np.frombuffer(prefix.encode(), dtype=np.uint8)
        col += len(prefix)
        if isinstance(value, tuple):  # 32 hex digits of two 64-bit words
            hexdigits = np.frombuffer(_HEX, dtype=np.uint8)
            for w, word in enumerate(value):
                for d in range(16):
                    nibble = (word >> np.uint64(4 * (15 - d))) & np.uint64(15)
                    out[:, col + 16 * w + d] = hexdigits[nibble.astype(np.int64)]
        else:
            for d in range(width):
                out[:, col + d] = (value // 10 ** (width - 1 - d)) % 10 + ord("0")
        col += width
    offsets = np.arange(0, (n + 1) * KEY_LENGTH, KEY_LENGTH, dtype=np.int32)
    return pa.StringArray.from_buffers(n, pa.py_buffer(offsets.tobytes()), pa.py_buffer(out.tobytes()))


def _schema() -> Any:
    from pyiceberg.schema import Schema
    from pyiceberg.types import NestedField, StringType

    base = CB._iceberg_schema()
    return Schema(
        *base.fields, NestedField(field_id=KEY_FIELD_ID, name="key", field_type=StringType(), required=True)
    )


def _batch(number: int, start: int, rows: int, seed: int) -> Any:
    import numpy as np
    import pyarrow as pa

    batch = CB.make_batch(number, start, rows, seed)
    keys = make_keys(np.arange(start, start + rows, dtype=np.int64))
    return batch.append_column(pa.field("key", pa.string(), nullable=False), keys)


def _hadoop_dir(warehouse: str) -> str:
    return os.path.join(warehouse, SPARK_NAMESPACE, SPARK_TABLE)


def _local(location: str) -> str:
    """A ``file:`` location (``file:/x`` from Java, ``file:///x`` from PyIceberg) as a plain path."""
    return "/" + location.removeprefix("file:").lstrip("/")


def _publish_hadoop(metadata_location: str, table_dir: str, version: int = 1) -> str:
    """Copy a metadata.json as ``v<version>.metadata.json`` of a Hadoop catalog table and point its
    version hint there: Spark's Hadoop catalog then opens that exact metadata."""
    meta_dir = os.path.join(table_dir, "metadata")
    os.makedirs(meta_dir, exist_ok=True)
    target = os.path.join(meta_dir, f"v{version}.metadata.json")
    shutil.copyfile(_local(metadata_location), target)
    with open(os.path.join(meta_dir, "version-hint.text"), "w") as f:
        f.write(str(version))
    return target


def generate_data(out: str, rows: int, files: int, seed: int) -> dict[str, Any]:
    """Step 1a (no Spark): the data files, written by PyIceberg into a SQL catalog, one fast append."""
    import itertools
    import uuid

    from pyiceberg.io.pyarrow import _dataframe_to_data_files

    pristine = os.path.join(out, "pristine")
    if os.path.exists(pristine):
        shutil.rmtree(pristine)
    catalog = CB._catalog("pristine", pristine)
    catalog.create_namespace_if_not_exists(CB.NAMESPACE)
    table_dir = _hadoop_dir(os.path.join(pristine, "warehouse"))
    table = catalog.create_table(
        CB.TABLE,
        schema=_schema(),
        location=f"file://{table_dir}",
        properties={"write.target-file-size-bytes": str(TARGET_FILE_SIZE), "format-version": "2"},
    )
    started = time.monotonic()
    counter = itertools.count(0)
    write_uuid = uuid.uuid4()
    data_files = []
    per_file, extra = divmod(rows, files)
    start = 0
    for number in range(files):
        count = per_file + (1 if number < extra else 0)
        written = list(
            _dataframe_to_data_files(
                table.metadata, _batch(number, start, count, seed), table.io, write_uuid, counter
            )
        )
        if len(written) != 1:
            raise RuntimeError(f"file {number} was written as {len(written)} files; expected one")
        data_files.extend(written)
        start += count
        if (number + 1) % 50 == 0:
            print(f"  generated {number + 1}/{files} files ({time.monotonic() - started:.0f}s)", flush=True)
    with table.transaction() as tx, tx.update_snapshot().fast_append() as append:
        for data_file in data_files:
            append.append_data_file(data_file)
    table = catalog.load_table(CB.TABLE)
    _publish_hadoop(table.metadata_location, table_dir)
    return {
        "data_metadata_location": table.metadata_location,
        "table_dir": table_dir,
        "data_dir": os.path.join(table_dir, "data"),
        "data_bytes": sum(f.file_size_in_bytes for f in data_files),
        "data_seconds": round(time.monotonic() - started, 1),
    }


def expected_live_rows(rows: int) -> int:
    """The rows of ids ``0 .. rows - 1`` that neither kind of delete removes (:data:`LIVE_WHERE`)."""
    per_period = sum(1 for i in range(EQUALITY_MODULUS) if i % 10 != 3 and i != EQUALITY_REMAINDER)
    tail = range(rows - rows % EQUALITY_MODULUS, rows)
    return per_period * (rows // EQUALITY_MODULUS) + sum(
        1 for i in tail if i % 10 != 3 and i % EQUALITY_MODULUS != EQUALITY_REMAINDER
    )


def _spark_session(workdir: str, warehouse: str, driver_memory: str) -> Any:
    """A local[2] SparkSession with Java Iceberg 1.10 and a Hadoop catalog ``spark_cat`` on ``warehouse``.

    As tests/interop/spark.py's ``create_spark_session`` (same jars, catalog and no-network settings),
    with the driver memory a user sets and the JVM's default GC and JIT (no test-speed flags).
    """
    from pyspark.sql import SparkSession

    from tests.interop.spark import CATALOG, iceberg_jars

    os.makedirs(workdir, exist_ok=True)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("SPARK_LOCAL_DIRS", workdir)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master("local[2]")
        .appName("iceberg-exec-bench-mor")
        .config("spark.jars", ",".join(str(p) for p in iceberg_jars()))
        .config("spark.driver.memory", driver_memory)
        .config("spark.driver.extraJavaOptions", "-Duser.timezone=UTC")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.warehouse.dir", os.path.join(workdir, "spark-warehouse"))
        .config("spark.sql.extensions", "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
        .config(f"spark.sql.catalog.{CATALOG}", "org.apache.iceberg.spark.SparkCatalog")
        .config(f"spark.sql.catalog.{CATALOG}.type", "hadoop")
        .config(f"spark.sql.catalog.{CATALOG}.warehouse", f"file://{warehouse}")
        .config(f"spark.sql.catalog.{CATALOG}.cache-enabled", "false")
    )
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _ident() -> str:
    from tests.interop.spark import CATALOG

    return f"{CATALOG}.{SPARK_NAMESPACE}.{SPARK_TABLE}"


def _delete_file_counts(spark: Any, metadata_location: str) -> dict[str, int]:
    """Live delete files of the current snapshot by content, read by Java Iceberg's metadata table."""
    rows = (
        spark.read.format("iceberg")
        .load(f"{metadata_location}#delete_files")
        .groupBy("content")
        .count()
        .collect()
    )
    names = {1: "position", 2: "equality"}
    return {names.get(int(r["content"]), str(r["content"])): int(r["count"]) for r in rows}


def _data_file_count(spark: Any, metadata_location: str) -> int:
    return int(spark.read.format("iceberg").load(f"{metadata_location}#data_files").count())


def generate_deletes(
    out: str, described: dict[str, Any], eq_files: int, driver_memory: str, checksum_by: str = "deletes"
) -> dict[str, Any]:
    """Step 1b (Spark): position deletes through Spark's merge-on-read DELETE, then equality deletes
    committed with Java's RowDelta; the final metadata registered in the SQL catalog; Spark's checksum of
    the live rows, read through the deletes or (``checksum_by="predicate"``) from the data snapshot by the
    deletes' predicates."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tests.interop.spark import java_table, metadata_location, spark_rows_checksum, stop_spark
    from tests.interop.tables import commit_deletes

    pristine = os.path.join(out, "pristine")
    table_dir = described["table_dir"]
    rows = described["rows"]
    spark = _spark_session(os.path.join(out, "spark-gen"), os.path.join(pristine, "warehouse"), driver_memory)
    try:
        t = _ident()
        started = time.monotonic()
        # Delete files go under deletes/, so that data/ holds only the data files (the floor reads it).
        spark.sql(
            f"""ALTER TABLE {t} SET TBLPROPERTIES ('write.delete.mode'='merge-on-read',
            'write.update.mode'='merge-on-read', 'write.merge.mode'='merge-on-read',
            'write.data.path'='file://{table_dir}/deletes')"""
        )
        spark.sql(f"DELETE FROM {t} WHERE {POSITION_DELETE_WHERE}")
        position_seconds = time.monotonic() - started

        started = time.monotonic()
        jvm = spark._jvm
        gateway = spark.sparkContext._gateway
        table = java_table(spark, SPARK_TABLE)
        ids = np.arange(EQUALITY_REMAINDER, rows, EQUALITY_MODULUS, dtype=np.int64)
        key_arrow_bytes = 0
        schema = pa.schema(
            [pa.field("key", pa.string(), nullable=False, metadata={"PARQUET:field_id": str(KEY_FIELD_ID)})]
        )
        field_ids = gateway.new_array(jvm.int, 1)
        field_ids[0] = KEY_FIELD_ID
        metrics_config = jvm.org.apache.iceberg.MetricsConfig.forTable(table)
        delete_files = []
        os.makedirs(os.path.join(table_dir, "deletes"), exist_ok=True)
        for number, chunk in enumerate(np.array_split(ids, eq_files)):
            keys = make_keys(chunk)
            key_arrow_bytes += keys.nbytes
            path = os.path.join(table_dir, "deletes", f"eq-delete-{number:03d}.parquet")
            pq.write_table(pa.table([keys], schema=schema), path, compression="zstd")
            location = f"file://{path}"
            metrics = jvm.org.apache.iceberg.parquet.ParquetUtil.fileMetrics(
                table.io().newInputFile(location), metrics_config
            )
            delete_files.append(
                jvm.org.apache.iceberg.FileMetadata.deleteFileBuilder(table.spec())
                .ofEqualityDeletes(field_ids)
                .withPath(location)
                .withFormat(jvm.org.apache.iceberg.FileFormat.PARQUET)
                .withFileSizeInBytes(os.path.getsize(path))
                .withMetrics(metrics)
                .build()
            )
        commit_deletes(spark, SPARK_TABLE, delete_files)
        equality_seconds = time.monotonic() - started
        final = "file://" + _local(metadata_location(spark, SPARK_TABLE))
        started = time.monotonic()
        if checksum_by == "predicate":
            # The data snapshot's rows the deletes leave, by their predicates: Spark's read through the
            # deletes took 207 s at 20M rows (1M equality keys), far more than its reads of the data.
            count, checksum = spark_rows_checksum(spark, described["data_metadata_location"], LIVE_WHERE)
        else:
            count, checksum = spark_rows_checksum(spark, final)
        checksum_seconds = time.monotonic() - started
        deletes = _delete_file_counts(spark, final)
        data_files = _data_file_count(spark, final)
    finally:
        stop_spark(spark)
    catalog = CB._catalog("pristine", pristine)
    catalog.drop_table(CB.TABLE)  # the SQL catalog's entry only; no file is removed
    catalog.register_table(CB.TABLE, final)
    expected = expected_live_rows(rows)
    if count != expected:
        raise RuntimeError(f"Spark reads {count} live rows from the pristine table, expected {expected}")
    if deletes.get("position", 0) == 0 or deletes.get("equality", 0) != eq_files:
        raise RuntimeError(f"unexpected delete files in the pristine table: {deletes}")
    eq_bytes = sum(
        f.stat().st_size for f in os.scandir(os.path.join(table_dir, "deletes")) if "eq-" in f.name
    )
    return {
        "metadata_location": final,
        "live_rows": count,
        "checksum": f"{checksum:016x}",
        "data_files": data_files,
        "delete_files": deletes,
        "position_deleted_rows": rows // 10 + (1 if rows % 10 > 3 else 0),
        "equality_delete_keys": len(ids),
        "equality_key_arrow_bytes": int(key_arrow_bytes),
        "equality_delete_file_bytes": eq_bytes,
        "key_length": KEY_LENGTH,
        "position_delete_seconds": round(position_seconds, 1),
        "equality_delete_seconds": round(equality_seconds, 1),
        "checksum_seconds": round(checksum_seconds, 1),
        "checksum_by": checksum_by,
    }


def _walk(root: str) -> list[str]:
    return sorted(
        os.path.relpath(os.path.join(d, n), root) for d, _dirs, names in os.walk(root) for n in names
    )


def ensure_dataset(args: argparse.Namespace) -> dict[str, Any]:
    """The cached pristine table, generated (in two children) when missing or of another shape."""
    out = os.path.abspath(args.out)
    path = os.path.join(out, "dataset.json")
    shape = {"rows": args.rows, "files": args.files, "seed": args.seed, "eq_files": args.eq_files}
    if os.path.exists(path):
        with open(path) as f:
            described = json.load(f)
        if {k: described.get(k) for k in shape} == shape and os.path.exists(
            _local(described["metadata_location"])
        ):
            return dict(described)
    print(f"generating {args.rows} rows in {args.files} files under {out}/pristine ...", flush=True)
    generated = run_child(["generate-data", *_shape_argv(args)], out, os.path.join(out, "gen-data.json"))
    described = {**shape, **generated["result"], "generate_data_peak_rss_bytes": generated["peak_rss_bytes"]}
    with open(os.path.join(out, "gen-data-described.json"), "w") as f:
        json.dump(described, f)
    print("writing position deletes (Spark) and equality deletes (Java API) ...", flush=True)
    deleted = run_child(
        ["generate-deletes", *_shape_argv(args), "--described", os.path.join(out, "gen-data-described.json")],
        out,
        os.path.join(out, "gen-deletes.json"),
    )
    described.update(deleted["result"])
    described["files_on_disk"] = _walk(os.path.join(out, "pristine"))
    described["created"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    with open(path, "w") as f:
        json.dump(described, f, indent=2)
    return described


def _shape_argv(args: argparse.Namespace) -> list[str]:
    return [
        "--rows",
        str(args.rows),
        "--files",
        str(args.files),
        "--seed",
        str(args.seed),
        "--eq-files",
        str(args.eq_files),
        "--spark-driver-memory",
        args.spark_driver_memory,
        "--pristine-checksum",
        args.pristine_checksum,
    ]


# ------------------------------------------------------------------------------------------ workers


def _vm_hwm(pid: int | str) -> int:
    """Peak resident set (``VmHWM``) of a live process, in bytes."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmHWM for process {pid}")


def worker_ours(metadata_location: str, run_dir: str, memory_limit: int) -> dict[str, Any]:
    from airflow_provider_iceberg_exec.engine.config import ResourceLimits
    from airflow_provider_iceberg_exec.engine.ops.compaction import compact

    pool = CB.as_a_task()
    table = CB._run_table(run_dir, metadata_location)
    limits = ResourceLimits(memory_limit_bytes=memory_limit, spill_dir=os.path.join(run_dir, "spill"))
    options = {"rewrite-all": "true", "target-file-size-bytes": str(TARGET_FILE_SIZE)}
    t0 = time.monotonic()
    outcome = compact(table, options=options, limits=limits)
    seconds = time.monotonic() - t0
    table.refresh()
    return {
        "seconds": seconds,
        "metadata_location": table.metadata_location,
        "options": options,
        "memory_limit_bytes": memory_limit,
        **{
            k: outcome.get(k)
            for k in (
                "rewritten_data_files_count",
                "added_data_files_count",
                "removed_delete_files_count",
                "rewritten_bytes_count",
                "spilled_bytes",
            )
        },
        "engine_peak_rss_bytes": outcome.get("peak_rss_bytes"),
        "groups": outcome.get("plan", {}).get("groups"),
        "arrow_memory_pool": pool,
    }


def worker_spark(metadata_location: str, run_dir: str, driver_memory: str) -> dict[str, Any]:
    """Spark's ``rewrite_data_files`` on a Hadoop catalog table opened at the pristine metadata.

    Java 1.10 drops the position delete files (file-scoped: their data files are gone) but keeps the
    equality delete files, although they no longer apply to any data file: ``remove-dangling-deletes``
    skips unpartitioned tables, and the commit's table-wide clean-up still counts the rewritten files'
    sequence numbers. (Also with ``use-starting-sequence-number=false``; a second ``rewrite_data_files``
    drops them: checked at 500,000 rows.) The bench reports them and does not fail on them.
    """
    options = {
        "rewrite-all": "true",
        "target-file-size-bytes": str(TARGET_FILE_SIZE),
        "remove-dangling-deletes": "true",
    }
    return spark_procedure(metadata_location, run_dir, driver_memory, "rewrite_data_files", options)


def spark_procedure(
    metadata_location: str,
    run_dir: str,
    driver_memory: str,
    procedure: str,
    options: dict[str, str],
    arguments: dict[str, str] | None = None,
) -> dict[str, Any]:
    """``CALL spark_cat.system.<procedure>(table => 'db.events', options => map(...))`` on a Hadoop
    catalog table opened at ``metadata_location``, new files under ``<run_dir>/data``; time = the CALL.
    Empty ``options``: no ``options`` argument (``rewrite_manifests`` has none). ``arguments``: more
    named string arguments (``strategy``, ``sort_order`` of ``rewrite_data_files``).
    """
    from pyspark import SparkContext

    from tests.interop.spark import metadata_location as current_metadata
    from tests.interop.spark import stop_spark

    warehouse = os.path.join(run_dir, "warehouse")
    _publish_hadoop(metadata_location, _hadoop_dir(warehouse))
    t0 = time.monotonic()
    spark = _spark_session(os.path.join(run_dir, "spark-local"), warehouse, driver_memory)
    startup = time.monotonic() - t0
    proc = SparkContext._gateway.proc
    with open(f"/proc/{proc.pid}/cmdline", "rb") as f:
        jvm_cmd = f.read().split(b"\0")[0].decode()
    if not jvm_cmd.endswith("java"):
        raise RuntimeError(f"the gateway process is {jvm_cmd}, not the JVM")
    t = _ident()
    spark.sql(f"ALTER TABLE {t} SET TBLPROPERTIES ('write.data.path'='file://{run_dir}/data')")
    opts = ", ".join(f"'{k}', '{v}'" for k, v in options.items())
    # Procedures without an options map (rewrite_manifests) are called with the table only.
    with_options = f", options => map({opts})" if options else ""
    named = "".join(f", {name} => '{value}'" for name, value in (arguments or {}).items())
    call = (
        f"CALL spark_cat.system.{procedure}(table => '{SPARK_NAMESPACE}.{SPARK_TABLE}'{named}{with_options})"
    )
    t1 = time.monotonic()
    row = spark.sql(call).collect()[0].asDict()
    seconds = time.monotonic() - t1
    final = current_metadata(spark, SPARK_TABLE)
    jvm_hwm = _vm_hwm(proc.pid)
    stop_spark(spark)
    python_hwm = _vm_hwm("self")
    return {
        "seconds": seconds,
        "startup_seconds": startup,
        "metadata_location": final,
        "call": call,
        "driver_memory": driver_memory,
        "procedure_result": row,
        "jvm_peak_rss_bytes": jvm_hwm,
        "python_peak_rss_bytes": python_hwm,
        "peak_rss_bytes": jvm_hwm + python_hwm,
    }


def verify(entries: list[dict[str, Any]], out: str, driver_memory: str) -> list[dict[str, Any]]:
    """Spark (Java Iceberg) reads each result: live rows, checksum, delete and data files."""
    from tests.interop.spark import spark_rows_checksum, stop_spark

    spark = _spark_session(
        os.path.join(out, "spark-verify"), os.path.join(out, "spark-verify", "wh"), driver_memory
    )
    checked = []
    try:
        for entry in entries:
            t0 = time.monotonic()
            count, checksum = spark_rows_checksum(spark, entry["metadata_location"])
            checked.append(
                {
                    "case": entry["case"],
                    "rows": count,
                    "checksum": f"{checksum:016x}",
                    "delete_files": _delete_file_counts(spark, entry["metadata_location"]),
                    "data_files": _data_file_count(spark, entry["metadata_location"]),
                    "seconds": round(time.monotonic() - t0, 1),
                }
            )
    finally:
        stop_spark(spark)
    return checked


def worker(args: argparse.Namespace) -> Any:
    """Body of a child process."""
    out = os.path.abspath(args.out)
    if args.action == "generate-data":
        return generate_data(out, args.rows, args.files, args.seed)
    if args.action == "generate-deletes":
        with open(args.described) as f:
            described = json.load(f)
        return generate_deletes(
            out, described, args.eq_files, args.spark_driver_memory, args.pristine_checksum
        )
    if args.action == "verify":
        with open(args.described) as f:
            entries = json.load(f)
        return verify(entries, out, args.spark_driver_memory)
    with open(os.path.join(out, "dataset.json")) as f:
        dataset = json.load(f)
    run_dir = os.path.abspath(args.run_dir)
    if args.action == "ours":
        engine = CB._engine_digest()
        result = worker_ours(dataset["metadata_location"], run_dir, args.memory_limit * MiB)
        return {**result, "engine_sha256": engine}
    if args.action == "spark":
        return worker_spark(dataset["metadata_location"], run_dir, args.spark_driver_memory)
    if args.action == "floor":
        return CB._worker_floor(dataset["data_dir"], run_dir, dataset["rows"])
    raise SystemExit(f"unknown action {args.action}")


# ------------------------------------------------------------------------------------- orchestration


def run_child(argv: list[str], out: str, result_path: str, script: str | None = None) -> dict[str, Any]:
    """Run this script (or ``script``) as a child; its result, wall and CPU seconds and peak RSS
    (``wait4``)."""
    cmd = [sys.executable, script or os.path.abspath(__file__), "--out", out, "--result", result_path, *argv]
    if os.path.exists(result_path):
        os.remove(result_path)
    root = os.environ.get(CB.CODE_ROOT_ENV, REPO)
    # The package from the code snapshot (or the work tree), tests.interop from the work tree.
    path = [root, REPO, os.environ.get("PYTHONPATH")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in path if p))
    started = time.monotonic()
    proc = subprocess.Popen(cmd, env=env)
    _pid, status, usage = os.wait4(proc.pid, 0)
    code = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - started
    if code != 0:
        raise RuntimeError(f"child {argv[0]} failed with exit code {code}")
    with open(result_path) as f:
        result = json.load(f)
    return {
        "result": result,
        "process_seconds": wall,
        "peak_rss_bytes": usage.ru_maxrss * 1024,
        "cpu_seconds": usage.ru_utime + usage.ru_stime,
    }


def run_case(
    case: str,
    dataset: dict[str, Any],
    args: argparse.Namespace,
    stamp: str,
    rep: int,
    script: str | None = None,
) -> dict[str, Any]:
    """One case in its own child (``script``'s, this one's by default) on a new run directory."""
    out = os.path.abspath(args.out)
    run_dir = os.path.join(out, "runs", f"{stamp}-{case}-{rep}")
    os.makedirs(run_dir)
    CB._warm(dataset["data_dir"])
    load_before = os.getloadavg()
    measured = run_child(
        [case, "--run-dir", run_dir, "--memory-limit", str(args.memory_limit), *_shape_argv(args)],
        out,
        os.path.join(run_dir, "result.json"),
        script,
    )
    result = measured.pop("result")
    if case.startswith("spark"):
        # ru_maxrss of the Python child covers the larger of it and its reaped JVM, not their sum.
        measured["ru_maxrss_bytes"] = measured.pop("peak_rss_bytes")
    result = {"case": case, "repetition": rep, "run_dir": run_dir, **measured, **result}
    result["load_before"] = [round(x, 2) for x in load_before]
    result["load_after"] = [round(x, 2) for x in os.getloadavg()]
    stray = [p for p in _walk(os.path.join(out, "pristine")) if p not in set(dataset["files_on_disk"])]
    if stray:
        result["stray_files_in_pristine_tree"] = stray
    return result


def _ratio(value: float | None, base: float | None) -> str:
    return f"{value / base:.2f}x" if value and base else "-"


def render(report: dict[str, Any]) -> str:
    """The Markdown table of one run."""
    limit_mib = report["settings"]["memory_limit_bytes"] // MiB
    driver = report["settings"]["spark_driver_memory"]
    labels = {
        "ours": f"iceberg-exec compact, rewrite-all ({limit_mib} MiB limit)",
        "spark": f"Spark rewrite_data_files, rewrite-all (driver {driver})",
        "floor": "floor: PyArrow read + write (no deletes)",
    }
    by = {r["case"]: r for r in report["results"]}
    spark, floor = by.get("spark", {}), by.get("floor", {})
    lines = [
        "| case | time (s) | process wall (s) | peak RSS (MiB) | CPU (s) | time vs Spark | RSS vs Spark "
        "| time vs floor | RSS vs floor | files out | rows + checksum (Spark) | delete files left "
        "| load avg |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | --- |",
    ]
    for case in CASES:
        r = by.get(case)
        if r is None:
            continue
        rss = r["peak_rss_bytes"] / MiB
        rss_text = f"{rss:.0f}"
        if case.startswith("spark"):
            rss_text += (
                f" (JVM {r['jvm_peak_rss_bytes'] / MiB:.0f} + Python {r['python_peak_rss_bytes'] / MiB:.0f})"
            )
        v = r.get("verify")
        check = "-" if v is None else ("match" if v["matches"] else "**MISMATCH**")
        left = "-" if v is None else (", ".join(f"{n} {k}" for k, n in v["delete_files"].items()) or "0")
        files = v["data_files"] if v else r.get("added_files", "-")
        spark_rss = spark.get("peak_rss_bytes", 0) / MiB
        floor_rss = floor.get("peak_rss_bytes", 0) / MiB
        lines.append(
            f"| {labels[case]} | {r['seconds']:.1f} | {r['process_seconds']:.1f} | {rss_text} "
            f"| {r['cpu_seconds']:.1f} "
            f"| {_ratio(r['seconds'], spark.get('seconds'))} | {_ratio(rss, spark_rss)} "
            f"| {_ratio(r['seconds'], floor.get('seconds'))} | {_ratio(rss, floor_rss)} | {files} | {check} "
            f"| {left} | {r['load_before'][0]:.1f}→{r['load_after'][0]:.1f} |"
        )
    return "\n".join(lines)


def _describe(dataset: dict[str, Any], limit: int) -> bool:
    """Print the table's shape and the keys' size against the limit; whether the keys exceed it."""
    keys = dataset["equality_key_arrow_bytes"]
    print(
        f"table: {dataset['rows']} rows in {dataset['data_files']} data files "
        f"({dataset['data_bytes'] / MiB:.0f} MiB), delete files {dataset['delete_files']}; "
        f"live rows {dataset['live_rows']}, Spark checksum {dataset['checksum']}",
        flush=True,
    )
    print(
        f"equality delete keys: {dataset['equality_delete_keys']} keys of {dataset['key_length']} "
        f"characters, Arrow size {keys / MiB:.1f} MiB ({dataset['equality_delete_file_bytes'] / MiB:.1f} MiB "
        f"of Parquet) against a memory limit of {limit / MiB:.0f} MiB: {keys / limit:.2f}x the limit",
        flush=True,
    )
    if keys <= limit:
        print(
            "WARNING: the equality delete keys do not exceed the memory limit (use more --rows)", flush=True
        )
    return bool(keys > limit)


def _judge_spark_read(
    r: dict[str, Any],
    v: dict[str, Any],
    dataset: dict[str, Any],
    failures: list[str],
    notes: list[str],
    forbidden: Collection[str] | None = None,
    may_leave: Collection[str] = MAY_LEAVE_DELETES,
) -> None:
    """Record what Spark read of one case's result ``r``: rows and checksum, delete files left.

    ``forbidden``: the kinds of delete file (``position``, ``equality``) that must not be left, every
    kind by default; a case in ``may_leave`` gets a note instead of a failure.
    """
    v["matches"] = (v["rows"], v["checksum"]) == (dataset["live_rows"], dataset["checksum"])
    r["verify"] = v
    if not v["matches"]:
        failures.append(f"{r['case']}: Spark reads {v['rows']} rows / {v['checksum']}")
    left = {k: n for k, n in v["delete_files"].items() if forbidden is None or k in forbidden}
    if left and r["case"] in may_leave:
        notes.append(f"{r['case']}: delete files left in the new snapshot {v['delete_files']}")
    elif left:
        failures.append(f"{r['case']}: delete files left {v['delete_files']}")


def spark_read(
    results: list[dict[str, Any]], cases: Collection[str], args: argparse.Namespace, stamp: str
) -> list[dict[str, Any]]:
    """One Spark child (this script's ``verify``) reads the result of every case in ``cases``."""
    out = os.path.abspath(args.out)
    to_verify = [
        {"case": r["case"], "metadata_location": r["metadata_location"]}
        for r in results
        if r["case"] in cases
    ]
    if not to_verify:
        return []
    print("verifying with Spark ...", flush=True)
    listing = os.path.join(out, "runs", f"{stamp}-verify.json")
    with open(listing, "w") as f:
        json.dump(to_verify, f)
    argv = ["verify", "--described", listing, *_shape_argv(args)]
    measured = run_child(argv, out, os.path.join(out, "runs", f"{stamp}-v.json"))
    checked: list[dict[str, Any]] = measured["result"]
    return checked


def _verify(
    results: list[dict[str, Any]], dataset: dict[str, Any], args: argparse.Namespace, stamp: str
) -> tuple[list[str], list[str]]:
    """Spark reads every Iceberg result; returns (failures, notes)."""
    failures: list[str] = []
    notes: list[str] = []
    checked = spark_read(results, ICEBERG_CASES, args, stamp)
    for r in results:
        for v in checked:
            if v["case"] == r["case"]:
                _judge_spark_read(r, v, dataset, failures, notes)
    limit = args.memory_limit * MiB
    for r in results:
        if r.get("stray_files_in_pristine_tree"):
            failures.append(
                f"{r['case']} wrote into the pristine tree: {r['stray_files_in_pristine_tree'][:5]}"
            )
        if r["case"] == "ours" and r["peak_rss_bytes"] > limit + OVERHEAD_TARGET:
            notes.append(
                f"ours: peak RSS {r['peak_rss_bytes'] / MiB:.0f} MiB is above the limit + 350 MiB "
                f"({(limit + OVERHEAD_TARGET) / MiB:.0f} MiB)"
            )
    return failures, notes


def snapshot_code(out: str, stamp: str) -> None:
    """Others may edit the package while the cases run: the children import a copy of it."""
    snapshot = os.path.join(out, "code", stamp)
    shutil.copytree(
        os.path.join(REPO, "airflow_provider_iceberg_exec"),
        os.path.join(snapshot, "airflow_provider_iceberg_exec"),
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    os.environ[CB.CODE_ROOT_ENV] = snapshot


def report_header(dataset: dict[str, Any]) -> dict[str, Any]:
    """Date, command, machine, versions and the dataset's description: the head of a run's JSON."""
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join([sys.executable, *sys.argv]),
        "machine": CB._machine(),
        "versions": CB._versions(),
        "dataset": {k: v for k, v in dataset.items() if k != "files_on_disk"},
    }


def orchestrate(args: argparse.Namespace) -> int:
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    for case in cases:
        if case not in CASES:
            raise SystemExit(f"unknown case {case!r}; choose from {', '.join(CASES)}")
    dataset = ensure_dataset(args)
    limit = args.memory_limit * MiB
    keys_exceed = _describe(dataset, limit)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    if not args.no_snapshot:
        snapshot_code(out, stamp)
    report: dict[str, Any] = {
        **report_header(dataset),
        "settings": {
            "memory_limit_bytes": limit,
            "keys_exceed_memory_limit": keys_exceed,
            "target_file_size_bytes": TARGET_FILE_SIZE,
            "spark_driver_memory": args.spark_driver_memory,
        },
    }
    results = []
    for case in cases:
        print(f"running {case} ...", flush=True)
        result = run_case(case, dataset, args, stamp, 1)
        results.append(result)
        print(
            f"  {case}: {result['seconds']:.1f} s (process {result['process_seconds']:.1f} s), "
            f"peak RSS {result['peak_rss_bytes'] / MiB:.0f} MiB, CPU {result['cpu_seconds']:.1f} s, "
            f"load {result['load_before'][0]}->{result['load_after'][0]}",
            flush=True,
        )
    failures, notes = _verify(results, dataset, args, stamp)
    report["results"], report["failures"], report["notes"] = results, failures, notes
    table = render(report)
    with open(os.path.join(out, f"results-{stamp}.json"), "w") as f:
        json.dump(report, f, indent=2, default=str)
    with open(os.path.join(out, f"results-{stamp}.md"), "w") as f:
        f.write(table + "\n" + "".join(f"\n- {n}" for n in notes) + "\n")
    print()
    print(table)
    for note in notes:
        print(f"NOTE: {note}")
    print(f"\nresults: {out}/results-{stamp}.json")
    CB.draw_charts(os.path.join(out, f"results-{stamp}.json"))
    if not args.keep:
        for r in results:
            shutil.rmtree(r["run_dir"], ignore_errors=True)
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures), file=sys.stderr)
        return 1
    return 0


def build_parser(description: str, default_out: str, cases: tuple[str, ...]) -> argparse.ArgumentParser:
    """The command line of this script, shared by the benchmarks that reuse its table."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=20_000_000)
    parser.add_argument("--files", type=int, default=400)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--eq-files", type=int, default=4, help="equality delete files (default 4)")
    parser.add_argument(
        "--memory-limit", type=int, default=64, help="our engine's memory limit, MiB (default 64)"
    )
    parser.add_argument("--spark-driver-memory", default="4g", help="spark.driver.memory (default 4g)")
    parser.add_argument(
        "--pristine-checksum",
        choices=("deletes", "predicate"),
        default="deletes",
        help="how Spark reads the pristine live rows' checksum when it generates the table: through its "
        "deletes (default), or from the data snapshot by the deletes' predicates (for 100M rows and more: "
        "its read through the equality deletes took 207 s at 20M rows)",
    )
    parser.add_argument("--out", default=default_out, help="cache and results")
    parser.add_argument("--cases", default=",".join(cases), help=f"comma-separated, from {', '.join(cases)}")
    parser.add_argument("--keep", action="store_true", help="keep each run's catalog and files")
    parser.add_argument("--no-snapshot", action="store_true", help="import the package from the work tree")
    parser.add_argument("--result", help=argparse.SUPPRESS)
    parser.add_argument("--run-dir", help=argparse.SUPPRESS)
    parser.add_argument("--described", help=argparse.SUPPRESS)
    parser.add_argument("action", nargs="?", help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser(__doc__ or "", os.path.join(HERE, "out", "mor"), CASES).parse_args(argv)
    if args.action is None:
        return orchestrate(args)
    result = worker(args)
    with open(args.result, "w") as f:
        json.dump(result, f, indent=2, default=str)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
