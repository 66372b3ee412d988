"""Where a MERGE task's rows go: a rewritten file's own output, position deletes, or the new rows.

- Copy-on-write: the kept rows of a changed file (and its updated rows, when they stay in its partition)
  are written into new files of their own, file by file, so a file's layout survives; a file in which no
  row changed is discarded (its output removed), so it stays in the table untouched.
- Merge-on-read: on a v2 table each changed file gets position delete files of its own (file
  granularity, Spark's default), written as the file streams, in position order; on a v3 table each
  changed file gets one deletion vector, merged with the deletes it had (:mod:`~.deletes.sink`), all of
  the task's DVs in one Puffin file, and the old DVs and file-scoped delete files are reported as
  rewritten (:attr:`Outputs.rewritten_delete_files`: the commit removes them).
- New rows (inserts, merge-on-read updates, rows that change partition) go to one writer; in a
  partitioned table they are first clustered by partition with DataFusion's spilling sort.
- v3: every data file is written with the two row-lineage columns (Java's write schema): the task gives
  each row its values (copied rows both, updated rows their ``_row_id``, inserted rows none).

A failed task removes every file written (:meth:`Outputs.abort`).
"""

from __future__ import annotations

import itertools
import os
import threading
from typing import TYPE_CHECKING, Any

from airflow_provider_iceberg_exec.engine.config import ResourceLimits
from airflow_provider_iceberg_exec.engine.deletes.sink import (
    DeleteTarget,
    DeletionVectorSink,
    PositionDeleteSink,
    position_delete_sink,
)
from airflow_provider_iceberg_exec.engine.io.lineage import with_lineage_columns
from airflow_provider_iceberg_exec.engine.io.sorting import sort_for_output
from airflow_provider_iceberg_exec.engine.io.staging import StagedParquet
from airflow_provider_iceberg_exec.engine.io.write import (
    PartitionSplitter,
    RollingDataFileWriter,
    conform_batch,
)

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    import pyarrow as pa
    from pyiceberg.manifest import DataFile
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.table import Table

    from airflow_provider_iceberg_exec.engine.meta.scan import ScannedFile

__all__ = ["Outputs"]

_TARGET_FILE_SIZE_PROPERTY = "write.target-file-size-bytes"
_DEFAULT_TARGET_FILE_SIZE = 512 * 1024 * 1024
_DELETE_TARGET_FILE_SIZE_PROPERTY = "write.delete.target-file-size-bytes"
_DEFAULT_DELETE_TARGET_FILE_SIZE = 64 * 1024 * 1024


class Outputs:
    """Every writer of one task, the files they wrote, and the rows written to data files."""

    def __init__(self, table: Table, spec: PartitionSpec, task_id: str, limits: ResourceLimits) -> None:
        from pyiceberg.table.locations import load_location_provider

        metadata = table.metadata
        self.table, self.spec, self.task_id, self.limits = table, spec, task_id, limits
        self.schema = metadata.schema()
        #: v3: every row written carries _row_id and _last_updated_sequence_number (Java's write schema)
        self.lineage = metadata.format_version >= 3
        self.write_schema = with_lineage_columns(self.schema) if self.lineage else self.schema
        self.locations = load_location_provider(metadata.location, metadata.properties)
        self.target_size = int(metadata.properties.get(_TARGET_FILE_SIZE_PROPERTY, _DEFAULT_TARGET_FILE_SIZE))
        self.delete_target_size = int(
            metadata.properties.get(_DELETE_TARGET_FILE_SIZE_PROPERTY, _DEFAULT_DELETE_TARGET_FILE_SIZE)
        )
        self.splitter = PartitionSplitter(spec, self.schema)
        self._arrow_schema = self.write_schema.as_arrow()
        self.data_files: list[DataFile] = []
        self.delete_files: list[DataFile] = []
        #: v3: the delete files the new DVs replace (old DVs, file-scoped position deletes)
        self.rewritten_delete_files: list[DataFile] = []
        self.changed_files: set[str] = set()
        #: v3: one DV sink for the whole task (one Puffin file); v2 writes position files per data file
        self.dv_sink = (
            DeletionVectorSink(io=table.io, location_provider=self.locations, file_prefix=f"merge-{task_id}")
            if metadata.format_version >= 3
            else None
        )
        self.rows_written = 0
        self._writers: list[Any] = []
        self._new: RollingDataFileWriter | None = None
        self._new_stage: StagedParquet | None = None
        self._new_schema: pa.Schema | None = None
        self._spill_dir = ""
        self._numbers = itertools.count(1)
        #: files are written on several threads: what they share is changed under this lock
        self.lock = threading.RLock()

    def start(self, spill_dir: str) -> None:
        self._spill_dir = spill_dir

    def data_writer(self, prefix: str) -> RollingDataFileWriter:
        writer = RollingDataFileWriter(
            io=self.table.io,
            location_provider=self.locations,
            schema=self.write_schema,
            spec=self.spec,
            properties=self.table.metadata.properties,
            target_file_size_bytes=self.target_size,
            buffer_bytes=self.limits.writer_buffer_bytes,
            file_prefix=f"merge-{self.task_id}-{prefix}",
        )
        with self.lock:
            self._writers.append(writer)
        return writer

    def write_split(self, writer: RollingDataFileWriter, batch: pa.RecordBatch) -> None:
        for partition_key, run in self.splitter.split(batch):
            writer.write(partition_key, run)

    def for_file(self, scanned: ScannedFile, *, in_place: bool, copy_on_write: bool) -> FileOutput:
        number = next(self._numbers)
        return FileOutput(self, scanned, in_place=in_place, copy_on_write=copy_on_write, number=number)

    def write_new(self, rows: pa.RecordBatch) -> None:
        """Rows for the new-rows writer (clustered by partition first in a partitioned table)."""
        rows = conform_batch(rows, self._arrow_schema)
        with self.lock:
            self._write_new(rows)

    def _write_new(self, rows: pa.RecordBatch) -> None:
        if self.spec.is_unpartitioned():
            if self._new is None:
                self._new = self.data_writer("new")
            self._new.write(None, rows)
            return
        if self._new_stage is None:
            self._new_stage = StagedParquet(os.path.join(self._spill_dir, "merge-new-rows"))
            self._new_schema = rows.schema
        elif not rows.schema.equals(self._new_schema):
            # Inserted rows come from the source, moved ones from a target file: the same Iceberg types
            # may be other Arrow types (string / large_string), and one stage holds one schema.
            rows = rows.cast(self._new_schema)
        self._new_stage.write(rows)

    def finish(self) -> None:
        """Write out the new rows."""
        import pyarrow.parquet as pq

        if self._new_stage is not None and self._new_stage.close():
            stage = self._new_stage
            writer = self.data_writer("new")
            try:
                staged = (
                    batch
                    for name in sorted(os.listdir(stage.path))
                    if name.endswith(".parquet")
                    for batch in pq.ParquetFile(os.path.join(stage.path, name)).iter_batches(
                        batch_size=self.limits.batch_size
                    )
                )
                for batch in sort_for_output(
                    staged, (), self.spec, self.schema, self.limits, self._spill_dir
                ):
                    self.write_split(writer, batch)
            finally:
                stage.remove()
            self._new = writer
        if self._new is not None:
            self.data_files.extend(self._new.close())
            self.rows_written += self._new.rows_written
        if self.dv_sink is not None:
            written = self.dv_sink.close()
            self.delete_files.extend(written.added)
            self.rewritten_delete_files.extend(written.rewritten)

    def abort(self) -> None:
        for writer in self._writers:
            writer.abort()
        if self._new_stage is not None:
            self._new_stage.remove()
        if self.dv_sink is not None:
            self.dv_sink.abort()
        self.data_files, self.delete_files, self.rewritten_delete_files = [], [], []


class FileOutput:
    """The outputs of one target file; kept with :meth:`close` or removed with :meth:`discard`."""

    def __init__(
        self, outputs: Outputs, scanned: ScannedFile, *, in_place: bool, copy_on_write: bool, number: int
    ) -> None:
        self.outputs, self.scanned, self.number = outputs, scanned, number
        self.in_place, self.copy_on_write = in_place, copy_on_write
        self._writer: RollingDataFileWriter | None = None
        self._stage: StagedParquet | None = None
        self._deletes: PositionDeleteSink | None = None
        self._updated: list[pa.RecordBatch] = []

    def write_kept(self, batch: pa.RecordBatch) -> None:
        """Copy-on-write: rows of the file that stay as they are."""
        if not batch.num_rows:
            return
        if self.in_place:
            if self._writer is None:
                self._writer = self.outputs.data_writer(f"f{self.number}")
            self.outputs.write_split(self._writer, batch)
            return
        # Rows that must be clustered by partition: held aside until the file is known to change.
        if self._stage is None:
            self._stage = StagedParquet(os.path.join(self.outputs._spill_dir, f"merge-kept-{self.number}"))
        self._stage.write(batch)

    def write_updated(self, rows: pa.RecordBatch) -> None:
        if self.copy_on_write and self.in_place:
            self.write_kept(rows)
        else:
            self.outputs.write_new(rows)

    def write_deletes(self, positions: npt.NDArray[np.int64]) -> None:
        """Merge-on-read: the positions (ascending) of the rows removed or updated."""
        if not len(positions):
            return
        outputs = self.outputs
        if outputs.dv_sink is not None:
            outputs.dv_sink.write(DeleteTarget.of(self.scanned), positions)
            return
        if self._deletes is None:
            data_file = self.scanned.data_file
            self._deletes = position_delete_sink(
                outputs.table.metadata,
                io=outputs.table.io,
                location_provider=outputs.locations,
                spec=outputs.table.metadata.specs()[data_file.spec_id],
                partition=data_file.partition,
                target_file_size_bytes=outputs.delete_target_size,
                buffer_bytes=outputs.limits.writer_buffer_bytes,
                file_prefix=f"merge-{outputs.task_id}-d{self.number}",
                schema=outputs.schema,
            )
            with outputs.lock:
                outputs._writers.append(self._deletes)
        self._deletes.write(DeleteTarget.of(self.scanned), positions)

    def close(self) -> None:
        """Keep what was written for the file."""
        import pyarrow.parquet as pq

        outputs = self.outputs
        written = self._writer.close() if self._writer is not None else []
        deletes = self._deletes.close().added if self._deletes is not None else []
        with outputs.lock:
            outputs.changed_files.add(self.scanned.data_file.file_path)
            outputs.data_files.extend(written)
            outputs.rows_written += self._writer.rows_written if self._writer is not None else 0
            outputs.delete_files.extend(deletes)
        if self._stage is not None:
            stage = self._stage
            try:
                if stage.close():
                    for name in sorted(os.listdir(stage.path)):
                        if name.endswith(".parquet"):
                            for batch in pq.ParquetFile(os.path.join(stage.path, name)).iter_batches():
                                outputs.write_new(batch)
            finally:
                stage.remove()

    def discard(self) -> None:
        """Nothing changed in the file: remove what was written for it."""
        for writer in (self._writer, self._deletes):
            if writer is not None:
                writer.abort()
        if self.outputs.dv_sink is not None:
            self.outputs.dv_sink.forget(self.scanned.data_file.file_path)
        if self._stage is not None:
            self._stage.remove()
