"""An external merge sort under the memory limit: sorted runs by PyArrow, merged by DataFusion.

Rows come in batches. Every :attr:`MergePlan.run_bytes` of them (a sixteenth of the limit) are sorted in
memory by PyArrow (``sort_indices`` and ``take``, which release the GIL) and written as one run file
(Arrow IPC, uncompressed) into the spill directory. Two runs are sorted at once, each on a thread of its own,
while the caller's thread collects the next from the input (read ahead on another thread): the runs are
small enough to be sorted in the CPU's caches. DataFusion then merges the sorted runs: a
SortPreservingMerge over scans declared sorted, so it neither sorts nor spills itself, and each input
holds one batch of its run at a time. At most :attr:`MergePlan.fan_in` runs are merged at once; with
more, groups of them are first merged into longer runs (one more pass each time). Rows that fit one run
never touch the disk.

Both sides order rows the same way: DataFusion compares floating-point values by their total order
(``-NaN < -inf < ... < -0.0 < +0.0 < ... < +inf < +NaN``), so PyArrow sorts a floating-point key by an
integer that orders as that total order does (:func:`_sort_images`); every other key type (whole numbers,
decimals, dates, timestamps, booleans, strings and binaries by their bytes) compares the same in both.
Equal keys keep no particular order (the sort is not stable).

Before this, DataFusion's own external sort took the staged rows: in batches small enough to keep its
merge of spill files (every one open at once, their read buffers outside the memory pool) under the
limit, mostly on one core (docs/benchmarks.md, "Sort").
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import os
import shutil
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.io.read import read_ahead
from airflow_provider_iceberg_exec.engine.io.session import build_session

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["MergePlan", "SortColumn", "external_sort", "merge_plan"]

log = logging.getLogger(__name__)

#: a sort column: (name, ascending, nulls_first)
SortColumn = tuple[str, bool, bool]

#: compression of the run files' buffers: none, as DataFusion's own spill files (LZ4: 4M rows 0.8 s CPU more)
_RUN_COMPRESSION: str | None = None
#: what one input of a merge holds at most, for the fan-in: a compressed and a decoded batch, a cursor
_MERGE_INPUT_BYTES = 1 << 20
_MIN_FAN_IN = 2
_MAX_FAN_IN = 256
#: runs sorted and written at once, each on its own thread (beside the thread that reads the input)
_SORTERS = 2
#: bytes of each batch of a run file: DataFusion's merge of Arrow files held about 30 MiB more per input
#: with batches of 8192 rows (of 80 bytes) than with 1024-row ones
_MERGE_BATCH_BYTES = 128 << 10
#: bytes of each batch the merge hands on (at most ``limits.batch_size`` rows)
_OUTPUT_BATCH_BYTES = 1 << 20
_MIN_BATCH_ROWS = 64
#: a run is a sixteenth of the limit, within these bounds: a small run is sorted and taken from in the
#: CPU's caches (2M rows: sort + take 0.9 s CPU in 64 MiB runs, 0.4 s in 16 MiB ones), and five of them
#: are held at once (one collected, two sorted and their sorted copies)
_RUN_SHARE = 16
_MIN_RUN_BYTES = 1 << 20
_MAX_RUN_BYTES = 32 << 20


@dataclass(frozen=True)
class MergePlan:
    """How an external sort splits its budget.

    :param run_bytes: Arrow bytes of input sorted in memory at a time (one run).
    :param fan_in: runs one merge reads at once.
    """

    run_bytes: int
    fan_in: int


def merge_plan(limits: ResourceLimits) -> MergePlan:
    """The plan for ``limits``: runs of a sixteenth of the limit (at most 32 MiB), and as many merge inputs
    as half the limit holds.

    >>> from airflow_provider_iceberg_exec.engine.config import ResourceLimits
    >>> merge_plan(ResourceLimits(memory_limit_bytes=256 << 20))
    MergePlan(run_bytes=16777216, fan_in=128)
    >>> merge_plan(ResourceLimits(memory_limit_bytes=64 << 20))
    MergePlan(run_bytes=4194304, fan_in=32)
    """
    budget = limits.memory_limit_bytes
    fan_in = max(_MIN_FAN_IN, min(_MAX_FAN_IN, budget // 2 // _MERGE_INPUT_BYTES))
    run_bytes = max(_MIN_RUN_BYTES, min(_MAX_RUN_BYTES, budget // _RUN_SHARE))
    return MergePlan(run_bytes=run_bytes, fan_in=fan_in)


def external_sort(
    batches: Iterator[pa.RecordBatch],
    order: Sequence[SortColumn],
    limits: ResourceLimits,
    spill_dir: str,
    *,
    prepare: Callable[[list[pa.RecordBatch]], pa.Table],
    finish: Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]],
    plan: MergePlan | None = None,
) -> Iterator[pa.RecordBatch]:
    """Sort ``batches`` by ``order`` within ``limits``; spill files go under ``spill_dir`` and are removed.

    :param prepare: turns one run's input batches into the table to sort (every run the same schema,
        holding the columns of ``order``); runs on the sorting threads, two at once.
    :param finish: turns the sorted stream of those tables' rows into the output; runs on a thread of its
        own, beside the caller that consumes the output.
    :param plan: the budget (default :func:`merge_plan` of ``limits``).
    """
    plan = plan or merge_plan(limits)
    directory = os.path.join(spill_dir, "sort-runs")
    runs: list[str] = []
    row_bytes = 0  # of the first run, for the merge's batches
    sorting: collections.deque[Future[str]] = collections.deque()
    sorters = ThreadPoolExecutor(max_workers=_SORTERS, thread_name_prefix="iceberg-exec-sort")
    try:
        for raw, complete in _collect(batches, plan.run_bytes):
            if not sorting and not runs and not complete:  # the only run: no file, no merge
                table = _sorted_run(raw, prepare, order)
                rows = max(_MIN_BATCH_ROWS, min(limits.batch_size, _OUTPUT_BATCH_BYTES // _row_bytes(table)))
                yield from _finished(finish, iter(table.to_batches(max_chunksize=rows)))
                return
            while len(sorting) >= _SORTERS:  # the input waits (its read-ahead fills) while both sort
                runs.append(sorting.popleft().result())
            number = len(runs) + len(sorting)
            row_bytes = row_bytes or max(
                1, sum(b.nbytes for b in raw) // max(1, sum(b.num_rows for b in raw))
            )
            sorting.append(sorters.submit(_sort_and_spill, raw, prepare, order, directory, number))
            del raw
        while sorting:
            runs.append(sorting.popleft().result())
        if not runs:
            return
        passes = 0
        while len(runs) > plan.fan_in:
            passes += 1
            runs = _merge_pass(runs, order, limits, spill_dir, directory, plan, passes, row_bytes)
        log.debug("merging %d sorted runs after %d extra passes", len(runs), passes)
        yield from _finished(finish, _merged(runs, order, limits, spill_dir, row_bytes))
    finally:
        for future in sorting:
            future.cancel()
        sorters.shutdown(wait=True)  # a run still being written is finished before its directory goes
        shutil.rmtree(directory, ignore_errors=True)


def _sorted_run(
    raw: list[pa.RecordBatch],
    prepare: Callable[[list[pa.RecordBatch]], pa.Table],
    order: Sequence[SortColumn],
) -> pa.Table:
    """One run's batches prepared and sorted; ``raw`` is emptied (its batches are freed with the sort)."""
    prepared = prepare(raw)
    raw.clear()
    table = _sort_table(prepared, order)
    del prepared
    _release_memory()
    return table


def _sort_and_spill(
    raw: list[pa.RecordBatch],
    prepare: Callable[[list[pa.RecordBatch]], pa.Table],
    order: Sequence[SortColumn],
    directory: str,
    number: int,
) -> str:
    """One run sorted and written as a run file (on a sorting thread); its path."""
    table = _sorted_run(raw, prepare, order)
    path = _write_run(table, directory, number)
    del table
    _release_memory()
    return path


def _finished(
    finish: Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]], rows: Iterator[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    """``finish(rows)`` produced on its own thread, a few batches ahead of the caller."""
    with closing(read_ahead(finish(rows), depth=4, max_bytes=16 << 20)) as out:
        yield from out


def _collect(
    batches: Iterator[pa.RecordBatch], run_bytes: int
) -> Iterator[tuple[list[pa.RecordBatch], bool]]:
    """The input in runs of about ``run_bytes``, each with whether it is complete (not the input's end)."""
    run: list[pa.RecordBatch] = []
    size = 0
    for batch in batches:
        if not batch.num_rows:
            continue
        run.append(batch)
        size += batch.nbytes
        if size >= run_bytes:
            yield run, True
            run, size = [], 0
    if run:
        yield run, False


def _release_memory() -> None:
    """Hand freed buffers back: PyArrow's allocator keeps them cached otherwise."""
    import pyarrow as pa

    pa.default_memory_pool().release_unused()


def _sort_table(table: pa.Table, order: Sequence[SortColumn]) -> pa.Table:
    """``table`` sorted by ``order``, as DataFusion orders rows (see :func:`_sort_images`)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    images: list[pa.Array] = []
    sort_keys: list[tuple[str, str]] = []
    for name, ascending, nulls_first in order:
        column = table.column(name).combine_chunks()
        if column.null_count:
            # Each key's own null placement as a flag sorted first (False before True): PyArrow before 24
            # takes one null placement for all the keys of a sort.
            images.append(pc.is_valid(column) if nulls_first else pc.is_null(column))
            sort_keys.append((f"k{len(sort_keys)}", "ascending"))
        for image in _sort_images(column):
            images.append(image)
            sort_keys.append((f"k{len(sort_keys)}", "ascending" if ascending else "descending"))
    keys = pa.table(images, names=[key for key, _dir in sort_keys])
    del images
    indices = pc.sort_indices(keys, sort_keys=sort_keys)
    del keys
    # Column by column: taking from a chunked table joins its chunks first, a whole copy more at once.
    return pa.Table.from_arrays(
        [table.column(i).take(indices).combine_chunks() for i in range(table.num_columns)],
        schema=table.schema,
    )


def _sort_images(column: pa.Array) -> list[pa.Array]:
    """What PyArrow sorts for a key column, compared in turn: the column itself, or

    - for floating point, ``int64`` values that order as DataFusion orders the floats (Rust's
      ``total_cmp``: the sign bit, then the other bits flipped for negatives), where PyArrow would put
      NaN beside the nulls;
    - for ``decimal128`` / ``decimal256``, its 64-bit limbs from the most significant (signed) to the
      least (unsigned): PyArrow compares the limbs in about half the time it compares decimals (a
      z-order's key is one).

    >>> import pyarrow as pa
    >>> values = pa.array([1.5, float("nan"), None, -float("inf"), -0.0, 0.0])
    >>> pa.compute.sort_indices(_sort_images(values)[0]).to_pylist()
    [3, 4, 5, 0, 1, 2]
    """
    import numpy as np
    import pyarrow as pa

    kind = column.type
    mask = column.is_null().to_numpy(zero_copy_only=False) if column.null_count else None
    if pa.types.is_floating(kind):
        values = column.cast(pa.float64()).to_numpy(zero_copy_only=False).view(np.int64)
        ordered = values ^ ((values >> 63) & np.int64(0x7FFFFFFFFFFFFFFF))
        return [pa.array(ordered, pa.int64(), mask=mask)]
    if pa.types.is_decimal128(kind) or pa.types.is_decimal256(kind):
        count = kind.byte_width // 8
        limbs = np.frombuffer(
            column.buffers()[1],
            dtype=np.uint64,
            count=count * len(column),
            offset=column.offset * kind.byte_width,
        ).reshape(-1, count)
        top = limbs[:, count - 1].view(np.int64)
        return [
            pa.array(top, pa.int64(), mask=mask),
            *(pa.array(limbs[:, i], pa.uint64(), mask=mask) for i in range(count - 2, -1, -1)),
        ]
    return [column]


def _batch_rows(table: pa.Table) -> int:
    """Rows of about :data:`_MERGE_BATCH_BYTES` of ``table`` (at least 1024)."""
    return max(_MIN_BATCH_ROWS, _MERGE_BATCH_BYTES // _row_bytes(table))


def _row_bytes(table: pa.Table) -> int:
    return max(1, int(table.nbytes) // max(1, int(table.num_rows)))


def _run_writer(path: str, schema: pa.Schema) -> Any:
    """A run file: Arrow IPC (written and read back at memory speed, once)."""
    import pyarrow as pa

    return pa.ipc.new_file(path, schema, options=pa.ipc.IpcWriteOptions(compression=_RUN_COMPRESSION))


def _write_run(table: pa.Table, directory: str, number: int) -> str:
    """One sorted run, in batches of about :data:`_MERGE_BATCH_BYTES`: the merge reads one at a time."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"run-{number:05d}.arrow")
    with _run_writer(path, table.schema) as writer:
        writer.write_table(table, max_chunksize=_batch_rows(table))
    return path


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _merged(
    runs: Sequence[str], order: Sequence[SortColumn], limits: ResourceLimits, spill_dir: str, row_bytes: int
) -> Iterator[pa.RecordBatch]:
    """The rows of the sorted ``runs``, merged in ``order`` by DataFusion, in batches of at most
    :data:`_OUTPUT_BATCH_BYTES` (rows of ``row_bytes``)."""
    batch_rows = max(_MIN_BATCH_ROWS, min(limits.batch_size, _OUTPUT_BATCH_BYTES // max(1, row_bytes)))
    ctx = build_session(dataclasses.replace(limits, target_partitions=1, batch_size=batch_rows), spill_dir)
    # One scan per run, whole: a run split in byte ranges is two merge inputs, each with its buffers.
    ctx.sql("SET datafusion.optimizer.repartition_file_scans = false").collect()
    keys = ", ".join(
        f"{_quoted(name)} {'ASC' if asc else 'DESC'} NULLS {'FIRST' if nulls_first else 'LAST'}"
        for name, asc, nulls_first in order
    )
    for number, path in enumerate(runs):
        # Declared sorted (an Arrow file cannot be registered with an order otherwise): the plan is a
        # SortPreservingMerge over the runs' union, with no sort of its own.
        location = path.replace("'", "''")
        ctx.sql(
            f"CREATE EXTERNAL TABLE run{number} STORED AS ARROW LOCATION '{location}' WITH ORDER ({keys})"
        ).collect()
    union = " UNION ALL ".join(f"SELECT * FROM run{number}" for number in range(len(runs)))
    for batch in ctx.sql(f"SELECT * FROM ({union}) ORDER BY {keys}").execute_stream():
        yield batch.to_pyarrow()


def _merge_pass(
    runs: list[str],
    order: Sequence[SortColumn],
    limits: ResourceLimits,
    spill_dir: str,
    directory: str,
    plan: MergePlan,
    number: int,
    row_bytes: int,
) -> list[str]:
    """Merge the runs in groups of ``plan.fan_in`` into longer runs; a group of one stays as it is."""
    import pyarrow as pa

    merged: list[str] = []
    for start in range(0, len(runs), plan.fan_in):
        group = runs[start : start + plan.fan_in]
        if len(group) == 1:
            merged.extend(group)
            continue
        path = os.path.join(directory, f"pass-{number:02d}-{len(merged):05d}.arrow")
        writer = None
        try:
            merged_rows = _merged(group, order, limits, spill_dir, row_bytes)
            rows = read_ahead(merged_rows, depth=4, max_bytes=16 << 20)
            with closing(rows):
                for batch in rows:
                    if writer is None:
                        writer = _run_writer(path, batch.schema)
                    # In the runs' small batches: a merge holds a few batches of each input at once.
                    table = pa.Table.from_batches([batch])
                    writer.write_table(table, max_chunksize=_batch_rows(table))
        finally:
            if writer is not None:
                writer.close()
        for done in group:
            os.remove(done)
        merged.append(path)
    return merged
