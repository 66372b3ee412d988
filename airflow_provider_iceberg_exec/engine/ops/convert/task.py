"""Converting one partition: the rows its equality deletes match, written as position delete files.

The matching is the narrow join of :mod:`~.deletes.matches` (key columns only, spilling). A data file's
matched positions are merged with those of its file-scoped position delete files (they are removed by
the commit), so that each data file keeps one position delete file; with ``partition`` granularity the
partition's positions go to files of the target size instead. Partition-scoped position delete files
are left as they are (``rewrite-position-deletes`` compacts them). On a v3 table the positions go to
one deletion vector per data file instead (:mod:`~.deletes.sink`: merged with the file's old DV and all
its position deletes; the old DV and the file-scoped files it replaces are in the result's
``rewritten_delete_files``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.contracts import CONVERT_TASK_RESULT, ConvertTaskResult
from airflow_provider_iceberg_exec.engine.deletes.matches import MatchStats, equality_matches
from airflow_provider_iceberg_exec.engine.deletes.positions import read_position_deletes
from airflow_provider_iceberg_exec.engine.deletes.sink import DeleteTarget, SinkResult, position_delete_sink
from airflow_provider_iceberg_exec.engine.deletes.vectors import content_size, is_deletion_vector
from airflow_provider_iceberg_exec.engine.documents import check_base_snapshot, check_convert_task
from airflow_provider_iceberg_exec.engine.errors import ConfigurationError
from airflow_provider_iceberg_exec.engine.io.session import resource_error, track_resources
from airflow_provider_iceberg_exec.engine.meta.datafile_json import data_file_to_json
from airflow_provider_iceberg_exec.engine.meta.scan import ScannedDelete, ScannedFile, is_file_scoped
from airflow_provider_iceberg_exec.engine.meta.task_files import scanned_from_json
from airflow_provider_iceberg_exec.engine.ops.convert.plan import ConvertOptions
from airflow_provider_iceberg_exec.engine.progress import track

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    from pyiceberg.table import Table

__all__ = ["convert_task", "merged_position_deletes"]

log = logging.getLogger(__name__)


def convert_task(table: Table, task: Mapping[str, Any], limits: ResourceLimits) -> ConvertTaskResult:
    """Write the positions the task's equality deletes match as position delete files; return the result.

    On any failure every file this task wrote is removed.

    :raises DataFileCodecError: for a malformed task.
    :raises ConfigurationError: for a task that does not fit the table.
    :raises DataFileReadError: when a data or delete file is missing or corrupt.
    :raises ResourceLimitError: when the memory pool or the spill disk runs out.
    """
    import numpy as np

    check_convert_task(task)
    metadata = table.metadata
    check_base_snapshot(metadata, task["base_snapshot_id"])
    specs, schema = metadata.specs(), metadata.schema()
    files = sorted(
        (scanned_from_json(e, specs, schema) for e in task["data_files"]), key=lambda f: f.data_file.file_path
    )
    wanted = set(task["equality_delete_files"])
    deletes = {
        d.data_file.file_path: d for f in files for d in f.delete_files if d.data_file.file_path in wanted
    }
    if missing := sorted(wanted - deletes.keys()):
        raise ConfigurationError(
            f"task {task['task_id']}: equality deletes apply to none of its files: {missing[0]}"
        )
    options = ConvertOptions.from_options(task["options"])
    first = files[0].data_file
    stats = MatchStats()
    merged: set[str] = set()
    size = sum(f.data_file.file_size_in_bytes for f in files)
    with (
        track(
            "equality-to-position", files_total=len(files), bytes_total=size, label=str(task["task_id"])
        ) as progress,
        track_resources(limits) as (spill_dir, resources),
    ):
        sink = position_delete_sink(
            metadata,
            io=table.io,
            location_provider=table.location_provider(),
            spec=specs[first.spec_id],
            partition=first.partition,
            target_file_size_bytes=options.target_file_size_bytes,
            buffer_bytes=limits.writer_buffer_bytes,
            granularity=options.delete_granularity,
            file_prefix=f"{task['task_id']}-eq-to-pos",
            schema=schema,
        )
        try:
            matches = equality_matches(
                table.io,
                metadata,
                files,
                list(deletes.values()),
                limits=limits,
                spill_dir=spill_dir,
                stats=stats,
            )
            done_files = done_bytes = 0
            for scanned, positions in _per_file(files, matches):
                if not sink.folds_previous:  # a DV sink merges the file's earlier deletes itself
                    for delete in merged_position_deletes(scanned):
                        old = read_position_deletes(table.io, delete.data_file, scanned.data_file.file_path)
                        # Only a file whose every row names this data file can go (bounds may mislead).
                        if len(old) == delete.data_file.record_count:
                            positions = np.union1d(positions, old)
                            merged.add(delete.data_file.file_path)
                sink.write(DeleteTarget.of(scanned), positions)
                done_files, done_bytes = done_files + 1, done_bytes + scanned.data_file.file_size_in_bytes
                progress.advance(
                    files=1, bytes_done=scanned.data_file.file_size_in_bytes, rows=len(positions)
                )
            # The data files no equality delete matched are done too (the join read them).
            progress.advance(files=len(files) - done_files, bytes_done=size - done_bytes)
            written = sink.close()
        except BaseException as err:
            sink.abort()
            mapped = resource_error(err)
            if mapped is err:
                raise
            raise mapped from err
    added = written.added
    merged.update(f.file_path for f in written.rewritten if not is_deletion_vector(f))
    added_bytes = sum(content_size(f) for f in added)
    log.info(
        "task %s: %d data file(s), %d equality delete(s): %d rows matched -> %d position delete "
        "file(s), %d bytes",
        task["task_id"],
        len(files),
        len(deletes),
        stats.matched_rows,
        len(added),
        added_bytes,
    )
    result = ConvertTaskResult(
        schema=CONVERT_TASK_RESULT,
        table=task["table"],
        branch=task["branch"],
        base_snapshot_id=task["base_snapshot_id"],
        task_id=task["task_id"],
        equality_delete_files=sorted(deletes),
        data_files=[f.data_file.file_path for f in files],
        merged_position_delete_files=sorted(merged),
        added_delete_files=[data_file_to_json(f, specs[f.spec_id], schema) for f in added],
        dangling_equality_delete_files=list(task.get("dangling_equality_delete_files", [])),
        matched_rows=stats.matched_rows,
        data_rows_read=stats.data_rows_read,
        delete_rows_read=stats.delete_rows_read,
        peak_rss_bytes=resources.peak_rss_bytes,
        spilled_bytes=resources.spilled_bytes,
        elapsed_seconds=round(resources.elapsed_seconds, 3),
    )
    if sink.folds_previous:
        result["rewritten_delete_files"] = _rewritten_json(written, specs, schema)
    return result


def _rewritten_json(written: SinkResult, specs: Mapping[int, Any], schema: Any) -> list[Any]:
    """The delete files the new DVs replace, for the commit to remove (a DV by path, offset, size)."""
    return [data_file_to_json(f, specs[f.spec_id], schema) for f in written.rewritten]


def merged_position_deletes(scanned: ScannedFile) -> list[ScannedDelete]:
    """The position delete files of ``scanned`` a conversion folds into its new file: the file-scoped
    ones (not DVs), which name no other data file."""
    from pyiceberg.manifest import DataFileContent

    return [
        d
        for d in scanned.delete_files
        if d.data_file.content == DataFileContent.POSITION_DELETES
        and is_file_scoped(d.data_file)
        and not is_deletion_vector(d.data_file)
    ]


def _per_file(
    files: Sequence[ScannedFile], matches: Iterator[tuple[int, npt.NDArray[np.int64]]]
) -> Iterator[tuple[ScannedFile, npt.NDArray[np.int64]]]:
    """Gather the match chunks of each data file (they come consecutively): one data file's positions."""
    import numpy as np

    current: int | None = None
    chunks: list[npt.NDArray[np.int64]] = []
    for ordinal, positions in matches:
        if current is not None and ordinal != current:
            yield files[current], np.concatenate(chunks)
            chunks = []
        current = ordinal
        chunks.append(positions)
    if current is not None:
        yield files[current], np.concatenate(chunks)
