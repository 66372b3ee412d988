"""Rewriting one group of position delete files: live positions in, sorted and deduplicated, fewer out."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_provider_iceberg_exec.engine.config import PositionDeleteOptions, ResourceLimits
from airflow_provider_iceberg_exec.engine.contracts import POSITION_DELETE_RESULT, PositionDeleteResult
from airflow_provider_iceberg_exec.engine.deletes.positions import (
    iter_position_delete_rows,
)
from airflow_provider_iceberg_exec.engine.documents import check_base_snapshot, check_position_delete_task
from airflow_provider_iceberg_exec.engine.errors import DataFileCodecError, IcebergExecError
from airflow_provider_iceberg_exec.engine.io.catalog import table_name
from airflow_provider_iceberg_exec.engine.io.position_delete_writer import (
    DeleteGranularity,
    write_position_deletes,
)
from airflow_provider_iceberg_exec.engine.io.position_sort import ORD, POS, sorted_positions
from airflow_provider_iceberg_exec.engine.io.session import resource_error, track_resources
from airflow_provider_iceberg_exec.engine.io.staging import StagedParquet
from airflow_provider_iceberg_exec.engine.meta.datafile_json import data_file_from_json, data_file_to_json
from airflow_provider_iceberg_exec.engine.meta.manifests import referenced_data_file
from airflow_provider_iceberg_exec.engine.meta.scan import ScannedDelete
from airflow_provider_iceberg_exec.engine.ops.planning import write_max_file_size
from airflow_provider_iceberg_exec.engine.ops.position_deletes.dvs import rewrite_to_dvs
from airflow_provider_iceberg_exec.engine.ops.position_deletes.plan import check_format_version
from airflow_provider_iceberg_exec.engine.progress import NOT_TRACKED, Tracker, track

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table

log = logging.getLogger(__name__)


@dataclass
class _Counts:
    """What the stream of positions did: read, dropped as dangling, dropped as repeated."""

    read: int = 0
    dangling: int = 0
    duplicates: int = 0
    per_file: dict[str, int] = field(default_factory=dict)


def execute_position_delete_task(
    table: Table, task: Mapping[str, Any], limits: ResourceLimits
) -> PositionDeleteResult:
    """Rewrite one group of position delete files in a bounded execution; return its result document.

    Every position of every input is read; those naming a data file that is not live at the base, or
    one the input did not apply to (a data sequence number above the input's), are dropped as dangling.
    The rest are sorted by data file and position (:mod:`~.io.position_sort`), repeated positions are
    dropped, and the rows are written in the group's spec and partition with the table's delete
    granularity, rolled at Java's ``maxOutputFileSize``. On a v3 table the group's files become one DV
    per data file instead (:mod:`.dvs`). On any failure every file written is removed.

    :returns: ``iceberg-exec/position-delete-result@1`` with the new files as DataFile JSON.
    :raises ConfigurationError: for a malformed task or one that does not fit the table.
    :raises DataFileReadError: when an input file is missing or corrupt.
    :raises ResourceLimitError: when the memory pool or the spill disk runs out.
    """
    check_position_delete_task(task)
    metadata = table.metadata
    check_format_version(metadata, table_name(table))
    check_base_snapshot(metadata, task["base_snapshot_id"])
    schema, specs = metadata.schema(), metadata.specs()
    inputs = _inputs(task, specs, schema)
    if metadata.format_version >= 3:
        return rewrite_to_dvs(table, task, inputs, limits)  # DVs, one per data file
    spec = specs[int(task["spec_id"])]
    options = PositionDeleteOptions.from_options(task["options"])
    live = {str(e["file-path"]): int(e["data-sequence-number"]) for e in task["live_data_files"]}
    group_id = str(task["group_id"])
    counts = _Counts()
    size = sum(d.data_file.file_size_in_bytes for d in inputs)
    with (
        track(
            "position-delete rewrite", files_total=len(inputs), bytes_total=size, label=group_id
        ) as progress,
        track_resources(limits) as (spill_dir, stats),
    ):
        import pyarrow as pa
        from pyiceberg.table.locations import load_location_provider

        try:
            paths = pa.array(sorted(live), pa.string())
            stage = StagedParquet(os.path.join(spill_dir, "positions"))
            for batch in _live_positions(table, inputs, live, paths, limits, counts, progress):
                stage.write(batch)
            stage.close()
            ordered = _with_paths(sorted_positions(stage, limits, spill_dir), paths, stage.rows, counts)
            added = write_position_deletes(
                table.io,
                load_location_provider(metadata.location, metadata.properties),
                spec,
                inputs[0].data_file.partition,
                ordered,
                write_max_file_size(options.planner),
                schema=schema,
                properties=metadata.properties,
                buffer_bytes=limits.writer_buffer_bytes,
                granularity=DeleteGranularity.of_table(metadata.properties),
                file_prefix=group_id,
            )
            _check_counts(table, group_id, inputs, counts, added)
        except BaseException as err:
            mapped = resource_error(err)
            if mapped is err:
                raise
            raise mapped from err
    return _result(task, inputs, added, counts, stats, spec, schema)


def _inputs(task: Mapping[str, Any], specs: Mapping[int, Any], schema: Any) -> list[ScannedDelete]:
    """The task's delete files; all of the task's spec and partition (a group never mixes partitions)."""
    inputs = []
    for entry in task["delete_files"]:
        doc = entry["content-file"]
        if doc.get("spec-id") != task["spec_id"] or list(doc.get("partition") or []) != task["partition"]:
            raise DataFileCodecError(
                f"task {task['group_id']}: {doc['file-path']} is not in the group's spec and partition"
            )
        inputs.append(
            ScannedDelete(data_file_from_json(doc, specs, schema), int(entry["data-sequence-number"]))
        )
    return inputs


def _live_positions(
    table: Table,
    inputs: Sequence[ScannedDelete],
    live: Mapping[str, int],
    paths: pa.Array,
    limits: ResourceLimits,
    counts: _Counts,
    progress: Tracker = NOT_TRACKED,
) -> Iterator[pa.RecordBatch]:
    """Every position of the inputs that deletes a row of a live data file it applied to, as ``(ord,
    pos)``: ``ord`` the data file's index in ``paths`` (the live data files, sorted).

    A position is kept when its ``file_path`` is a live data file at the base whose data sequence number
    is not above the input's (the output carries the largest input's number: a position must not come
    to apply to a file its own input did not), and, for an input with ``referenced_data_file``, only
    for that file.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    for scanned in inputs:
        delete_file = scanned.data_file
        referenced = referenced_data_file(delete_file)
        allowed = pa.array(
            sorted(
                path
                for path, sequence in live.items()
                if sequence <= scanned.data_sequence_number and referenced in (None, path)
            ),
            pa.string(),
        )
        read = 0
        for batch in iter_position_delete_rows(table.io, delete_file, limits.batch_size):
            read += batch.num_rows
            kept = batch.filter(pc.is_in(batch.column(0), value_set=allowed))
            counts.dangling += batch.num_rows - kept.num_rows
            if kept.num_rows:
                ords = pc.index_in(kept.column(0), value_set=paths).cast(pa.int32())
                yield pa.record_batch({ORD: ords, POS: kept.column(1)})
        counts.read += read
        counts.per_file[delete_file.file_path] = read
        progress.advance(files=1, bytes_done=delete_file.file_size_in_bytes, rows=read)


def _with_paths(
    sorted_rows: Iterator[tuple[int, Any]], paths: pa.Array, staged: int, counts: _Counts
) -> Iterator[pa.RecordBatch]:
    """Sorted ``(ord, positions)`` back as ``(file_path, pos)`` rows; the repeats the sort dropped (two
    inputs deleting one row) are counted once the stream ends."""
    import numpy as np
    import pyarrow as pa

    written = 0
    for ordinal, positions in sorted_rows:
        written += len(positions)
        indices = pa.array(np.full(len(positions), ordinal, dtype=np.int32))
        yield pa.record_batch({"file_path": paths.take(indices), "pos": pa.array(positions, pa.int64())})
    counts.duplicates += staged - written


def _check_counts(
    table: Table, group_id: str, inputs: Sequence[ScannedDelete], counts: _Counts, added: Sequence[DataFile]
) -> None:
    """Every input was read in full (its record count), and every kept position was written; else the
    files written (handed to no one yet) are removed and the group fails."""
    short = [
        d.data_file.file_path
        for d in inputs
        if counts.per_file.get(d.data_file.file_path) != d.data_file.record_count
    ]
    written = sum(f.record_count for f in added)
    if short or written != counts.read - counts.dangling - counts.duplicates:
        for data_file in added:
            table.io.delete(data_file.file_path)
        raise IcebergExecError(
            f"group {group_id}: read {counts.read} positions ({', '.join(short) or 'every input in full'}), "
            f"dropped {counts.dangling} dangling and {counts.duplicates} repeated, but wrote {written}; "
            "nothing committed"
        )


def _result(
    task: Mapping[str, Any],
    inputs: Sequence[ScannedDelete],
    added: Sequence[DataFile],
    counts: _Counts,
    stats: Any,
    spec: Any,
    schema: Any,
) -> PositionDeleteResult:
    rewritten_bytes = sum(d.data_file.file_size_in_bytes for d in inputs)
    added_bytes = sum(f.file_size_in_bytes for f in added)
    log.info(
        "group %s: %d position delete file(s), %d bytes -> %d file(s), %d bytes; %d positions, %d dangling, "
        "%d repeated; peak RSS %d MiB, spilled %d MiB",
        task["group_id"],
        len(inputs),
        rewritten_bytes,
        len(added),
        added_bytes,
        counts.read,
        counts.dangling,
        counts.duplicates,
        stats.peak_rss_bytes >> 20,
        stats.spilled_bytes >> 20,
    )
    return PositionDeleteResult(
        schema=POSITION_DELETE_RESULT,
        table=task["table"],
        branch=task["branch"],
        group_id=str(task["group_id"]),
        commit_batch=int(task["commit_batch"]),
        base_snapshot_id=int(task["base_snapshot_id"]),
        options=dict(task["options"]),
        rewritten_delete_files=[dict(e) for e in task["delete_files"]],
        added_delete_files=[data_file_to_json(f, spec, schema) for f in added],
        data_sequence_number=max(d.data_sequence_number for d in inputs),
        rewritten_bytes_count=rewritten_bytes,
        added_bytes_count=added_bytes,
        rewritten_records=counts.read,
        added_records=sum(f.record_count for f in added),
        dangling_records=counts.dangling,
        duplicate_records=counts.duplicates,
        peak_rss_bytes=stats.peak_rss_bytes,
        spilled_bytes=stats.spilled_bytes,
        elapsed_seconds=round(stats.elapsed_seconds, 3),
    )
