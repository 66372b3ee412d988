"""Executing one MERGE task: match its target files against the source, then rewrite the files that
change (copy-on-write) or write position deletes and new rows for them (merge-on-read); the task that
holds the inserts also writes the source rows no target row matched. One bounded execution per task.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.contracts import MERGE_TASK_RESULT
from airflow_provider_iceberg_exec.engine.deletes.equality import key_column
from airflow_provider_iceberg_exec.engine.deletes.matches import equality_matches
from airflow_provider_iceberg_exec.engine.deletes.positions import deleted_positions
from airflow_provider_iceberg_exec.engine.deletes.vectors import content_size
from airflow_provider_iceberg_exec.engine.documents import applied_deletes_of, check_base_snapshot
from airflow_provider_iceberg_exec.engine.documents.merge import check_merge_task
from airflow_provider_iceberg_exec.engine.errors import ConfigurationError, IcebergExecError
from airflow_provider_iceberg_exec.engine.io.lineage import RowLineage, without_lineage
from airflow_provider_iceberg_exec.engine.io.read import iter_data_file_batches, read_batch_rows
from airflow_provider_iceberg_exec.engine.io.session import ExecutionStats, resource_error, track_resources
from airflow_provider_iceberg_exec.engine.io.staging import StagedParquet
from airflow_provider_iceberg_exec.engine.meta.datafile_json import data_file_to_json
from airflow_provider_iceberg_exec.engine.meta.row_ids import first_row_id
from airflow_provider_iceberg_exec.engine.meta.task_files import scanned_from_json
from airflow_provider_iceberg_exec.engine.ops.merge.clauses import (
    KIND,
    MATCHED,
    NOT_MATCHED,
    MergeClauses,
)
from airflow_provider_iceberg_exec.engine.ops.merge.evaluate import Evaluator, combine
from airflow_provider_iceberg_exec.engine.ops.merge.matching import (
    MatchedRows,
    SourceStage,
    check_cardinality,
    match_target,
    matched_ordinals,
    matched_source_rows,
    unmatched_source_rows,
)
from airflow_provider_iceberg_exec.engine.ops.merge.outputs import Outputs
from airflow_provider_iceberg_exec.engine.ops.merge.source import MergeSource
from airflow_provider_iceberg_exec.engine.progress import NOT_TRACKED, Tracker, track

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import pyarrow as pa
    from pyiceberg.table import Table

    from airflow_provider_iceberg_exec.engine.meta.scan import ScannedFile

__all__ = ["execute_merge_task", "key_fields_for"]

log = logging.getLogger(__name__)


@dataclass
class Counts:
    """What one task did to rows and files."""

    updated: int = 0
    deleted: int = 0
    inserted: int = 0
    copied: int = 0
    matched: int = 0
    delete_file_rows: int = 0
    read_bytes: int = 0
    removed: list[dict[str, Any]] = field(default_factory=list)
    applied_deletes: dict[str, dict[str, Any]] = field(default_factory=dict)


def key_fields_for(table: Table, on: Sequence[str]) -> list[Any]:
    """The join key fields: top-level primitive columns of the table, each once, under hidden names.

    :raises ConfigurationError: for an empty key, an unknown or nested column, or one named twice.
    """
    from pyiceberg.types import NestedField, PrimitiveType

    schema = table.metadata.schema()
    names = [c.name for c in schema.columns]
    if not on:
        raise ConfigurationError("a merge needs join columns, e.g. on=['id']")
    if len(set(on)) != len(on):
        raise ConfigurationError(f"join columns {', '.join(on)} name a column twice")
    out = []
    for name in on:
        if name not in names:
            raise ConfigurationError(
                f"join column {name!r} is not a top-level column of the table; columns: {', '.join(names)}"
            )
        found = schema.find_field(name)
        if not isinstance(found.field_type, PrimitiveType):
            raise ConfigurationError(f"join column {name!r} is not of a primitive type")
        out.append(NestedField(found.field_id, key_column(found.field_id), found.field_type, required=False))
    return out


def execute_merge_task(table: Table, task: Mapping[str, Any], limits: ResourceLimits) -> dict[str, Any]:
    """Run one MERGE task in a bounded execution and return its result document.

    :returns: ``iceberg-exec/merge-task-result@1``: the data files removed (copy-on-write) and the data
        and delete files added, as content-file JSON, with Spark's row counts, bytes, peak RSS and spill.
    :raises ConfigurationError: for a malformed task, a task planned on another table state, a target row
        matched by two source rows, or rows that do not fit the table (a null in a required column).
    :raises DataFileReadError: when an input file is missing or corrupt.
    :raises ResourceLimitError: when the memory pool or the spill disk runs out.
    """
    doc = check_merge_task(task)
    metadata = table.metadata
    if doc["base_snapshot_id"] is not None:
        check_base_snapshot(metadata, doc["base_snapshot_id"])
    if int(doc["schema_id"]) != metadata.schema().schema_id:
        raise ConfigurationError(f"the schema of {doc['table']} changed since planning; plan again")
    run = _Run(table, doc, limits)
    files, size = task_totals(doc)
    with (
        track("merge", files_total=files, bytes_total=size, label=f"task {doc['task_id']}") as progress,
        track_resources(limits) as (spill_dir, stats),
    ):
        run.progress = progress
        try:
            run.execute(spill_dir)
        except BaseException as err:
            run.outputs.abort()
            mapped = resource_error(err)
            if mapped is err:
                raise
            raise mapped from err
    return run.result(stats)


def task_totals(task: Mapping[str, Any]) -> tuple[int, int]:
    """The target files of a (checked) task and their bytes: what its progress counts."""
    sizes = [int(e["data-file"]["file-size-in-bytes"]) for e in task.get("data_files") or []]
    return len(sizes), sum(sizes)


class _Run:
    """One task's execution over its files: counts and outputs."""

    def __init__(self, table: Table, doc: Mapping[str, Any], limits: ResourceLimits) -> None:
        metadata = table.metadata
        self.table, self.doc, self.limits = table, doc, limits
        self.schema = metadata.schema()
        self.clauses = MergeClauses.from_json(self.schema, doc["clauses"])
        self.key_names = list(doc["on"])
        self.key_fields = key_fields_for(table, self.key_names)
        self.copy_on_write = doc["mode"] == "copy-on-write"
        self.specs = metadata.specs()
        self.files = [scanned_from_json(e, self.specs, self.schema) for e in doc["data_files"]]
        self.key_files = [scanned_from_json(e, self.specs, self.schema) for e in doc.get("key_files") or []]
        self.counts = Counts()
        self.outputs = Outputs(table, self.specs[int(doc["output_spec_id"])], str(doc["task_id"]), limits)
        updated = {c for clause in self.clauses.all if clause.action == "update" for c in clause.values}
        self.moves_partitions = any(
            self.schema.find_column_name(f.source_id) in updated for f in self.outputs.spec.fields
        )
        self.source = MergeSource.from_json(table, doc["source"])
        self.evaluator = Evaluator(self.clauses, self.schema, self.source.arrow_schema)
        # v3: rows carry their lineage (an updated row keeps its _row_id), read from the target file
        self.lineage = metadata.format_version >= 3
        self.reads_target = self.copy_on_write or self.clauses.reads_target_values or self.lineage
        self.progress: Tracker = NOT_TRACKED  # advanced as each target file is done

    def execute(self, spill_dir: str) -> None:
        every = [*self.files, *self.key_files]
        dead = _dead_positions(self.table, every, self.limits, spill_dir)
        source = SourceStage(
            self.table,
            self.source,
            self.key_names,
            self.key_fields,
            self.limits,
            spill_dir,
        )
        self.outputs.start(spill_dir)
        self.progress.advance(phase="match")  # staging and joining the keys: no target file done yet
        pairs: StagedParquet | None = None
        try:
            pairs = match_target(
                self.table,
                [(i, f, dead[i]) for i, f in enumerate(every)],
                self.key_fields,
                source,
                self.limits,
                spill_dir,
            )
            if self.clauses.checks_cardinality:
                check_cardinality(pairs, every, self.limits, spill_dir)
            if self.clauses.matched or self.clauses.not_matched_by_source:
                self._target_files(pairs, source, dead, spill_dir)
            else:  # no clause changes a target row: every target file is done unread
                size = sum(f.data_file.file_size_in_bytes for f in self.files)
                self.progress.advance(files=len(self.files), bytes_done=size, phase="insert")
            if self.doc["inserts"] and self.clauses.not_matched:
                for batch in unmatched_source_rows(pairs, source, self.limits, spill_dir):
                    self._insert(batch)
                    self.progress.advance(rows=batch.num_rows, phase="insert")
            self.outputs.finish()
        finally:
            source.remove()
            if pairs is not None:
                pairs.remove()
        expected = self.counts.copied + self.counts.updated + self.counts.inserted
        if self.outputs.rows_written != expected:
            raise IcebergExecError(
                f"task {self.doc['task_id']} kept {expected} rows but wrote {self.outputs.rows_written}"
            )

    def _target_files(
        self, pairs: StagedParquet, source: SourceStage, dead: list[Any], spill_dir: str
    ) -> None:
        """Apply the clauses to every target file that may change, on up to one thread per core when
        the files are read (each file's matched rows taken from the sorted stream first)."""
        from concurrent.futures import Future, ThreadPoolExecutor

        touched = matched_ordinals(pairs, len(self.files), self.limits, spill_dir)
        matched = MatchedRows(matched_source_rows(pairs, source, len(self.files), self.limits, spill_dir))
        todo: list[tuple[int, ScannedFile]] = []
        skipped: list[ScannedFile] = []
        for ordinal, scanned in enumerate(self.files):
            if ordinal in touched or self.clauses.not_matched_by_source:
                todo.append((ordinal, scanned))
            else:
                skipped.append(scanned)
        if skipped:
            size = sum(scanned.data_file.file_size_in_bytes for scanned in skipped)
            self.progress.advance(files=len(skipped), bytes_done=size, phase="rewrite")
        workers = min(self.limits.file_workers, len(todo)) if self.reads_target else 1
        if workers <= 1:
            for ordinal, scanned in todo:
                self._finish(ordinal, self._target_file(ordinal, scanned, dead[ordinal], matched))
            return
        pending: collections.deque[tuple[int, Future[Counts | None]]] = collections.deque()
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="iceberg-exec-merge") as pool:
            for ordinal, scanned in todo:
                rows = FileRows(*matched.take(ordinal, scanned.data_file.record_count))
                pending.append(
                    (ordinal, pool.submit(self._target_file, ordinal, scanned, dead[ordinal], rows))
                )
                while len(pending) >= workers:
                    done, future = pending.popleft()
                    self._finish(done, future.result())
            while pending:
                done, future = pending.popleft()
                self._finish(done, future.result())

    def _finish(self, ordinal: int, counts: Counts | None) -> None:
        """Count a changed file (on the task's thread); an unchanged one (``None``) stays untouched."""
        size = self.files[ordinal].data_file.file_size_in_bytes
        self.progress.advance(files=1, bytes_done=size, phase="rewrite")
        if counts is None:
            return
        self._add(counts)
        if self.copy_on_write:
            entry = self.doc["data_files"][ordinal]
            self.counts.removed.append(dict(entry["data-file"]))
            self.counts.applied_deletes[str(entry["data-file"]["file-path"])] = applied_deletes_of(entry)

    def _target_file(
        self, ordinal: int, scanned: ScannedFile, dead: npt.NDArray[np.int64], matched: MatchedRows | FileRows
    ) -> Counts | None:
        """Apply the clauses to one target file's live rows; keep its outputs only when a row changed."""
        import numpy as np

        data_file = scanned.data_file
        in_place = self.copy_on_write and (
            self.outputs.spec.is_unpartitioned()
            or (data_file.spec_id == self.outputs.spec.spec_id and not self.moves_partitions)
        )
        file_out = self.outputs.for_file(scanned, in_place=in_place, copy_on_write=self.copy_on_write)
        counts = Counts()
        live = 0
        for batch, positions, combined in self._combined(ordinal, scanned, dead, matched):
            live += batch.num_rows
            self.progress.advance(rows=batch.num_rows, phase="rewrite")
            choice = self.evaluator.choose(combined)
            counts.matched += int(np.count_nonzero(combined.column(KIND).to_numpy() == MATCHED))
            changes = self.evaluator.changes(choice)
            updates = self.evaluator.updates(combined, choice)
            counts.updated += 0 if updates is None else updates.num_rows
            counts.deleted += int(np.count_nonzero(changes)) - (0 if updates is None else updates.num_rows)
            if self.copy_on_write:
                kept = batch.filter(~changes) if changes.any() else batch
                counts.copied += kept.num_rows
                file_out.write_kept(kept)
            else:
                file_out.write_deletes(positions[changes])
            if updates is not None:
                if self.lineage:
                    updates = updated_lineage(updates, batch, np.isin(choice, self.evaluator.update_numbers))
                file_out.write_updated(updates)
        changed = counts.updated + counts.deleted
        if not changed:
            file_out.discard()
            return None
        file_out.close()
        if self.reads_target:
            counts.delete_file_rows = data_file.record_count - live
            counts.read_bytes = data_file.file_size_in_bytes
        return counts

    def _combined(
        self, ordinal: int, scanned: ScannedFile, dead: npt.NDArray[np.int64], matched: MatchedRows | FileRows
    ) -> Iterator[tuple[pa.RecordBatch, npt.NDArray[np.int64], pa.RecordBatch]]:
        """``(target rows, their positions, combined batch)`` of one target file.

        When no clause reads a target value (merge-on-read ``UPDATE SET *`` and ``DELETE``), the file is
        not read: the matched rows' positions and source rows are all a row delta needs.
        """
        import numpy as np
        import pyarrow as pa

        if self.reads_target:
            for batch, positions in _live_rows(self.table, scanned, dead, self.limits, lineage=self.lineage):
                rows, row_positions = matched.take(ordinal, int(positions[-1]) + 1)
                # v3: the lineage columns (the last two) stay on the rows, out of the clauses' view
                target = batch.select(range(batch.num_columns - 2)) if self.lineage else batch
                yield (
                    batch,
                    positions,
                    combine(target, positions, rows, row_positions, self.evaluator.source_type),
                )
            return
        end = scanned.data_file.record_count
        rows, row_positions = matched.take(ordinal, end)
        for piece, positions in zip(rows, row_positions, strict=True):
            n = piece.num_rows
            source = pa.StructArray.from_arrays(
                [c.cast(f.type) for c, f in zip(piece.columns, self.evaluator.source_type, strict=True)],
                fields=list(self.evaluator.source_type),
            )
            combined = pa.RecordBatch.from_arrays(
                [
                    pa.nulls(n, self.evaluator.target_type),
                    source,
                    pa.array(np.full(n, MATCHED, dtype=np.int8)),
                ],
                names=["t", "s", KIND],
            )
            yield piece, positions, combined

    def _add(self, counts: Counts) -> None:
        for name in ("updated", "deleted", "copied", "matched", "delete_file_rows", "read_bytes"):
            setattr(self.counts, name, getattr(self.counts, name) + getattr(counts, name))

    def _insert(self, batch: pa.RecordBatch) -> None:
        import numpy as np
        import pyarrow as pa

        n = batch.num_rows
        combined = pa.RecordBatch.from_arrays(
            [
                pa.nulls(n, self.evaluator.target_type),
                pa.StructArray.from_arrays(batch.columns, fields=list(batch.schema)),
                pa.array(np.full(n, NOT_MATCHED, dtype=np.int8)),
            ],
            names=["t", "s", KIND],
        )
        rows = self.evaluator.inserts(combined, self.evaluator.choose(combined))
        if rows is not None and rows.num_rows:
            self.counts.inserted += rows.num_rows
            self.outputs.write_new(without_lineage(rows) if self.lineage else rows)

    def _rewritten_deletes(self) -> dict[str, Any]:
        """v3 only: the delete files the task's new DVs replace (the commit removes them; a DV by its
        path, content offset and size)."""
        rewritten = self.outputs.rewritten_delete_files
        if self.outputs.dv_sink is None:
            return {}
        return {
            "rewritten_delete_files": [
                data_file_to_json(f, self.specs[f.spec_id], self.schema) for f in rewritten
            ]
        }

    def result(self, stats: ExecutionStats) -> dict[str, Any]:
        doc, counts, schema = self.doc, self.counts, self.schema
        added = self.outputs.data_files
        deletes = self.outputs.delete_files
        log.info(
            "merge task %s (%s): %d file(s) changed, %d data and %d delete file(s) added; rows updated %d, "
            "deleted %d, inserted %d, copied %d; peak RSS %d MiB, spilled %d MiB",
            doc["task_id"],
            doc["mode"],
            len(self.outputs.changed_files),
            len(added),
            len(deletes),
            counts.updated,
            counts.deleted,
            counts.inserted,
            counts.copied,
            stats.peak_rss_bytes >> 20,
            stats.spilled_bytes >> 20,
        )
        return {
            "schema": MERGE_TASK_RESULT,
            **{key: doc[key] for key in _PASSED_ON},
            "removed_data_files": counts.removed,
            "applied_deletes": counts.applied_deletes,
            "added_data_files": [data_file_to_json(f, self.outputs.spec, schema) for f in added],
            "added_delete_files": [data_file_to_json(f, self.specs[f.spec_id], schema) for f in deletes],
            **self._rewritten_deletes(),
            "changed_data_files": sorted(self.outputs.changed_files),
            "num_target_rows_updated": counts.updated,
            "num_target_rows_deleted": counts.deleted,
            "num_target_rows_inserted": counts.inserted,
            "num_target_rows_copied": counts.copied,
            "num_target_rows_matched": counts.matched,
            "delete_file_rows": counts.delete_file_rows,
            "read_bytes": counts.read_bytes,
            "written_bytes": sum(content_size(f) for f in [*added, *deletes]),
            "peak_rss_bytes": stats.peak_rss_bytes,
            "spilled_bytes": stats.spilled_bytes,
            "elapsed_seconds": round(stats.elapsed_seconds, 3),
        }


#: the keys a task passes on to its result; the results committed together agree on them (one plan)
_PASSED_ON = (
    "table",
    "branch",
    "base_snapshot_id",
    "schema_id",
    "mode",
    "isolation_level",
    "on",
    "clauses",
    "conflict_filter",
    "task_id",
    "tasks_count",
    "inserts",
    "plan_id",
)


class FileRows:
    """One file's matched source rows and positions (sorted), taken batch by batch as the file is read."""

    def __init__(self, rows: list[pa.RecordBatch], positions: list[npt.NDArray[np.int64]]) -> None:
        import numpy as np
        import pyarrow as pa

        self._rows = pa.Table.from_batches(rows).combine_chunks() if rows else None
        self._positions = np.concatenate(positions) if positions else np.empty(0, np.int64)
        self._taken = 0

    def take(
        self, ordinal: int, end_position: int
    ) -> tuple[list[pa.RecordBatch], list[npt.NDArray[np.int64]]]:
        """The rows with a position below ``end_position`` not taken yet (``ordinal`` is this file's)."""
        import numpy as np

        end = int(np.searchsorted(self._positions, end_position))
        start, self._taken = self._taken, max(self._taken, end)
        if self._rows is None or end <= start:
            return [], []
        return self._rows.slice(start, end - start).to_batches(), [self._positions[start:end]]


def _dead_positions(
    table: Table, files: Sequence[ScannedFile], limits: ResourceLimits, spill_dir: str
) -> list[Any]:
    """The positions of every file's rows its delete files remove (sorted, unique)."""
    import numpy as np
    from pyiceberg.manifest import DataFileContent

    dead = [deleted_positions(table.io, scanned) for scanned in files]
    equality = {
        d.data_file.file_path: d
        for f in files
        for d in f.delete_files
        if d.data_file.content == DataFileContent.EQUALITY_DELETES
    }
    if equality:
        for ordinal, positions in equality_matches(
            table.io, table.metadata, files, list(equality.values()), limits=limits, spill_dir=spill_dir
        ):
            dead[ordinal] = np.union1d(dead[ordinal], positions)
    return dead


def updated_lineage(
    updates: pa.RecordBatch, batch: pa.RecordBatch, updated: npt.NDArray[np.bool_]
) -> pa.RecordBatch:
    """v3: the updated rows with the ``_row_id`` of the target rows they update (``batch``'s, where
    ``updated``, in order) and a null ``_last_updated_sequence_number``: they read as the commit's, as
    Java's ``RewriteMergeIntoTableForRowLineage`` assigns (an update, in either mode, keeps the row id)."""
    import pyarrow as pa

    out = without_lineage(updates)
    row_ids = batch.column(batch.num_columns - 2).filter(pa.array(updated))
    columns = list(out.columns)
    columns[-2] = row_ids
    return pa.RecordBatch.from_arrays(columns, schema=out.schema)


def _live_rows(
    table: Table,
    scanned: ScannedFile,
    dead: npt.NDArray[np.int64],
    limits: ResourceLimits,
    *,
    lineage: bool = False,
) -> Iterator[tuple[pa.RecordBatch, npt.NDArray[np.int64]]]:
    """The live rows of a data file in file order, each batch with its rows' positions; with
    ``lineage`` (v3) also ``_row_id`` and ``_last_updated_sequence_number``, materialised, last."""
    import numpy as np
    import pyarrow as pa

    metadata = table.metadata
    data_file = scanned.data_file
    start = 0
    for batch in iter_data_file_batches(
        table.io,
        data_file,
        table_schema=metadata.schema(),
        spec=metadata.specs()[data_file.spec_id],
        name_mapping=metadata.name_mapping(),
        format_version=metadata.format_version,
        batch_size=read_batch_rows(data_file, limits.batch_size),
        lineage=RowLineage(first_row_id(data_file), scanned.data_sequence_number) if lineage else None,
    ):
        n = batch.num_rows
        positions = np.arange(start, start + n, dtype=np.int64)
        start += n
        if len(dead):
            keep = ~np.isin(positions, dead, assume_unique=True)
            batch, positions = batch.filter(pa.array(keep)), positions[keep]
        if batch.num_rows:
            yield batch, positions
