"""Position-delete compaction on format-version 3: the group's v2 position delete files become deletion
vectors, one per data file, each folding in the data file's old DV and every position delete that applied
to it (row-level-and-v3.md trap 7: better than Spark, which loads no previous DV and may write two).

A v3 group is one ``(spec, partition)`` holding every v2 position file of it (the plan), so each data file
its positions name gets exactly one DV here. A data file gets a DV when one of the group's files applies
to it and holds a position of it; :class:`~.deletes.sink.DeletionVectorSink` merges what applied to it
at the base (old DV, all position files). The result's ``rewritten_delete_files`` are the group's files
plus what the DVs replace beyond them (old DVs, file-scoped files), each with its base sequence number;
the new DVs take the commit's sequence number. Positions naming no live data file the file applied to
are dangling and dropped, as Spark's left-semi join drops them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow_provider_iceberg_exec.engine.commit.change import file_identity
from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.contracts import POSITION_DELETE_RESULT, PositionDeleteResult
from airflow_provider_iceberg_exec.engine.deletes.positions import iter_position_delete_rows
from airflow_provider_iceberg_exec.engine.deletes.sink import DeleteTarget, DeletionVectorSink
from airflow_provider_iceberg_exec.engine.deletes.vectors import content_size, is_deletion_vector
from airflow_provider_iceberg_exec.engine.errors import IcebergExecError
from airflow_provider_iceberg_exec.engine.io.session import resource_error, track_resources
from airflow_provider_iceberg_exec.engine.meta.datafile_json import data_file_to_json
from airflow_provider_iceberg_exec.engine.meta.scan import ScannedDelete, ScannedFile, scan_snapshot

if TYPE_CHECKING:
    from pyiceberg.manifest import DataFile
    from pyiceberg.table import Table

__all__ = ["rewrite_to_dvs"]

log = logging.getLogger(__name__)


def rewrite_to_dvs(
    table: Table, task: Mapping[str, Any], inputs: Sequence[ScannedDelete], limits: ResourceLimits
) -> PositionDeleteResult:
    """Write the group's DVs (one Puffin file) and return the result; on failure the Puffin is removed."""
    metadata = table.metadata
    snapshot = metadata.snapshot_by_id(int(task["base_snapshot_id"]))
    assert snapshot is not None  # checked by check_base_snapshot
    files = scan_snapshot(table.io, metadata, snapshot)
    sequences = {file_identity(d.data_file): d.data_sequence_number for d in files.delete_files}
    with track_resources(limits) as (_spill_dir, stats):
        targets, dangling = _targets(table, inputs, files.data_files, limits)
        sink = DeletionVectorSink(
            io=table.io, location_provider=table.location_provider(), file_prefix=str(task["group_id"])
        )
        try:
            for scanned in targets:
                sink.fold(DeleteTarget.of(scanned))
            written = sink.close()
        except BaseException as err:
            sink.abort()
            mapped = resource_error(err)
            if mapped is err:
                raise
            raise mapped from err
    rewritten = list(inputs)
    seen = {file_identity(d.data_file) for d in inputs}
    for replaced in written.rewritten:
        if (identity := file_identity(replaced)) not in seen:
            seen.add(identity)
            rewritten.append(ScannedDelete(replaced, sequences[identity]))
    return _result(table, task, rewritten, written.added, dangling, stats)


def _targets(
    table: Table, inputs: Sequence[ScannedDelete], data_files: Sequence[ScannedFile], limits: ResourceLimits
) -> tuple[list[ScannedFile], int]:
    """The live data files without a DV that a group's file applies to and holds a position of; and the
    positions that name no live data file it applies to (dangling; positions of a data file with a DV,
    which readers ignore, count as repeated)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    applies: dict[str, list[ScannedFile]] = {}
    with_dv: set[str] = set()
    for scanned in data_files:
        if any(is_deletion_vector(d.data_file) for d in scanned.delete_files):
            with_dv.add(scanned.data_file.file_path)  # readers ignore its position files: nothing to fold
        for delete in scanned.delete_files:
            applies.setdefault(delete.data_file.file_path, []).append(scanned)
    chosen: dict[str, ScannedFile] = {}
    dangling = 0
    for scanned_delete in inputs:
        delete_file = scanned_delete.data_file
        reached = {s.data_file.file_path: s for s in applies.get(delete_file.file_path, [])}
        allowed = pa.array(sorted(reached), pa.string())
        for batch in iter_position_delete_rows(table.io, delete_file, limits.batch_size):
            kept = batch.column(0).filter(pc.is_in(batch.column(0), value_set=allowed))
            dangling += batch.num_rows - len(kept)
            for path in pc.unique(kept).to_pylist():
                if path not in with_dv:
                    chosen[path] = reached[path]
    return [chosen[path] for path in sorted(chosen)], dangling


def _result(
    table: Table,
    task: Mapping[str, Any],
    rewritten: Sequence[ScannedDelete],
    added: Sequence[DataFile],
    dangling: int,
    stats: Any,
) -> PositionDeleteResult:
    specs, schema = table.metadata.specs(), table.metadata.schema()
    read = sum(d.data_file.record_count for d in rewritten)
    written = sum(f.record_count for f in added)
    duplicates = read - dangling - written
    if duplicates < 0:  # a DV holds a position none of the files it replaces held
        raise IcebergExecError(
            f"group {task['group_id']}: {written} positions written from {read} read ({dangling} dangling); "
            "nothing committed"
        )
    log.info(
        "group %s: %d delete file(s) -> %d DV(s); %d positions, %d dangling, %d repeated",
        task["group_id"],
        len(rewritten),
        len(added),
        read,
        dangling,
        duplicates,
    )
    return PositionDeleteResult(
        schema=POSITION_DELETE_RESULT,
        table=task["table"],
        branch=task["branch"],
        group_id=str(task["group_id"]),
        commit_batch=int(task["commit_batch"]),
        base_snapshot_id=int(task["base_snapshot_id"]),
        options=dict(task["options"]),
        rewritten_delete_files=[
            {
                "content-file": data_file_to_json(d.data_file, specs[d.data_file.spec_id], schema),
                "data-sequence-number": d.data_sequence_number,
            }
            for d in rewritten
        ],
        added_delete_files=[data_file_to_json(f, specs[f.spec_id], schema) for f in added],
        data_sequence_number=max(d.data_sequence_number for d in rewritten),
        rewritten_bytes_count=sum(content_size(d.data_file) for d in rewritten),
        added_bytes_count=sum(content_size(f) for f in added),
        rewritten_records=read,
        added_records=written,
        dangling_records=dangling,
        duplicate_records=duplicates,
        peak_rss_bytes=stats.peak_rss_bytes,
        spilled_bytes=stats.spilled_bytes,
        elapsed_seconds=round(stats.elapsed_seconds, 3),
    )
