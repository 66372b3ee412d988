"""Compaction benchmark: our engine against what a PyIceberg user does today and against the floor.

Run by hand, never as a test::

    /work/venv/bin/python bench/compaction.py [--rows 20000000 --files 400] [--out bench/out]

1. Generates once (cached under ``--out``) a fragmented Iceberg table in a local SQLite catalog: ``--rows``
   rows in ``--files`` data files, mixed column types, written with PyIceberg's writer and committed in one
   fast append. Unpartitioned, or with ``--partitions N`` identity-partitioned on ``event_date`` over N days,
   file ``i`` holding day ``i mod N`` (many small groups, one a partition, as a daily-ingested table has).
   The table property ``write.target-file-size-bytes`` is 128 MiB, so PyIceberg's overwrite rolls at the
   same size as the compaction.
2. Runs every case in its own subprocess, from the same pristine table metadata (registered into a fresh
   catalog per run, with ``write.data.path``/``write.metadata.path`` pointing into the run's directory),
   and takes the peak RSS of the whole child from ``wait4``:

   - ``binpack``: ``plan_compaction`` / ``execute_rewrite_tasks`` / ``commit_compaction`` (what ``compact``
     runs), ``ResourceLimits(memory_limit_bytes=256 MiB)``, option ``target-file-size-bytes=134217728``;
   - ``sort``: the same with strategy ``sort`` by ``user_id ASC NULLS LAST, event_ts DESC NULLS LAST``;
   - ``pyiceberg``: ``table.overwrite(table.scan().to_arrow())``;
   - ``pyiceberg-sort``: the same with ``.sort_by(...)`` on the sort's keys before the overwrite;
   - ``floor``: PyArrow reads every data file (streaming) and writes the same rows as zstd Parquet
     files rolled at 128 MiB (and at each partition's end), no Iceberg work, one stream (thread) per core,
     each over a contiguous share of the files by bytes;
   - ``datafusion``: ``ctx.read_parquet(data_dir + "/").write_parquet(...)``, zstd level 1, default
     session.

3. Verifies every Iceberg case afterwards in another subprocess: row count and an order-independent
   checksum of the live rows read by PyIceberg must equal the original's.

Results go to ``--out/results-<stamp>.json``, a Markdown table to ``--out/results-<stamp>.md`` and the charts
of ``bench/charts.py`` beside them. ``--scale 1,5,10`` runs the cases at several table sizes instead
(``bench/compaction_scale.py``).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import datetime
import glob
import hashlib
import importlib
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Iterator
from typing import Any

MiB = 1024 * 1024
TABLE = "bench.events"
NAMESPACE = "bench"
TARGET_FILE_SIZE = 128 * MiB
MEMORY_LIMIT = 256 * MiB
SORT_ORDER = "user_id ASC NULLS LAST, event_ts DESC NULLS LAST"
#: Spark's z-order over the same two columns (issue target: <= 1.2x our sort)
ZORDER = "zorder(user_id, event_ts)"
#: what runs when ``--cases`` is not given
DEFAULT_CASES = ("binpack", "sort", "zorder", "pyiceberg", "pyiceberg-sort", "floor", "datafusion")
#: ``binpack+progress``: binpack with a progress listener attached (the engine's progress hook's cost)
#: ``spark``, ``spark-sort``: Java Iceberg 1.10's ``rewrite_data_files`` in local Spark (needs Java 17 and
#: the interop set-up of tests/interop, as bench/mor.py's Spark case)
SPARK_CASES = ("spark", "spark-sort")
CASES = (*DEFAULT_CASES[:1], "binpack+progress", *DEFAULT_CASES[1:], *SPARK_CASES)
ICEBERG_CASES = ("binpack", "binpack+progress", "sort", "zorder", "pyiceberg", "pyiceberg-sort", *SPARK_CASES)
#: the cases whose output files must each follow SORT_ORDER
SORTED_CASES = ("sort", "pyiceberg-sort", "spark-sort")
SPARK_DRIVER_MEMORY = "4g"
OUR_CASES = ("binpack", "binpack+progress", "sort", "zorder")
TARGETS = {"peak_rss_mib": 600}
#: the day of a partitioned table's first partition (``--partitions``): 2025-01-01, days since the epoch
FIRST_DAY = 20_089
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
#: Where the children import the package from: a snapshot taken at the start of the run (see --no-snapshot).
CODE_ROOT_ENV = "ICEBERG_EXEC_BENCH_CODE_ROOT"

# --------------------------------------------------------------------------------------------- data


def _arrow_schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [
            pa.field("id", pa.int64(), nullable=False),
            pa.field("user_id", pa.int64()),
            pa.field("quantity", pa.int32()),
            pa.field("price", pa.float64()),
            pa.field("amount", pa.decimal128(18, 2)),
            pa.field("name", pa.string()),
            pa.field("event_ts", pa.timestamp("us", tz="UTC")),
            pa.field("event_date", pa.date32()),
            pa.field("flag", pa.bool_()),
        ]
    )


def _iceberg_schema() -> Any:
    from pyiceberg.schema import Schema
    from pyiceberg.types import (
        BooleanType,
        DateType,
        DecimalType,
        DoubleType,
        IntegerType,
        LongType,
        NestedField,
        StringType,
        TimestamptzType,
    )

    types = [
        ("id", LongType(), True),
        ("user_id", LongType(), False),
        ("quantity", IntegerType(), False),
        ("price", DoubleType(), False),
        ("amount", DecimalType(18, 2), False),
        ("name", StringType(), False),
        ("event_ts", TimestamptzType(), False),
        ("event_date", DateType(), False),
        ("flag", BooleanType(), False),
    ]
    return Schema(
        *(
            NestedField(field_id=i, name=name, field_type=kind, required=required)
            for i, (name, kind, required) in enumerate(types, start=1)
        )
    )


_ALPHABET = b"abcdefghijklmnopqrstuvwxyz0123456789-_ "


def make_batch(file_number: int, start: int, rows: int, seed: int) -> Any:
    """The rows of one input file, deterministic in ``(seed, file_number)``; vectorized with numpy."""
    import numpy as np
    import pyarrow as pa

    rng = np.random.default_rng([seed, file_number])
    ids = np.arange(start, start + rows, dtype=np.int64)
    user_id = rng.integers(0, 1_000_000, rows, dtype=np.int64)
    quantity = rng.integers(0, 1000, rows, dtype=np.int32)
    price = np.round(rng.lognormal(3.0, 1.0, rows), 2)
    price[rng.random(rows) < 0.005] = np.nan
    cents = rng.integers(-(10**9), 10**9, rows, dtype=np.int64)
    decimal_words = np.empty((rows, 2), dtype=np.int64)
    decimal_words[:, 0] = cents
    decimal_words[:, 1] = cents >> 63  # sign extension: little-endian 128-bit two's complement
    lengths = rng.integers(10, 31, rows, dtype=np.int32)
    offsets = np.zeros(rows + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    alphabet = np.frombuffer(_ALPHABET, dtype=np.uint8)
    chars = alphabet[rng.integers(0, len(alphabet), int(offsets[-1]))]
    epoch_2025_us = 1_735_689_600 * 1_000_000
    event_ts = epoch_2025_us + rng.integers(0, 2 * 365 * 86_400 * 1_000_000, rows, dtype=np.int64)
    event_date = (event_ts // (86_400 * 1_000_000)).astype(np.int32) - rng.integers(
        0, 3, rows, dtype=np.int32
    )
    flag = rng.random(rows) < 0.3

    def nulls(share: float) -> Any:
        return rng.random(rows) < share

    schema = _arrow_schema()
    columns = [
        pa.array(ids, pa.int64()),
        pa.array(user_id, pa.int64(), mask=nulls(0.001)),
        pa.array(quantity, pa.int32(), mask=nulls(0.01)),
        pa.array(price, pa.float64(), mask=nulls(0.02)),
        pa.Array.from_buffers(pa.decimal128(18, 2), rows, [None, pa.py_buffer(decimal_words.tobytes())]),
        pa.StringArray.from_buffers(rows, pa.py_buffer(offsets.tobytes()), pa.py_buffer(chars.tobytes())),
        pa.array(event_ts, pa.int64()).cast(pa.timestamp("us", tz="UTC")),
        pa.array(event_date, pa.int32()).cast(pa.date32()),
        pa.array(flag, pa.bool_(), mask=nulls(0.01)),
    ]
    # Some decimals and strings null too: rebuild them with a validity mask.
    columns[4] = _with_nulls(columns[4], nulls(0.01))
    columns[5] = _with_nulls(columns[5], nulls(0.01))
    return pa.Table.from_arrays(columns, schema=schema)


def _with_nulls(array: Any, mask: Any) -> Any:
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.if_else(pa.array(mask), pa.nulls(len(array), array.type), array)


def _catalog(name: str, directory: str) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog

    os.makedirs(directory, exist_ok=True)
    return SqlCatalog(
        name,
        uri=f"sqlite:///{directory}/catalog.db",
        warehouse=f"file://{directory}/warehouse",
    )


def generate(out: str, rows: int, files: int, seed: int, partitions: int = 0) -> dict[str, Any]:
    """Create the pristine fragmented table under ``out/pristine`` and describe it in ``dataset.json``;
    with ``partitions``, identity-partitioned on ``event_date``, file ``i`` of day ``i mod partitions``."""
    import itertools

    import pyarrow as pa
    from pyiceberg.io.pyarrow import _dataframe_to_data_files
    from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionField, PartitionSpec
    from pyiceberg.transforms import IdentityTransform

    pristine = os.path.join(out, "pristine")
    if os.path.exists(pristine):
        shutil.rmtree(pristine)
    catalog = _catalog("pristine", pristine)
    catalog.create_namespace_if_not_exists(NAMESPACE)
    schema = _iceberg_schema()
    day_field = schema.find_field("event_date")
    spec = (
        PartitionSpec(PartitionField(day_field.field_id, 1000, IdentityTransform(), "event_date"))
        if partitions
        else UNPARTITIONED_PARTITION_SPEC
    )
    table = catalog.create_table(
        TABLE,
        schema=schema,
        partition_spec=spec,
        properties={"write.target-file-size-bytes": str(TARGET_FILE_SIZE)},
    )
    started = time.monotonic()
    counter = itertools.count(0)
    write_uuid = uuid.uuid4()
    data_files = []
    per_file, extra = divmod(rows, files)
    start = 0
    for number in range(files):
        count = per_file + (1 if number < extra else 0)
        batch = make_batch(number, start, count, seed)
        if partitions:
            day = pa.array([FIRST_DAY + number % partitions] * count, pa.int32()).cast(pa.date32())
            batch = batch.set_column(
                batch.schema.get_field_index("event_date"), batch.schema.field("event_date"), day
            )
        written = list(_dataframe_to_data_files(table.metadata, batch, table.io, write_uuid, counter))
        if len(written) != 1:
            raise RuntimeError(f"file {number} was written as {len(written)} files; expected one")
        data_files.extend(written)
        start += count
        if (number + 1) % 50 == 0:
            print(f"  generated {number + 1}/{files} files ({time.monotonic() - started:.0f}s)", flush=True)
    with table.transaction() as tx, tx.update_snapshot().fast_append() as append:
        for data_file in data_files:
            append.append_data_file(data_file)
    table = catalog.load_table(TABLE)
    snapshot = table.current_snapshot()
    described = {
        "rows": rows,
        "files": files,
        "seed": seed,
        "partitions": partitions,
        "metadata_location": table.metadata_location,
        "data_dir": table.location().removeprefix("file://").rstrip("/") + "/data",
        "table_location": table.location(),
        "snapshot_id": snapshot.snapshot_id if snapshot else None,
        "total_bytes": sum(f.file_size_in_bytes for f in data_files),
        "generated_seconds": round(time.monotonic() - started, 1),
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    described["files_on_disk"] = sorted(_walk(pristine))
    return described


def _walk(root: str) -> Iterator[str]:
    for directory, _dirs, names in os.walk(root):
        for name in names:
            yield os.path.relpath(os.path.join(directory, name), root)


def ensure_dataset(out: str, rows: int, files: int, seed: int, partitions: int = 0) -> dict[str, Any]:
    """The cached pristine table, generated (in a subprocess) when missing or of another shape."""
    path = os.path.join(out, "dataset.json")
    if os.path.exists(path):
        with open(path) as f:
            described = json.load(f)
        if (described["rows"], described["files"], described["seed"], described.get("partitions", 0)) == (
            rows,
            files,
            seed,
            partitions,
        ) and os.path.exists(described["metadata_location"].removeprefix("file://")):
            return dict(described)
    print(f"generating {rows} rows in {files} files under {out}/pristine ...", flush=True)
    result_path = os.path.join(out, "generate.json")
    _run_child(
        [
            "generate",
            "--rows",
            str(rows),
            "--files",
            str(files),
            "--seed",
            str(seed),
            "--partitions",
            str(partitions),
        ],
        out,
        result_path,
    )
    with open(result_path) as f:
        described = json.load(f)
    print("computing the original checksum ...", flush=True)
    verify_path = os.path.join(out, "verify-pristine.json")
    _run_child(["verify", "--metadata", described["metadata_location"]], out, verify_path)
    with open(verify_path) as f:
        described["checksum"] = json.load(f)
    with open(path, "w") as f:
        json.dump(described, f, indent=2)
    return dict(described)


# ----------------------------------------------------------------------------------------- checksum

_U64 = (1 << 64) - 1
_NULL = 0x9E3779B97F4A7C15
_NAN = 0x7FF8000000000001


def _mix(x: Any) -> Any:
    """splitmix64's finalizer over a uint64 numpy array (wraps mod 2**64)."""
    import numpy as np

    x = x ^ (x >> np.uint64(30))
    x = x * np.uint64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> np.uint64(27))
    x = x * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _column_words(array: Any) -> Any:
    """One uint64 per row that identifies the value (nulls, NaN and -0.0 kept distinct)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = array.type
    valid = np.asarray(array.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
    if pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_string_view(kind):
        words = _string_words(array.cast(pa.large_string()))
    elif pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        words = _string_words(array.cast(pa.large_binary()))
    elif pa.types.is_floating(kind):
        values = pc.fill_null(array.cast(pa.float64()), 0.0).to_numpy(zero_copy_only=False)
        words = np.where(np.isnan(values), np.uint64(_NAN), values.view(np.uint64))
    elif pa.types.is_decimal(kind):
        array = array.cast(pa.decimal128(38, kind.scale))
        raw = np.frombuffer(array.buffers()[1], dtype=np.uint64)
        pairs = raw[2 * array.offset : 2 * (array.offset + len(array))].reshape(-1, 2)
        words = pairs[:, 0] ^ _mix(pairs[:, 1] + np.uint64(1))
    elif pa.types.is_date32(kind):
        words = pc.fill_null(array.cast(pa.int32()), 0).cast(pa.int64()).to_numpy().view(np.uint64)
    elif pa.types.is_boolean(kind):
        words = pc.fill_null(array, False).to_numpy(zero_copy_only=False).astype(np.uint64)
    elif pa.types.is_temporal(kind) or pa.types.is_integer(kind):
        words = pc.fill_null(array.cast(pa.int64()), 0).to_numpy().view(np.uint64)
    else:
        raise TypeError(f"checksum does not handle {kind}")
    return np.where(valid, words, np.uint64(_NULL))


def _string_words(array: Any) -> Any:
    import numpy as np

    count = len(array)
    offsets = np.frombuffer(array.buffers()[1], dtype=np.int64)[array.offset : array.offset + count + 1]
    data = array.buffers()[2]
    data = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, dtype=np.uint8)
    first, last = int(offsets[0]), int(offsets[-1])
    data = data[first:last].astype(np.uint64)
    starts = offsets[:-1] - first
    lengths = np.diff(offsets)
    position = np.arange(len(data), dtype=np.int64) - np.repeat(starts, lengths)
    weights = _mix(np.arange(int(lengths.max(initial=0)) + 1, dtype=np.uint64) + np.uint64(12345))
    contributions = (data + np.uint64(1)) * weights[position]
    running = np.zeros(len(data) + 1, dtype=np.uint64)
    np.cumsum(contributions, out=running[1:])
    ends = starts + lengths
    return running[ends] - running[starts] + lengths.astype(np.uint64) * np.uint64(0xD6E8FEB86659FD93)


def checksum_batches(batches: Iterable[Any]) -> tuple[int, str]:
    """``(rows, checksum)``: the sum mod 2**64 of a per-row hash over every column, by column name."""
    import numpy as np

    rows, total = 0, 0
    for batch in batches:
        if batch.num_rows == 0:
            continue
        accumulator = np.zeros(batch.num_rows, dtype=np.uint64)
        for position, name in enumerate(sorted(batch.schema.names)):
            salt = np.uint64((position + 1) * 0x632BE59BD9B4E019 & _U64)
            accumulator += _mix(_column_words(batch.column(name)) ^ salt)
        total = (total + int(_mix(accumulator).sum(dtype=np.uint64))) & _U64
        rows += batch.num_rows
    return rows, f"{total:016x}"


# ------------------------------------------------------------------------------------------ workers


def as_a_task() -> str:
    """Start the process as a task's does, the provider imported before PyArrow (which makes jemalloc its
    allocator: ``airflow_provider_iceberg_exec/__init__.py``); the allocator PyArrow runs on."""
    importlib.import_module("airflow_provider_iceberg_exec")  # first: it picks PyArrow's allocator
    pa = importlib.import_module("pyarrow")
    return str(pa.default_memory_pool().backend_name)


def _run_table(run_dir: str, metadata_location: str) -> Any:
    """The pristine table registered into a fresh catalog whose new files all land under ``run_dir``."""
    catalog = _catalog("run", run_dir)
    catalog.create_namespace_if_not_exists(NAMESPACE)
    table = catalog.register_table(TABLE, metadata_location)
    with table.transaction() as tx:
        tx.set_properties(
            {
                "write.data.path": f"file://{run_dir}/data",
                "write.metadata.path": f"file://{run_dir}/metadata",
            }
        )
    return catalog.load_table(TABLE)


def _worker_engine(table: Any, case: str, run_dir: str) -> dict[str, Any]:
    from airflow_provider_iceberg_exec.engine.config import ResourceLimits
    from airflow_provider_iceberg_exec.engine.ops import compaction
    from airflow_provider_iceberg_exec.engine.ops.compaction import (
        commit_compaction,
        execute_rewrite_task,
        plan_compaction,
    )

    limits = ResourceLimits(memory_limit_bytes=MEMORY_LIMIT, spill_dir=os.path.join(run_dir, "spill"))
    options = {"target-file-size-bytes": str(TARGET_FILE_SIZE)}
    base, _, listener = case.partition("+")
    t0 = time.monotonic()
    strategy = "binpack" if base == "binpack" else "sort"
    sort_order = {"sort": SORT_ORDER, "zorder": ZORDER}.get(base)
    plan = plan_compaction(table, options=options, strategy=strategy, sort_order=sort_order)
    t1 = time.monotonic()
    events: list[str] = []
    if listener:  # imported only then, so that the case runs on code from before the hook too
        from airflow_provider_iceberg_exec.engine.progress import listening
    # A listener at least as costly as the CLI's and the operators': every event formatted and kept.
    with listening(lambda event: events.append(event.describe())) if listener else contextlib.nullcontext():
        if hasattr(compaction, "execute_rewrite_tasks"):  # as compact runs them
            results: list[Any] = []
            compaction.execute_rewrite_tasks(table, collections.deque(plan["tasks"]), limits, results)
        else:  # the code of before: one group after another
            results = [execute_rewrite_task(table, task, limits) for task in plan["tasks"]]
    t2 = time.monotonic()
    outcome = commit_compaction(table, results, commit_id=uuid.uuid4().hex)
    t3 = time.monotonic()
    return {
        "seconds": t3 - t0,
        "phases": {"plan": t1 - t0, "execute": t2 - t1, "commit": t3 - t2},
        "groups": len(plan["tasks"]),
        "rewritten_files": outcome["rewritten_data_files_count"],
        "added_files": outcome["added_data_files_count"],
        "engine_peak_rss_bytes": outcome["peak_rss_bytes"],
        "spilled_bytes": outcome["spilled_bytes"],
        "group_seconds": [r["elapsed_seconds"] for r in results],
        "progress_events": len(events),
    }


def _worker_pyiceberg(table: Any, sort: bool = False) -> dict[str, Any]:
    t0 = time.monotonic()
    data = table.scan().to_arrow()
    t1 = time.monotonic()
    if sort:  # SORT_ORDER: both keys NULLS LAST
        data = data.sort_by([("user_id", "ascending", "at_end"), ("event_ts", "descending", "at_end")])
    t2 = time.monotonic()
    table.overwrite(data)
    t3 = time.monotonic()
    return {
        "seconds": t3 - t0,
        "phases": {"scan_to_arrow": t1 - t0, **({"sort_by": t2 - t1} if sort else {}), "overwrite": t3 - t2},
        "rows": data.num_rows,
    }


def _data_files_of(data_dir: str) -> list[str]:
    """The Parquet files under ``data_dir``, partition directories included, in path order."""
    return sorted(glob.glob(os.path.join(data_dir, "**", "*.parquet"), recursive=True))


def _floor_streams() -> int:
    """One stream per core: the floor is what the machine's cores do with no Iceberg work."""
    return max(1, os.cpu_count() or 1)


def _split_by_bytes(paths: list[str], parts: int) -> list[list[str]]:
    """``paths`` cut into ``parts`` contiguous runs of about equal bytes (file order kept)."""
    sizes = [os.path.getsize(p) for p in paths]
    total, runs, current, done = sum(sizes), [], [], 0
    for path, size in zip(paths, sizes, strict=True):
        current.append(path)
        done += size
        if len(runs) < parts - 1 and done >= total * (len(runs) + 1) / parts:
            runs.append(current)
            current = []
    runs.append(current)
    return [run for run in runs if run]


class _FloorFiles:
    """The floor's output of one stream: row groups of the rows buffered, zstd files rolled at 128 MiB."""

    def __init__(self, out_dir: str, prefix: str) -> None:
        self.out_dir, self.prefix = out_dir, prefix
        self.outputs: list[str] = []
        self.writer: Any = None
        self.sink: Any = None

    def write(self, batches: list[Any], row_group_bytes: int) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        if not batches:
            return
        if self.writer is None:
            path = os.path.join(self.out_dir, f"{self.prefix}-part-{len(self.outputs) + 1:05d}.parquet")
            self.outputs.append(path)
            self.sink = pa.OSFile(path, "wb")
            self.writer = pq.ParquetWriter(self.sink, batches[0].schema, compression="zstd")
        self.writer.write_table(pa.Table.from_batches(batches))
        if self.sink.tell() >= TARGET_FILE_SIZE - row_group_bytes // 4:
            self.close()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.sink.close()
            self.writer = None


def _floor_stream(paths: list[str], out_dir: str, prefix: str) -> tuple[int, list[str]]:
    """Stream ``paths`` and write their rows, buffer ~32 MiB per row group, roll zstd files at 128 MiB and
    at each partition's end (a new directory), as a writer of the partitioned table must."""
    import pyarrow.parquet as pq

    row_group_bytes = 32 * MiB
    files = _FloorFiles(out_dir, prefix)
    rows, buffered_bytes = 0, 0
    buffered: list[Any] = []
    directory = None
    for path in paths:
        if os.path.dirname(path) != directory:  # a partition's rows end in its own files
            files.write(buffered, row_group_bytes)
            files.close()
            buffered, buffered_bytes = [], 0
            directory = os.path.dirname(path)
        reader = pq.ParquetFile(path, pre_buffer=False)
        for batch in reader.iter_batches(batch_size=65536, use_threads=False):
            buffered.append(batch)
            buffered_bytes += batch.nbytes
            rows += batch.num_rows
            if buffered_bytes >= row_group_bytes:
                files.write(buffered, row_group_bytes)
                buffered, buffered_bytes = [], 0
    files.write(buffered, row_group_bytes)
    files.close()
    return rows, files.outputs


def _worker_floor(data_dir: str, run_dir: str, expected_rows: int) -> dict[str, Any]:
    """PyArrow only, one stream per core: each thread streams a contiguous share of the files (by bytes)
    and writes their rows (PyArrow releases the GIL while it decodes and encodes).

    On the engine's small pages, as the engine's executions run (``session.small_pages``): with the
    allocator's huge pages the same work took ~15 % longer, a setting of the process, not work."""
    from concurrent.futures import ThreadPoolExecutor

    from airflow_provider_iceberg_exec.engine.io.session import small_pages

    small_pages()
    out_dir = os.path.join(run_dir, "floor")
    os.makedirs(out_dir)
    shares = _split_by_bytes(_data_files_of(data_dir), _floor_streams())
    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=len(shares)) as pool:
        streamed = list(
            pool.map(lambda item: _floor_stream(item[1], out_dir, f"s{item[0]}"), enumerate(shares))
        )
    seconds = time.monotonic() - t0
    rows = sum(r for r, _ in streamed)
    outputs = [path for _, paths in streamed for path in paths]
    if rows != expected_rows:
        raise RuntimeError(f"floor read {rows} rows, expected {expected_rows}")
    return {
        "seconds": seconds,
        "rows": rows,
        "streams": len(shares),
        "added_files": len(outputs),
        "output_bytes": sum(os.path.getsize(p) for p in outputs),
    }


def _worker_datafusion(data_dir: str, run_dir: str) -> dict[str, Any]:
    from datafusion import SessionContext

    out_dir = os.path.join(run_dir, "datafusion")
    t0 = time.monotonic()
    ctx = SessionContext()
    ctx.read_parquet(data_dir.rstrip("/") + "/").write_parquet(
        out_dir, compression="zstd", compression_level=1
    )
    seconds = time.monotonic() - t0
    outputs = _data_files_of(out_dir) if os.path.isdir(out_dir) else [out_dir]
    return {
        "seconds": seconds,
        "added_files": len(outputs),
        "output_bytes": sum(os.path.getsize(p) for p in outputs),
    }


def _unsorted_files(paths: Iterable[str]) -> list[str]:
    """Data files whose rows do not follow SORT_ORDER (user_id ASC NULLS LAST, event_ts DESC NULLS LAST)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    bad = []
    for path in paths:
        data = pq.read_table(path.removeprefix("file://"), columns=["user_id", "event_ts"])
        user = pc.fill_null(data.column("user_id"), np.iinfo(np.int64).max).to_numpy()
        ts = pc.fill_null(data.column("event_ts").cast(pa.int64()), np.iinfo(np.int64).min).to_numpy()
        ordered = (user[:-1] < user[1:]) | ((user[:-1] == user[1:]) & (ts[:-1] >= ts[1:]))
        if not bool(ordered.all()):
            bad.append(path)
    return bad


def verify(metadata_location: str, check_sorted: bool = False) -> dict[str, Any]:
    """Row count, checksum and file layout of the table at ``metadata_location``, read by PyIceberg."""
    from pyiceberg.table import StaticTable

    table = StaticTable.from_metadata(metadata_location)
    t0 = time.monotonic()
    rows, checksum = checksum_batches(table.scan().to_arrow_batch_reader())
    files = [task.file for task in table.scan().plan_files()]
    snapshot = table.current_snapshot()
    sizes = sorted(f.file_size_in_bytes for f in files)
    return {
        "rows": rows,
        "checksum": checksum,
        "data_files": len(files),
        "file_sizes_mib": [round(s / MiB, 1) for s in sizes],
        "total_bytes": sum(sizes),
        "operation": snapshot.summary.operation.value if snapshot and snapshot.summary else None,
        **({"unsorted_files": _unsorted_files(f.file_path for f in files)} if check_sorted else {}),
        "seconds": round(time.monotonic() - t0, 1),
    }


def worker(args: argparse.Namespace) -> dict[str, Any]:
    """Body of a child process; its result goes to ``--result`` as JSON."""
    if args.action == "generate":
        return generate(args.out, args.rows, args.files, args.seed, args.partitions)
    if args.action == "verify":
        return verify(args.metadata, check_sorted=args.check_sorted)
    with open(os.path.join(args.out, "dataset.json")) as f:
        dataset = json.load(f)
    run_dir = os.path.abspath(args.run_dir)
    case = args.action
    engine = _engine_digest()  # before anything is imported: the code this child runs
    result = _run_worker_case(case, dataset, run_dir)
    if args.durable:
        started = time.monotonic()
        os.sync()
        result["sync_seconds"] = time.monotonic() - started
        result["seconds"] += result["sync_seconds"]
    if _engine_digest() != engine:
        result["engine_changed_during_run"] = True
    if case in OUR_CASES:
        import airflow_provider_iceberg_exec

        result["package_dir"] = os.path.dirname(os.path.abspath(airflow_provider_iceberg_exec.__file__))
    return {**result, "engine_sha256": engine}


def _worker_spark(dataset: dict[str, Any], run_dir: str, sort: bool) -> dict[str, Any]:
    """``rewrite_data_files`` with the engine cases' target size (binpack), or strategy ``sort`` by
    SORT_ORDER; peak RSS: the JVM's and the Python driver's ``VmHWM`` (bench/mor.py's ``spark_procedure``)."""
    mor = _sibling("mor")
    arguments = {"strategy": "sort", "sort_order": SORT_ORDER} if sort else None
    found: dict[str, Any] = mor.spark_procedure(
        dataset["metadata_location"],
        run_dir,
        SPARK_DRIVER_MEMORY,
        "rewrite_data_files",
        {"target-file-size-bytes": str(TARGET_FILE_SIZE)},
        arguments,
    )
    found["metadata_location"] = "file://" + mor._local(found["metadata_location"])
    return found


def _run_worker_case(case: str, dataset: dict[str, Any], run_dir: str) -> dict[str, Any]:
    if case in SPARK_CASES:
        return _worker_spark(dataset, run_dir, sort=case == "spark-sort")
    if case in ICEBERG_CASES:
        peer = case in ("pyiceberg", "pyiceberg-sort")
        pool = None if peer else as_a_task()  # a peer runs on PyArrow's own default
        table = _run_table(run_dir, dataset["metadata_location"])
        if peer:
            result = _worker_pyiceberg(table, sort=case == "pyiceberg-sort")
        else:
            result = {**_worker_engine(table, case, run_dir), "arrow_memory_pool": pool}
        table.refresh()
        result["metadata_location"] = table.metadata_location
        return result
    if case == "floor":
        return _worker_floor(dataset["data_dir"], run_dir, dataset["rows"])
    if case == "datafusion":
        return _worker_datafusion(dataset["data_dir"], run_dir)
    raise SystemExit(f"unknown case {case}")


# ------------------------------------------------------------------------------------- orchestration


def _run_child(argv: list[str], out: str, result_path: str, wrap: list[str] | None = None) -> dict[str, Any]:
    """Run this script as a child; return wall seconds, the child's peak RSS and CPU seconds (``wait4``)."""
    cmd = [
        *(wrap or []),
        sys.executable,
        os.path.abspath(__file__),
        "--out",
        out,
        "--result",
        result_path,
        *argv,
    ]
    if os.path.exists(result_path):
        os.remove(result_path)
    root = os.environ.get(CODE_ROOT_ENV, REPO)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    started = time.monotonic()
    proc = subprocess.Popen(cmd, env=env)
    if wrap:
        proc.wait()  # the profiler's child is not ours: RSS from its report is not comparable
        usage = None
    else:
        _pid, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.monotonic() - started
    if proc.returncode != 0:
        raise RuntimeError(f"child {argv[0]} failed with exit code {proc.returncode}")
    return {
        "process_seconds": wall,
        "peak_rss_bytes": usage.ru_maxrss * 1024 if usage else None,
        "cpu_seconds": usage.ru_utime + usage.ru_stime if usage else None,
        # apart: the kernel's share (page-cache copies, page faults) grows with the machine's memory state
        "user_cpu_seconds": usage.ru_utime if usage else None,
        "system_cpu_seconds": usage.ru_stime if usage else None,
    }


def _warm(data_dir: str) -> None:
    """Read every input file once so each case starts with the same (warm) page cache."""
    read_through(_data_files_of(data_dir))


def read_through(paths: Iterable[str]) -> None:
    """Read each file once, its bytes dropped: it is in the page cache afterwards."""
    for path in paths:
        with open(path, "rb") as f:
            while f.read(16 * MiB):
                pass


def _sweep(dataset: dict[str, Any], out: str) -> list[str]:
    """Remove files a run left in the pristine tree (it must write only under its run directory)."""
    pristine = os.path.join(out, "pristine")
    known = set(dataset["files_on_disk"])
    stray = [p for p in _walk(pristine) if p not in known]
    for path in stray:
        os.remove(os.path.join(pristine, path))
    return stray


def run_case(
    case: str, dataset: dict[str, Any], args: argparse.Namespace, stamp: str, repetition: int = 1
) -> dict[str, Any]:
    run_dir = os.path.join(os.path.abspath(args.out), "runs", f"{stamp}-{case}-{repetition}")
    os.makedirs(run_dir)
    if args.durable:
        os.sync()  # the write-back earlier cases left is not this case's
    _warm(dataset["data_dir"])
    result_path = os.path.join(run_dir, "result.json")
    load_before = os.getloadavg()[0]
    wrap = None
    if args.profile:
        wrap = [args.py_spy, "record", "--format", "raw", "--rate", "50", "--subprocesses", "--native", "-o"]
        wrap.append(os.path.join(os.path.abspath(args.out), f"profile-{stamp}-{case}-{repetition}.txt"))
        wrap.append("--")
    durable = ["--durable"] if args.durable else []
    measured = _run_child([case, "--run-dir", run_dir, *durable], args.out, result_path, wrap)
    with open(result_path) as f:
        result = {"case": case, **json.load(f), **measured}
    if case in SPARK_CASES:
        # ru_maxrss covers the larger of the Python child and its reaped JVM, not their sum.
        result["ru_maxrss_bytes"] = measured["peak_rss_bytes"]
        result["peak_rss_bytes"] = result["jvm_peak_rss_bytes"] + result["python_peak_rss_bytes"]
    result["load_before"] = round(load_before, 2)
    result["load_after"] = round(os.getloadavg()[0], 2)
    stray = _sweep(dataset, args.out)
    if stray:
        result["stray_files_in_pristine_tree"] = stray
    result["repetition"] = repetition
    if case in ICEBERG_CASES and (repetition == 1 or args.verify_all):
        verify_path = os.path.join(run_dir, "verify.json")
        sorted_flag = ["--check-sorted"] if case in SORTED_CASES else []
        _run_child(["verify", "--metadata", result["metadata_location"], *sorted_flag], args.out, verify_path)
        with open(verify_path) as f:
            checked = json.load(f)
        original = dataset["checksum"]
        checked["matches"] = (checked["rows"], checked["checksum"]) == (
            original["rows"],
            original["checksum"],
        ) and not checked.get("unsorted_files")
        result["verify"] = checked
    if not args.keep:
        shutil.rmtree(run_dir, ignore_errors=True)
    return result


def _summarize(case: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One case over its repetitions: median time and CPU, highest peak RSS, verification of every run."""
    import statistics

    summary = dict(runs[0])
    summary["seconds"] = statistics.median(r["seconds"] for r in runs)
    for key in ("cpu_seconds", "user_cpu_seconds", "system_cpu_seconds"):
        if all(r.get(key) is not None for r in runs):
            summary[key] = statistics.median(r[key] for r in runs)
    if all(r.get("peak_rss_bytes") for r in runs):
        summary["peak_rss_bytes"] = max(r["peak_rss_bytes"] for r in runs)
    summary["repetitions"] = len(runs)
    summary["seconds_all"] = [round(r["seconds"], 1) for r in runs]
    summary["load_all"] = [(r["load_before"], r["load_after"]) for r in runs]
    checks = [r["verify"]["matches"] for r in runs if "verify" in r]
    if checks:
        summary["verify"] = {**runs[0]["verify"], "matches": all(checks), "verified_runs": len(checks)}
    return summary


def _versions() -> dict[str, str]:
    from importlib.metadata import version

    names = ("pyiceberg", "pyarrow", "datafusion", "numpy")
    found = {name: version(name) for name in names}
    found["python"] = platform.python_version()
    try:
        head = subprocess.run(
            ["git", "--no-optional-locks", "rev-parse", "--short", "HEAD"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            [
                "git",
                "--no-optional-locks",
                "status",
                "--porcelain",
                "--",
                "airflow_provider_iceberg_exec/engine",
            ],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        found["commit"] = head + (" + uncommitted engine changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        found["commit"] = "unknown"
    found["engine_sha256"] = _engine_digest()
    # PyArrow's allocator when chosen by hand (else jemalloc: airflow_provider_iceberg_exec/__init__.py)
    found["arrow_default_memory_pool"] = os.environ.get("ARROW_DEFAULT_MEMORY_POOL") or "unset"
    return found


def _engine_digest() -> str:
    """A digest of the engine's sources as they are now (others may edit them between cases)."""
    digest = hashlib.sha256()
    root = os.environ.get(CODE_ROOT_ENV, REPO)
    engine = os.path.join(root, "airflow_provider_iceberg_exec", "engine")
    # every module of every layer (engine/*.py alone missed ops/, io/, ... since the engine has layers)
    for path in sorted(glob.glob(os.path.join(engine, "**", "*.py"), recursive=True)):
        digest.update(os.path.relpath(path, engine).encode())
        with open(path, "rb") as f:
            digest.update(f.read())
    return digest.hexdigest()[:12]


def _machine() -> dict[str, Any]:
    memory = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                memory = int(line.split()[1]) * 1024
    cpu = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    return {
        "nproc": os.cpu_count(),
        "memory_gib": round(memory / 2**30, 1),
        "cpu": cpu,
        "kernel": platform.release(),
    }


def _fmt_ratio(value: float | None, base: float | None) -> str:
    if not value or not base:
        return "-"
    return f"{value / base:.2f}x"


def render(report: dict[str, Any]) -> str:
    """The Markdown table of one run."""
    results = {r["case"]: r for r in report["results"]}
    py = results.get("pyiceberg", {})
    floor = results.get("floor", {})
    labels = {
        "binpack": "iceberg-exec binpack (256 MiB limit)",
        "binpack+progress": "iceberg-exec binpack, progress listener attached",
        "sort": "iceberg-exec sort (256 MiB limit)",
        "zorder": "iceberg-exec zorder(user_id, event_ts) (256 MiB limit)",
        "pyiceberg": "PyIceberg scan().to_arrow() + overwrite",
        "floor": f"floor: PyArrow read + write, {floor.get('streams', 1)} stream(s)",
        "pyiceberg-sort": "PyIceberg scan().to_arrow() + sort_by + overwrite",
        "spark": f"Spark rewrite_data_files binpack (driver {SPARK_DRIVER_MEMORY})",
        "spark-sort": f"Spark rewrite_data_files sort (driver {SPARK_DRIVER_MEMORY})",
        "datafusion": "DataFusion read_parquet + write_parquet",
    }
    lines = [
        "| case | time (s; median (runs)) | peak RSS (MiB) | CPU (s) | time vs PyIceberg | RSS vs PyIceberg "
        "| time vs floor | RSS vs floor | output files | rows + checksum | load avg |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for case in CASES:
        r = results.get(case)
        if r is None:
            continue
        rss = r["peak_rss_bytes"] / MiB if r.get("peak_rss_bytes") else None
        py_rss = py["peak_rss_bytes"] / MiB if py.get("peak_rss_bytes") else None
        floor_rss = floor["peak_rss_bytes"] / MiB if floor.get("peak_rss_bytes") else None
        check = "-"
        if "verify" in r:
            check = "match" if r["verify"]["matches"] else "**MISMATCH**"
            if "unsorted_files" in r["verify"]:
                check += ", files sorted" if not r["verify"]["unsorted_files"] else ", **files unsorted**"
        files = r["verify"]["data_files"] if "verify" in r else r.get("added_files", "-")
        lines.append(
            f"| {labels[case]} | {_times(r)} | {rss:.0f} | {r['cpu_seconds']:.1f} "
            f"| {_fmt_ratio(r['seconds'], py.get('seconds'))} | {_fmt_ratio(rss, py_rss)} "
            f"| {_fmt_ratio(r['seconds'], floor.get('seconds'))} | {_fmt_ratio(rss, floor_rss)} "
            f"| {files} | {check} | {_loads(r)} |"
        )
    return "\n".join(lines)


def _times(result: dict[str, Any]) -> str:
    every = result.get("seconds_all") or []
    if len(every) > 1:
        return f"{result['seconds']:.1f} ({', '.join(f'{t:.1f}' for t in every)})"
    return f"{result['seconds']:.1f}"


def _loads(result: dict[str, Any]) -> str:
    pairs = result.get("load_all") or [(result["load_before"], result["load_after"])]
    return ", ".join(f"{a:.1f}→{b:.1f}" for a, b in pairs)


def _targets(report: dict[str, Any]) -> list[str]:
    results = {r["case"]: r for r in report["results"]}
    verdicts = []
    if "binpack" in results and "binpack+progress" in results:
        quiet, heard = results["binpack"]["seconds"], results["binpack+progress"]["seconds"]
        events = results["binpack+progress"].get("progress_events", 0)
        verdicts.append(
            f"progress listener attached: {heard:.1f} s vs {quiet:.1f} s without ({heard / quiet:.2f}x, "
            f"{events} events)"
        )
    for case in OUR_CASES:
        if case in results:
            rss = results[case]["peak_rss_bytes"] / MiB
            ok = rss <= TARGETS["peak_rss_mib"]
            verdicts.append(
                f"{case} peak RSS {rss:.0f} MiB <= {TARGETS['peak_rss_mib']} MiB: {'met' if ok else 'MISSED'}"
            )
    if "binpack" in results and "pyiceberg" in results:
        mine, theirs = results["binpack"]["seconds"], results["pyiceberg"]["seconds"]
        verdicts.append(
            f"binpack time {mine:.1f} s <= PyIceberg {theirs:.1f} s: {'met' if mine <= theirs else 'MISSED'}"
            f" (half of PyIceberg: {'met' if mine <= theirs / 2 else 'not yet'})"
        )
    if "sort" in results and "pyiceberg-sort" in results:
        mine, theirs = results["sort"]["seconds"], results["pyiceberg-sort"]["seconds"]
        verdicts.append(
            f"sort time {mine:.1f} s <= 0.75x PyIceberg's sort {theirs:.1f} s: "
            f"{'met' if mine <= 0.75 * theirs else 'MISSED'} ({mine / theirs:.2f}x)"
        )
    if "sort" in results and "floor" in results:
        mine, floor = results["sort"]["seconds"], results["floor"]["seconds"]
        verdicts.append(
            f"sort time {mine:.1f} s <= 2x floor {floor:.1f} s: {'met' if mine <= 2 * floor else 'MISSED'}"
            f" ({mine / floor:.2f}x)"
        )
    if "zorder" in results and "sort" in results:
        mine, sort = results["zorder"]["seconds"], results["sort"]["seconds"]
        verdicts.append(
            f"zorder time {mine:.1f} s <= 1.2x sort {sort:.1f} s: {'met' if mine <= 1.2 * sort else 'MISSED'}"
        )
    return verdicts


def snapshot_code(out: str, stamp: str) -> None:
    """Others may edit the package while the cases run: every child imports this copy of it."""
    snapshot = os.path.join(out, "code", stamp)
    shutil.copytree(
        os.path.join(REPO, "airflow_provider_iceberg_exec"),
        os.path.join(snapshot, "airflow_provider_iceberg_exec"),
        ignore=shutil.ignore_patterns("__pycache__"),
    )
    os.environ[CODE_ROOT_ENV] = snapshot


def _sibling(name: str) -> Any:
    """Another script of bench/ as a module (bench/ is not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"bench_{name}", os.path.join(HERE, f"{name}.py"))
    if spec is None or spec.loader is None:
        raise RuntimeError(f"cannot load bench/{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[f"bench_{name}"] = module
    spec.loader.exec_module(module)
    return module


def draw_charts(json_path: str) -> list[str]:
    """bench/charts.py's charts beside a result JSON (every bench script calls this at its end)."""
    written: list[str] = _sibling("charts").draw_next_to(json_path)
    return written


def orchestrate(args: argparse.Namespace) -> int:
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    dataset = ensure_dataset(out, args.rows, args.files, args.seed, args.partitions)
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    if not args.no_snapshot:
        snapshot_code(out, stamp)
    report: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join([sys.executable, *sys.argv]),
        "machine": _machine(),
        "versions": _versions(),
        "dataset": {k: v for k, v in dataset.items() if k != "files_on_disk"},
        "settings": {
            "memory_limit_bytes": MEMORY_LIMIT,
            "target_file_size_bytes": TARGET_FILE_SIZE,
            "sort_order": SORT_ORDER,
        },
        "results": [],
    }
    cases = [c.strip() for c in (args.cases or ",".join(DEFAULT_CASES)).split(",") if c.strip()]
    for case in cases:
        if case not in CASES:
            raise SystemExit(f"unknown case {case!r}; choose from {', '.join(CASES)}")
    runs: list[dict[str, Any]] = []
    for repetition in range(1, args.repeat + 1):
        # Round robin, so that a change in the machine's load affects every case alike.
        for case in cases:
            print(f"running {case} ({repetition}/{args.repeat}) ...", flush=True)
            result = run_case(case, dataset, args, stamp, repetition)
            runs.append(result)
            rss = (
                f"{result['peak_rss_bytes'] / MiB:.0f} MiB"
                if result.get("peak_rss_bytes")
                else "n/a (profiled)"
            )
            check = ""
            if "verify" in result:
                check = ", checksum " + ("matches" if result["verify"]["matches"] else "MISMATCH")
            print(
                f"  {case}: {result['seconds']:.1f} s, peak RSS {rss}, "
                f"CPU {result['cpu_seconds'] or 0:.1f} s, "
                f"load {result['load_before']}->{result['load_after']}{check}",
                flush=True,
            )
    report["runs"] = runs
    report["results"] = [_summarize(case, [r for r in runs if r["case"] == case]) for case in cases]
    report["targets"] = _targets(report) if not args.profile else []
    engines = {
        r["case"]: sorted({x.get("engine_sha256", "?") for x in runs if x["case"] == r["case"]}) for r in runs
    }
    changed = sorted({r["case"] for r in runs if r.get("engine_changed_during_run")})
    if (
        any(len(v) > 1 for v in engines.values())
        or len({d for v in engines.values() for d in v}) > 1
        or changed
    ):
        report["targets"].append(
            "engine sources changed during the run: "
            + "; ".join(f"{case} {', '.join(v)}" for case, v in engines.items())
            + (f"; changed while running: {', '.join(changed)}" if changed else "")
        )
    with open(os.path.join(out, f"results-{stamp}.json"), "w") as f:
        json.dump(report, f, indent=2)
    if not args.profile:
        table = render(report)
        with open(os.path.join(out, f"results-{stamp}.md"), "w") as f:
            f.write(table + "\n\n" + "\n".join(f"- {v}" for v in report["targets"]) + "\n")
        print()
        print(table)
        print()
        print("\n".join(report["targets"]))
        draw_charts(os.path.join(out, f"results-{stamp}.json"))
    print(f"\nresults: {out}/results-{stamp}.json")
    failed = [r["case"] for r in report["results"] if "verify" in r and not r["verify"]["matches"]]
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, default=20_000_000)
    parser.add_argument("--files", type=int, default=400)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--partitions",
        type=int,
        default=0,
        help="identity-partition the table on event_date over N days, file i in day i mod N (default 0: "
        "unpartitioned); give it its own --out",
    )
    parser.add_argument(
        "--out", default=os.path.join(HERE, "out"), help="cache and results (default bench/out)"
    )
    parser.add_argument(
        "--cases",
        help=f"comma-separated, from {', '.join(CASES)} (default all; with --scale binpack,pyiceberg,floor)",
    )
    parser.add_argument(
        "--scale",
        help="comma-separated multiples of --rows/--files, e.g. 1,5,10: every case at every size, same limit "
        "(tables cached under --out/scale-<rows>-<files>; see bench/compaction_scale.py)",
    )
    parser.add_argument("--repeat", type=int, default=1, help="run every case N times, round robin")
    parser.add_argument(
        "--verify-all", action="store_true", help="verify every repetition, not just the first"
    )
    parser.add_argument("--keep", action="store_true", help="keep each run's catalog and files")
    parser.add_argument(
        "--no-snapshot",
        action="store_true",
        help="import the package from the work tree as it is when each case starts (default: a copy taken "
        "at the start, under --out/code/<stamp>)",
    )
    parser.add_argument(
        "--durable",
        action="store_true",
        help="flush the kernel's dirty pages before each case (untimed) and the case's output after it "
        "(timed, as sync_seconds): otherwise a small run's write-back happens after its timing and a large "
        "run's during it",
    )
    parser.add_argument("--profile", action="store_true", help="run each case under py-spy (no RSS figures)")
    parser.add_argument("--py-spy", default=shutil.which("py-spy") or "py-spy", help="the py-spy executable")
    # Child-process arguments.
    parser.add_argument("--result", help=argparse.SUPPRESS)
    parser.add_argument("--run-dir", help=argparse.SUPPRESS)
    parser.add_argument("--metadata", help=argparse.SUPPRESS)
    parser.add_argument("--check-sorted", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("action", nargs="?", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.action is None and args.scale:
        return int(_sibling("compaction_scale").orchestrate(sys.modules[__name__], args))
    if args.action is None:
        return orchestrate(args)
    result = worker(args)
    with open(args.result, "w") as f:
        json.dump(result, f, indent=2, default=str)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
