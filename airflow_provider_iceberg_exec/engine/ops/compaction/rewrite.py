"""Rewriting one file group in a bounded execution: live rows in, sorted when asked, new files out."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_iceberg_exec.engine.config import CompactionOptions, ResourceLimits, Strategy
from airflow_provider_iceberg_exec.engine.contracts import REWRITE_RESULT, RewriteResult
from airflow_provider_iceberg_exec.engine.deletes.apply import DeleteStats, iter_live_group_batches
from airflow_provider_iceberg_exec.engine.documents import (
    applied_deletes_of,
    check_base_snapshot,
    check_rewrite_task,
)
from airflow_provider_iceberg_exec.engine.errors import ConfigurationError, IcebergExecError
from airflow_provider_iceberg_exec.engine.io.lineage import with_lineage_columns
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
    sort_for_output,
)
from airflow_provider_iceberg_exec.engine.io.write import PartitionSplitter, RollingDataFileWriter
from airflow_provider_iceberg_exec.engine.meta.datafile_json import data_file_to_json
from airflow_provider_iceberg_exec.engine.meta.task_files import scanned_from_json
from airflow_provider_iceberg_exec.engine.ops.compaction.common import strategy_of
from airflow_provider_iceberg_exec.engine.progress import Tracker, track

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.manifest import DataFile
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.table import Table
    from pyiceberg.table.metadata import TableMetadata

log = logging.getLogger(__name__)


def execute_rewrite_task(table: Table, task: Mapping[str, Any], limits: ResourceLimits) -> RewriteResult:
    """Rewrite one file group in a bounded execution and return its result document.

    Rows are streamed: read file by file, sorted by DataFusion (spilling) when the strategy is ``sort`` or
    the rows must move to another partition spec, and written as new data files. On any failure every
    file this task wrote is removed.

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
    # The rewrite reads no column metrics: skipped (most of a decoded entry, for tasks of many files).
    inputs = [scanned_from_json(e, specs, schema, metrics=False) for e in entries]
    group_id = str(task["group_id"])
    expected_rows = sum(f.data_file.record_count for f in inputs)
    deletes = DeleteStats()
    rewritten_bytes = sum(f.data_file.file_size_in_bytes for f in inputs)
    with (
        track("compaction", files_total=len(inputs), bytes_total=rewritten_bytes, label=group_id) as progress,
        track_resources(limits) as (spill_dir, stats),
    ):
        writer = _writer(table, layout, limits, group_id)
        # Every delete file that applies is applied: the rewrite keeps exactly the live rows. They are
        # read on a second thread while this one writes (decoding and encoding both release the GIL).
        live = read_ahead(
            coalesce_batches(
                iter_live_group_batches(
                    table.io,
                    metadata,
                    inputs,
                    limits=limits,
                    spill_dir=spill_dir,
                    stats=deletes,
                    progress=progress,
                    row_lineage=layout.row_lineage,
                ),
                limits.batch_size,
                # A joined batch stays well below a file: output files roll where they did unjoined.
                max_bytes=min(READ_AHEAD_BYTES // 4, max(1, layout.target_file_size_bytes // 4)),
            ),
            depth=READ_AHEAD_BATCHES,
            max_bytes=READ_AHEAD_BYTES,
        )
        try:
            added = _write_rows(live, writer, layout, schema, limits, spill_dir, progress)
            _check_rows_conserved(group_id, expected_rows, deletes, writer.rows_written)
        except BaseException as err:
            live.close()
            writer.abort()
            mapped = resource_error(err)
            if mapped is err:
                raise
            raise mapped from err
        finally:
            live.close()
    added_bytes = sum(f.file_size_in_bytes for f in added)
    log.info(
        "group %s: %d file(s), %d bytes -> %d file(s), %d bytes, %d rows; peak RSS %d MiB, spilled %d MiB",
        group_id,
        len(inputs),
        rewritten_bytes,
        len(added),
        added_bytes,
        writer.rows_written,
        stats.peak_rss_bytes >> 20,
        stats.spilled_bytes >> 20,
    )
    return RewriteResult(
        schema=REWRITE_RESULT,
        table=task["table"],
        branch=task.get("branch", "main"),
        group_id=group_id,
        commit_batch=task.get("commit_batch", 0),
        base_snapshot_id=task["base_snapshot_id"],
        options=task.get("options", {}),
        rewritten_data_files=[e["data-file"] for e in entries],
        added_data_files=[data_file_to_json(f, layout.spec, schema) for f in added],
        applied_deletes={str(e["data-file"]["file-path"]): applied_deletes_of(e) for e in entries},
        rewritten_bytes_count=rewritten_bytes,
        added_bytes_count=added_bytes,
        rewritten_records=expected_rows,
        added_records=writer.rows_written,
        deleted_records=deletes.rows_deleted,
        position_deleted_records=deletes.position_deleted,
        equality_deleted_records=deletes.equality_deleted,
        peak_rss_bytes=stats.peak_rss_bytes,
        spilled_bytes=stats.spilled_bytes,
        elapsed_seconds=round(stats.elapsed_seconds, 3),
    )


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
    table: Table, layout: _OutputLayout, limits: ResourceLimits, group_id: str
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
    writer: RollingDataFileWriter,
    layout: _OutputLayout,
    schema: Schema,
    limits: ResourceLimits,
    spill_dir: str,
    progress: Tracker,
) -> list[DataFile]:
    """Sort the live rows when the layout needs it, split them by output partition, write, close."""
    batches = live
    if layout.needs_order:
        batches = sort_for_output(batches, layout.keys, layout.spec, schema, limits, spill_dir)
    splitter = PartitionSplitter(layout.spec, schema)
    for batch in batches:
        for partition_key, run in splitter.split(batch):
            writer.write(partition_key, run)
        progress.advance(rows=batch.num_rows)
    return writer.close()


def _check_rows_conserved(group_id: str, expected_rows: int, deletes: DeleteStats, written: int) -> None:
    """Every input row was read, and every row the deletes did not remove was written."""
    live_rows = deletes.rows_read - deletes.rows_deleted
    if deletes.rows_read != expected_rows or written != live_rows:
        raise IcebergExecError(
            f"group {group_id} read {deletes.rows_read} of {expected_rows} rows, deleted "
            f"{deletes.rows_deleted}, but wrote {written}; nothing committed"
        )
