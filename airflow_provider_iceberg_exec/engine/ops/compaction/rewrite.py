"""Rewriting one file group in a bounded execution: live rows in, sorted when asked, new files out."""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from airflow_provider_iceberg_exec.engine.config import CompactionOptions, ResourceLimits, Strategy
from airflow_provider_iceberg_exec.engine.contracts import REWRITE_RESULT, RewriteResult
from airflow_provider_iceberg_exec.engine.deletes.apply import DeleteStats, iter_live_group_batches
from airflow_provider_iceberg_exec.engine.documents import (
    applied_deletes_of,
    check_base_snapshot,
    check_rewrite_task,
)
from airflow_provider_iceberg_exec.engine.documents.packed import data_files_of
from airflow_provider_iceberg_exec.engine.errors import ConfigurationError, IcebergExecError
from airflow_provider_iceberg_exec.engine.io.lineage import with_lineage_columns
from airflow_provider_iceberg_exec.engine.io.merge_sort import SortStats
from airflow_provider_iceberg_exec.engine.io.read import (
    READ_AHEAD_BATCHES,
    READ_AHEAD_BYTES,
    coalesce_batches,
    read_ahead,
)
from airflow_provider_iceberg_exec.engine.io.session import resource_error, track_resources
from airflow_provider_iceberg_exec.engine.io.sorting import (
    AnyKey,
    ZOrder,
    match_table_sort_order,
    parse_sort_order,
    sorted_lanes_for_output,
)
from airflow_provider_iceberg_exec.engine.io.write import PartitionSplitter, RollingDataFileWriter
from airflow_provider_iceberg_exec.engine.meta.datafile_json import data_file_to_json
from airflow_provider_iceberg_exec.engine.meta.task_files import FileCounts, TaskFiles
from airflow_provider_iceberg_exec.engine.ops.compaction.common import strategy_of
from airflow_provider_iceberg_exec.engine.progress import Tracker, track

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.manifest import DataFile
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table
    from pyiceberg.table.metadata import TableMetadata

    from airflow_provider_iceberg_exec.engine.meta.scan import ScannedFile

log = logging.getLogger(__name__)

_Lane = TypeVar("_Lane")


def execute_rewrite_task(table: Table, task: Mapping[str, Any], limits: ResourceLimits) -> RewriteResult:
    """Rewrite one file group in a bounded execution and return its result document.

    Rows are streamed: read file by file, sorted by DataFusion (spilling) when the strategy is ``sort`` or
    the rows must move to another partition spec, and written as new data files. A binpack group large
    enough for several output files per core is split into lanes (:func:`_lanes`), each read and written
    on its own threads. On any failure every file this task wrote, in every lane, is removed.

    :returns: ``iceberg-exec/rewrite-result@1`` with the new files as DataFile JSON.
    :raises ConfigurationError: for a malformed task or one that does not fit the table.
    :raises DataFileReadError: when an input file is missing or corrupt.
    :raises ResourceLimitError: when the memory pool or the spill disk runs out.
    """
    check_rewrite_task(task)
    metadata = table.metadata
    check_base_snapshot(metadata, task["base_snapshot_id"])
    schema, specs = metadata.schema(), metadata.specs()
    layout = _OutputLayout.of(task, metadata)
    entries = task["data_files"]
    # Decoded as they are read, without column metrics: a group of many files holds only its entries.
    inputs = TaskFiles(entries, specs, schema, metrics=False)
    group_id = str(task["group_id"])
    lanes = _lanes(inputs, layout, limits)
    expected_rows = sum(lane.records for lane in lanes)
    rewritten_bytes = sum(lane.stored_bytes for lane in lanes)
    sort_lanes = (
        _sort_lanes(limits, rewritten_bytes, layout.target_file_size_bytes) if layout.needs_order else 1
    )
    with (
        track("compaction", files_total=len(inputs), bytes_total=rewritten_bytes, label=group_id) as progress,
        track_resources(limits) as (spill_dir, stats),
    ):
        runs = [
            _LaneRun(
                lane.files,
                lane.records,
                lane.equality,
                _writer(table, layout, limits, group_id),
                f"{group_id} lane {number} of {len(lanes)}" if len(lanes) > 1 else group_id,
                # A sorted group reads in one lane and merges and writes in several: a writer each.
                [_writer(table, layout, limits, group_id) for _ in range(sort_lanes - 1)],
            )
            for number, lane in enumerate(lanes, start=1)
        ]

        def rewrite(run: _LaneRun, stop: threading.Event | None) -> list[DataFile]:
            return _rewrite_lane(table, run, layout, schema, limits, spill_dir, progress, stop, len(runs))

        try:
            added = _run_lanes(runs, rewrite)
        except BaseException as err:
            # Every writer is aborted, even when removing another one's files failed.
            with contextlib.ExitStack() as aborts:
                for run in runs:
                    for writer in run.writers:
                        aborts.callback(writer.abort)
            mapped = resource_error(err)
            if mapped is err:
                raise
            raise mapped from err
    deletes = DeleteStats(
        rows_read=sum(run.deletes.rows_read for run in runs),
        position_deleted=sum(run.deletes.position_deleted for run in runs),
        equality_deleted=sum(run.deletes.equality_deleted for run in runs),
    )
    rows_written = sum(writer.rows_written for run in runs for writer in run.writers)
    added_bytes = sum(f.file_size_in_bytes for f in added)
    # The sampler walks the spill directory every 0.1 s: a short sort's runs can come and go between two
    # walks, so the sort's own count of the runs it spilled counts too.
    spilled = max(stats.spilled_bytes, sum(run.sort.spilled_bytes for run in runs if run.sort is not None))
    log.info(
        "group %s: %d file(s), %d bytes -> %d file(s), %d bytes, %d rows in %d lane(s)%s; "
        "peak RSS %d MiB, spilled %d MiB",
        group_id,
        len(inputs),
        rewritten_bytes,
        len(added),
        added_bytes,
        rows_written,
        len(runs),
        "".join(
            f", sorted in {s.runs} run(s) merged in {s.lanes} lane(s) after {s.merge_passes} extra pass(es) "
            f"over {s.remerged_bytes >> 20} MiB"
            for s in (run.sort for run in runs if run.sort is not None)
        ),
        stats.peak_rss_bytes >> 20,
        spilled >> 20,
    )
    return RewriteResult(
        schema=REWRITE_RESULT,
        table=task["table"],
        branch=task.get("branch", "main"),
        group_id=group_id,
        commit_batch=task.get("commit_batch", 0),
        base_snapshot_id=task["base_snapshot_id"],
        options=task.get("options", {}),
        rewritten_data_files=data_files_of(entries),  # type: ignore[typeddict-item]
        added_data_files=[data_file_to_json(f, layout.spec, schema) for f in added],
        applied_deletes=_applied_deletes(entries),
        rewritten_bytes_count=rewritten_bytes,
        added_bytes_count=added_bytes,
        rewritten_records=expected_rows,
        added_records=rows_written,
        deleted_records=deletes.rows_deleted,
        position_deleted_records=deletes.position_deleted,
        equality_deleted_records=deletes.equality_deleted,
        peak_rss_bytes=stats.peak_rss_bytes,
        spilled_bytes=spilled,
        elapsed_seconds=round(stats.elapsed_seconds, 3),
    )


def _applied_deletes(entries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A result's ``applied_deletes``: the files without deletes share one value per data sequence number
    (a group of 500,000 small files held about 250 bytes a file in these copies)."""
    shared: dict[int, dict[str, Any]] = {}
    applied: dict[str, Any] = {}
    for entry in entries:
        value = applied_deletes_of(entry)
        if not value["delete-files"]:
            value = shared.setdefault(value["data-sequence-number"], value)
        applied[str(entry["data-file"]["file-path"])] = value
    return applied


@dataclass(frozen=True)
class _OutputLayout:
    """How a task's output is laid out: its spec, target size, and the order its rows are written in."""

    spec: PartitionSpec
    target_file_size_bytes: int
    keys: tuple[AnyKey, ...]
    #: sort the rows before writing: a ``sort`` strategy, or rows moving to another partitioned spec
    needs_order: bool
    #: the sort order id the files are stamped with; ``None`` for binpack
    sort_order_id: int | None
    #: v3: every row keeps its ``_row_id`` and ``_last_updated_sequence_number``, written explicitly
    row_lineage: bool = False

    @classmethod
    def of(cls, task: Mapping[str, Any], metadata: TableMetadata) -> _OutputLayout:
        specs, schema = metadata.specs(), metadata.schema()
        output_spec_id = int(task["output_spec_id"])
        if output_spec_id not in specs:
            raise ConfigurationError(
                f"task output spec {output_spec_id} is not a partition spec of the table"
            )
        spec = specs[output_spec_id]
        strategy = strategy_of(str(task.get("strategy", "binpack")))
        options = CompactionOptions.from_options(task.get("options"))
        keys = parse_sort_order(task["sort_order"], schema) if task.get("sort_order") else ()
        keys = tuple(
            k.with_options(options.var_length_contribution, options.max_output_size)
            if isinstance(k, ZOrder)
            else k
            for k in keys
        )
        # Rows moving to another spec are clustered by their new partition; an unpartitioned output has one.
        needs_order = strategy is Strategy.SORT or (
            bool(task.get("needs_repartition")) and not spec.is_unpartitioned()
        )
        sort_order_id = None
        if strategy is Strategy.SORT:
            # TableMetadata has no sort_orders_by_id(): build the id -> order map from its list.
            orders = {order.order_id: order for order in metadata.sort_orders}
            sort_order_id = match_table_sort_order(keys, orders, schema)
            if sort_order_id is None and any(isinstance(k, ZOrder) for k in keys):
                sort_order_id = 0  # Spark stamps a z-ordered rewrite unsorted
            elif sort_order_id is None:
                log.warning(
                    "sort order %r is not one of the table's orders: files are stamped unsorted",
                    task["sort_order"],
                )
                sort_order_id = 0
        target = options.target_file_size_bytes
        return cls(spec, target, keys, needs_order, sort_order_id, metadata.format_version >= 3)


def _writer(
    table: Table,
    layout: _OutputLayout,
    limits: ResourceLimits,
    group_id: str,
) -> RollingDataFileWriter:
    from pyiceberg.table.locations import load_location_provider

    metadata = table.metadata
    return RollingDataFileWriter(
        io=table.io,
        location_provider=load_location_provider(metadata.location, metadata.properties),
        # v3: Java's rewrite write schema, the table's with both lineage columns.
        schema=with_lineage_columns(metadata.schema()) if layout.row_lineage else metadata.schema(),
        spec=layout.spec,
        properties=metadata.properties,
        target_file_size_bytes=layout.target_file_size_bytes,
        buffer_bytes=limits.writer_buffer_bytes,
        sort_order_id=layout.sort_order_id,
        file_prefix=group_id,
    )


def _write_rows(
    live: Iterator[pa.RecordBatch],
    run: _LaneRun,
    layout: _OutputLayout,
    schema: Schema,
    limits: ResourceLimits,
    spill_dir: str,
    progress: Tracker,
    stop: threading.Event | None = None,
) -> list[DataFile]:
    """Sort the live rows when the layout needs it, split them by output partition, write, close.

    A sort merges and writes its key ranges in a lane per writer (:func:`_write_sorted_lanes`).

    :param stop: set when another lane of the group failed: stop writing (the group is aborted).
    """
    if layout.needs_order:  # a sorted group is never split by its files: no other lane to stop it
        return _write_sorted_lanes(live, run, layout, schema, limits, spill_dir, progress)
    return _write_stream(live, run.writer, layout, schema, progress, stop)


def _write_stream(
    batches: Iterator[pa.RecordBatch],
    writer: RollingDataFileWriter,
    layout: _OutputLayout,
    schema: Schema,
    progress: Tracker,
    stop: threading.Event | None,
) -> list[DataFile]:
    """Write ``batches`` split by output partition with ``writer``, and close it."""
    splitter = PartitionSplitter(layout.spec, schema)
    for batch in batches:
        if stop is not None and stop.is_set():
            raise _Stopped
        for partition_key, rows in splitter.split(batch):
            writer.write(partition_key, rows)
        progress.advance(rows=batch.num_rows)
    return writer.close()


def _write_sorted_lanes(
    live: Iterator[pa.RecordBatch],
    run: _LaneRun,
    layout: _OutputLayout,
    schema: Schema,
    limits: ResourceLimits,
    spill_dir: str,
    progress: Tracker,
) -> list[DataFile]:
    """Sort the live rows into key ranges and merge and write each lane of ranges with a writer of its
    own, on a thread of its own: every file is sorted and the lanes' files cover disjoint key ranges, as
    Spark's range-partitioned sort writes them. Files in key order."""
    run.sort = SortStats()
    with sorted_lanes_for_output(
        live,
        layout.keys,
        layout.spec,
        schema,
        limits,
        spill_dir,
        lanes=len(run.writers),
        stats=run.sort,
        expected_rows=run.records,  # before deletes: at most what comes
    ) as streams:
        lanes = [_SortLane(stream, writer) for stream, writer in zip(streams, run.writers, strict=False)]

        def write(lane: _SortLane, stop: threading.Event | None) -> list[DataFile]:
            return _write_stream(lane.rows, lane.writer, layout, schema, progress, stop)

        added = _run_lanes(lanes, write)
    # writers left without a key range wrote nothing
    for writer in run.writers[len(lanes) :]:
        added.extend(writer.close())
    return added


@dataclass
class _SortLane:
    rows: Iterator[pa.RecordBatch]
    writer: RollingDataFileWriter


#: limit per lane of a sort's merge: a lane held about 150 MiB of RSS beyond the pool (its DataFusion
#: merge, writer and threads: a 4M-row sort at a 128 MiB limit peaked at 361 MiB in one lane, 511 in two)
_SORT_LANE_LIMIT_BYTES = 128 << 20


def _sort_lanes(limits: ResourceLimits, stored_bytes: int, target_file_size_bytes: int) -> int:
    """Lanes a sorted group merges and writes in: one per writer the limit holds at once
    (:attr:`ResourceLimits.file_workers`, the bound binpack's lanes use) and per 128 MiB of the limit, so
    that the lanes stay within the limit plus the engine's overhead, and no more than the group holds
    target sizes: each lane writes its own key range into files of its own, so a lane must be worth a full
    file (a day's 29 MB group of a partitioned table was written as two files of 15 MB).

    >>> limits = [ResourceLimits(memory_limit_bytes=m << 20, target_partitions=2) for m in (64, 128, 256)]
    >>> [_sort_lanes(each, 10 << 30, 128 << 20) for each in limits]
    [1, 1, 2]
    >>> [_sort_lanes(limits[2], size << 20, 128 << 20) for size in (29, 255, 256)]
    [1, 1, 2]
    """
    by_memory = max(1, min(limits.file_workers, limits.memory_limit_bytes // _SORT_LANE_LIMIT_BYTES))
    return max(1, min(by_memory, stored_bytes // max(1, target_file_size_bytes)))


def _check_rows_conserved(group_id: str, expected_rows: int, deletes: DeleteStats, written: int) -> None:
    """Every input row was read, and every row the deletes did not remove was written."""
    live_rows = deletes.rows_read - deletes.rows_deleted
    if deletes.rows_read != expected_rows or written != live_rows:
        raise IcebergExecError(
            f"group {group_id} read {deletes.rows_read} of {expected_rows} rows, deleted "
            f"{deletes.rows_deleted}, but wrote {written}; nothing committed"
        )


# -- lanes: one binpack group on several cores ------------------------------------------------------------


class _Stopped(Exception):
    """A lane stopped because another lane of its group failed (that lane's error is the one raised)."""


@dataclass
class _LaneRun:
    """One lane of a group: its input files (contiguous, in file order), its writer, its delete counts."""

    files: Sequence[ScannedFile]
    #: the rows the lane's files hold before deletes
    records: int
    #: whether an equality delete applies to any of the lane's files
    equality: bool
    writer: RollingDataFileWriter
    #: how the lane is named in logs and errors: the group id, and the lane when there are several
    label: str
    #: a sorted group's further writers, one per further lane of its merge
    sort_writers: list[RollingDataFileWriter] = field(default_factory=list)
    deletes: DeleteStats = field(default_factory=DeleteStats)
    #: what the sort did, when the lane's rows were sorted
    sort: SortStats | None = None

    @property
    def writers(self) -> list[RollingDataFileWriter]:
        return [self.writer, *self.sort_writers]


@dataclass(frozen=True)
class _LaneInputs:
    """A lane's input files (a contiguous run of the group's), their rows and their stored bytes, and
    whether an equality delete applies to any of them."""

    files: Sequence[ScannedFile]
    records: int
    stored_bytes: int
    equality: bool


def _lanes(inputs: TaskFiles, layout: _OutputLayout, limits: ResourceLimits) -> list[_LaneInputs]:
    """The group's inputs cut into lanes, each read and written on its own threads (one lane: as they are),
    in one pass over their entries' counts (no input is decoded; each lane is a slice of the entries).

    The engine decides, not the user: a lane is one more writer (a row-group buffer) and one more
    reader, so the count is :attr:`ResourceLimits.file_workers` (the cores the execution is given, as
    far as the memory limit holds four writer buffers per worker), the same bound the copy-on-write
    rewrite uses. Only binpack groups are split by their input files: a sorted group reads as one
    stream and merges and writes its key ranges in lanes of its own (:func:`_write_sorted_lanes`).
    Groups with equality deletes keep one lane: their matches come from one bounded join over all the
    group's files (:func:`.deletes.matches.equality_matches`, a quarter of the memory limit); a join per
    lane would read every delete file again and hold that share once per lane.

    Each lane ends with one file under the target size, so a lane must be worth at least one full file:
    a group is split only into as many lanes as it holds target sizes of live bytes, counted low (a data
    file's position deletes and deletion vectors counted as if they all applied to it), and each lane,
    a contiguous run of files in file order cut as evenly by those bytes as file boundaries allow, must
    hold one target size itself.
    """
    records: list[int] = []
    stored: list[int] = []
    live: list[int] = []
    equality = False
    for counts in inputs.counts():
        records.append(counts.record_count)
        stored.append(counts.file_size_in_bytes)
        live.append(_live_bytes_at_least(counts))
        equality = equality or counts.has_equality_deletes

    def lane(a: int, b: int) -> _LaneInputs:
        return _LaneInputs(inputs[a:b], sum(records[a:b]), sum(stored[a:b]), equality)

    count = limits.file_workers
    if count < 2 or len(inputs) < 2 or layout.needs_order or equality:
        return [lane(0, len(inputs))]
    target = max(1, layout.target_file_size_bytes)
    count = min(count, sum(live) // target, len(inputs))
    while count >= 2:
        bounds = _even_cuts(live, count)
        if all(sum(live[a:b]) >= target for a, b in itertools.pairwise(bounds)):
            return [lane(a, b) for a, b in itertools.pairwise(bounds)]
        count -= 1
    return [lane(0, len(inputs))]


def _live_bytes_at_least(counts: FileCounts) -> int:
    """A lower bound of the bytes of a file's live rows: its size less the share of its rows that its
    position deletes and deletion vectors could delete (a delete file may hold other files' positions)."""
    rows, deleted = counts.record_count, counts.delete_records
    if rows <= 0 or deleted >= rows:
        return 0
    return counts.file_size_in_bytes * (rows - deleted) // rows


def _even_cuts(weights: Sequence[int], count: int) -> list[int]:
    """Boundaries ``0 = b0 < b1 < ... < b_count = len(weights)`` that cut ``weights`` into ``count``
    contiguous runs as near equal in sum as the boundaries allow.

    >>> _even_cuts([5, 5, 5, 5], 2), _even_cuts([9, 1, 1, 1], 2), _even_cuts([1, 1, 1], 3)
    ([0, 2, 4], [0, 1, 4], [0, 1, 2, 3])
    """
    sums = [0, *itertools.accumulate(weights)]
    total, n = sums[-1], len(weights)
    bounds = [0]
    for k in range(1, count):
        goal = total * k / count
        # leave at least one file for each lane still to come
        candidates = range(bounds[-1] + 1, n - (count - k) + 1)
        bounds.append(min(candidates, key=lambda b: abs(sums[b] - goal)))
    bounds.append(n)
    return bounds


def _rewrite_lane(
    table: Table,
    run: _LaneRun,
    layout: _OutputLayout,
    schema: Schema,
    limits: ResourceLimits,
    spill_dir: str,
    progress: Tracker,
    stop: threading.Event | None,
    lanes: int,
) -> list[DataFile]:
    """Read one lane's live rows (on a read-ahead thread) and write them with its writer; check them.

    Each lane holds a whole writer buffer (``limits.writer_buffer_bytes``; ``file_workers`` keeps four
    of them of the limit per lane) and its share of the read-ahead lead. Measured the other way round
    (docs/benchmarks.md, "Binpack on both cores"): half-size row groups per lane took 50 % more CPU,
    wrote 8 files instead of 6 and saved no memory; halving the lead saved about 20 MiB of peak RSS at
    no measured cost.
    """
    # Every delete file that applies is applied: the rewrite keeps exactly the live rows. They are
    # read on a second thread while this one writes (decoding and encoding both release the GIL).
    live = read_ahead(
        coalesce_batches(
            iter_live_group_batches(
                table.io,
                table.metadata,
                run.files,
                limits=limits,
                spill_dir=spill_dir,
                stats=run.deletes,
                progress=progress,
                row_lineage=layout.row_lineage,
                equality_deletes=run.equality,
            ),
            limits.batch_size,
            # A joined batch stays well below a file: output files roll where they did unjoined.
            max_bytes=min(READ_AHEAD_BYTES // 4, max(1, layout.target_file_size_bytes // 4)),
        ),
        depth=READ_AHEAD_BATCHES,
        max_bytes=_lead_bytes(layout, limits, lanes),
    )
    try:
        added = _write_rows(live, run, layout, schema, limits, spill_dir, progress, stop)
    finally:
        live.close()
    _check_rows_conserved(
        run.label, run.records, run.deletes, sum(writer.rows_written for writer in run.writers)
    )
    return added


def _lead_bytes(layout: _OutputLayout, limits: ResourceLimits, lanes: int) -> int:
    """How far a lane's reader may be ahead of its writer, in decoded bytes: the lanes share the default
    lead, except that a lone binpack lane (a small group, or one with equality deletes) holds a row group
    of its writer, so that reading goes on while it encodes one: nothing else runs then (with half a row
    group, merge-on-read at a 256 MiB limit took 7.0-7.3 s against 5.0-6.0 s). A sort takes its rows in
    runs of a sixteenth of the limit and keeps the default (its peak RSS is the closer to its bound)."""
    if lanes == 1 and not layout.needs_order:
        return max(READ_AHEAD_BYTES, limits.writer_buffer_bytes)
    return READ_AHEAD_BYTES // lanes


def _run_lanes(
    runs: Sequence[_Lane], rewrite: Callable[[_Lane, threading.Event | None], list[DataFile]]
) -> list[DataFile]:
    """Run ``rewrite`` over every lane at once (one lane: on this thread); the files in lane order.

    The first lane to fail stops the others (they check between batches), and its error is raised once
    every lane has returned, so that the caller aborts writers no thread still writes to.
    """
    from concurrent.futures import ThreadPoolExecutor, wait

    if len(runs) <= 1:
        return [data_file for run in runs for data_file in rewrite(run, None)]
    stop = threading.Event()
    lock = threading.Lock()
    failures: list[BaseException] = []

    def lane(run: _Lane) -> list[DataFile]:
        try:
            return rewrite(run, stop)
        except _Stopped:
            raise
        except BaseException as err:
            with lock:
                failures.append(err)
            stop.set()
            raise

    pool = ThreadPoolExecutor(max_workers=len(runs), thread_name_prefix="iceberg-exec-lane")
    try:
        futures = [pool.submit(lane, run) for run in runs]
        wait(futures)
    except BaseException:  # interrupted while waiting: stop the lanes before the caller aborts
        stop.set()
        raise
    finally:
        pool.shutdown(wait=True)
    if failures:
        raise failures[0]
    return [data_file for future in futures for data_file in future.result()]
