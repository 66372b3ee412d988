"""Writing position delete files: ``(file_path, pos)`` rows, sorted, as Parquet delete files with metrics.

The rows come in sorted by ``file_path`` then ``pos`` (the spec requires that order in every position
delete file) and are streamed: at most one row group is buffered and one file is open at a time, so the
memory does not depend on how many positions are written. Files roll at the target size and, with
``file`` granularity (Spark's effective default, ``write.delete.granularity``), also wherever
``file_path`` changes, so that each file holds the positions of one data file.

Only the required columns are written: the optional ``row`` column is left out (it is all-or-nothing per
file, and no reader needs it to apply a delete).

Each file's entry carries what Java's position delete writers record: ``record_count``,
``file_size_in_bytes``, column sizes, value and null counts, full (untruncated) lower and upper bounds of
``file_path`` and ``pos``, ``referenced_data_file`` when it holds the positions of one data file only,
the spec id and the partition. ``sort_order_id`` stays unset, as the spec asks of position deletes.
"""

from __future__ import annotations

import enum
import logging
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from airflow_provider_iceberg_exec.engine.errors import ConfigurationError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.io import FileIO, OutputStream
    from pyiceberg.manifest import DataFile
    from pyiceberg.partitioning import PartitionKey, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.table.locations import LocationProvider
    from pyiceberg.typedef import Record

__all__ = [
    "DELETE_GRANULARITY_PROPERTY",
    "DeleteGranularity",
    "PositionDeleteWriter",
    "position_delete_arrow_schema",
    "write_position_deletes",
]

log = logging.getLogger(__name__)

FILE_PATH_FIELD_ID = 2147483546
POS_FIELD_ID = 2147483545
DELETE_GRANULARITY_PROPERTY = "write.delete.granularity"
_ROW_GROUP_SIZE_BYTES = "write.parquet.row-group-size-bytes"
_DEFAULT_ROW_GROUP_SIZE_BYTES = 128 * 1024 * 1024
#: delete-file overrides of the data-file Parquet properties, as Java's ``write.delete.parquet.*``
_DELETE_PARQUET_PREFIX = "write.delete.parquet."


class DeleteGranularity(str, enum.Enum):
    """``write.delete.granularity``: one delete file per data file, or per partition (rolled at size)."""

    FILE = "file"
    PARTITION = "partition"

    @classmethod
    def of_table(cls, properties: Mapping[str, str]) -> DeleteGranularity:
        """The table's granularity; ``file`` when unset, Spark's effective default (Java's core default,
        ``partition``, is not what Spark writes).

        :raises ConfigurationError: for another value.

        >>> DeleteGranularity.of_table({}).value
        'file'
        """
        text = str(properties.get(DELETE_GRANULARITY_PROPERTY, cls.FILE.value)).strip().lower()
        try:
            return cls(text)
        except ValueError:
            raise ConfigurationError(
                f"{DELETE_GRANULARITY_PROPERTY} is {text!r}; use 'file' or 'partition'"
            ) from None


def position_delete_arrow_schema() -> pa.Schema:
    """The Arrow schema of the files written: ``file_path`` and ``pos`` with their reserved field ids."""
    import pyarrow as pa

    return pa.schema(
        [
            pa.field(
                "file_path",
                pa.string(),
                nullable=False,
                metadata={"PARQUET:field_id": str(FILE_PATH_FIELD_ID)},
            ),
            pa.field("pos", pa.int64(), nullable=False, metadata={"PARQUET:field_id": str(POS_FIELD_ID)}),
        ]
    )


class _PartitionPath:
    """What a location provider reads of a partition key: its path."""

    def __init__(self, path: str) -> None:
        self._path = path

    def to_path(self) -> str:
        return self._path


@dataclass
class _OpenFile:
    path: str
    stream: OutputStream
    writer: Any  # pq.ParquetWriter
    first_path: str | None = None
    last_path: str | None = None
    min_pos: int | None = None
    max_pos: int | None = None
    rows: int = 0


class PositionDeleteWriter:
    """Write sorted ``(file_path, pos)`` batches of one partition as rolling Parquet position delete files.

    :param io: the table's FileIO.
    :param location_provider: the table's location provider (files go where its data files go).
    :param spec: the partition spec of the files written (the spec of the positions' data files).
    :param schema: the table schema (for the partition path).
    :param partition: the partition of every file written, in ``spec``.
    :param target_file_size_bytes: roll to a new file when the current one reaches this size.
    :param properties: the table properties (Parquet codec and page sizes; ``write.delete.parquet.*``
        override ``write.parquet.*``).
    :param buffer_bytes: the most a row group may buffer in memory.
    :param granularity: ``file`` also starts a new file wherever ``file_path`` changes.
    :param file_prefix: a prefix for file names, e.g. the group id.
    """

    def __init__(
        self,
        *,
        io: FileIO,
        location_provider: LocationProvider,
        spec: PartitionSpec,
        schema: Schema,
        partition: Record,
        target_file_size_bytes: int,
        properties: Mapping[str, str],
        buffer_bytes: int,
        granularity: DeleteGranularity = DeleteGranularity.FILE,
        file_prefix: str = "deletes",
    ) -> None:
        if target_file_size_bytes <= 0:
            raise ConfigurationError("target_file_size_bytes must be > 0")
        self._io = io
        self._locations = location_provider
        self._spec = spec
        self._partition = partition
        self._partition_path = spec.partition_to_path(partition, schema) if spec.fields else None
        self._target = target_file_size_bytes
        self._granularity = granularity
        self._prefix = file_prefix
        self._write_id = uuid.uuid4().hex
        self._arrow_schema = position_delete_arrow_schema()
        self._writer_kwargs = _writer_kwargs(properties)
        row_group = int(properties.get(_ROW_GROUP_SIZE_BYTES, _DEFAULT_ROW_GROUP_SIZE_BYTES))
        self._row_group_bytes = max(1, min(row_group, buffer_bytes))
        self._buffered: list[pa.RecordBatch] = []
        self._buffered_bytes = 0
        self._compressed = 0
        self._uncompressed = 0
        self._number = 0
        self._current: _OpenFile | None = None
        self._paths: list[str] = []
        self._written: list[DataFile] = []
        self.rows_written = 0

    def write(self, batch: pa.RecordBatch) -> None:
        """Append sorted rows (they continue the order of the rows written before)."""
        import pyarrow.compute as pc

        if batch.num_rows == 0:
            return
        batch = batch.select(["file_path", "pos"]).cast(self._arrow_schema)
        if self._granularity is DeleteGranularity.PARTITION:
            self._write_run(batch)
            return
        paths = batch.column(0)
        starts = [0]
        if batch.num_rows > 1:
            changed = pc.not_equal(paths.slice(0, batch.num_rows - 1), paths.slice(1))
            starts += [i + 1 for i in pc.indices_nonzero(changed).to_pylist()]
        ends = [*starts[1:], batch.num_rows]
        for start, end in zip(starts, ends, strict=True):
            run = batch.slice(start, end - start)
            current = self._current
            if current is not None and current.last_path != run.column(0)[0].as_py():
                self._close_current()
            self._write_run(run)

    def _write_run(self, batch: pa.RecordBatch) -> None:
        while batch.num_rows:
            current = self._current or self._open()
            ratio = self._compressed / self._uncompressed if self._uncompressed else 1.0
            room = self._target - current.stream.tell() - self._buffered_bytes * ratio
            take = batch.num_rows
            if batch.nbytes * ratio > room:
                take = max(1, int(batch.num_rows * max(room, 0.0) / max(batch.nbytes * ratio, 1.0)))
            piece, batch = batch.slice(0, take), batch.slice(take)
            self._buffer(current, piece)
            # Until a row group tells the compression ratio, row groups stay small (an eighth of the
            # target), so the first file does not end at the target's worth of uncompressed bytes.
            limit = (
                self._row_group_bytes if self._uncompressed else min(self._row_group_bytes, self._target / 8)
            )
            if self._buffered_bytes >= limit:
                self._flush(current)
            if batch.num_rows or current.stream.tell() + self._buffered_bytes * ratio >= self._target:
                self._close_current()

    def _buffer(self, current: _OpenFile, piece: pa.RecordBatch) -> None:
        import pyarrow.compute as pc

        paths, positions = piece.column(0), piece.column(1)
        if current.first_path is None:
            current.first_path = paths[0].as_py()
        current.last_path = paths[piece.num_rows - 1].as_py()
        low, high = pc.min_max(positions).values()
        current.min_pos = low.as_py() if current.min_pos is None else min(current.min_pos, low.as_py())
        current.max_pos = high.as_py() if current.max_pos is None else max(current.max_pos, high.as_py())
        current.rows += piece.num_rows
        self._buffered.append(piece)
        self._buffered_bytes += piece.nbytes

    def _open(self) -> _OpenFile:
        import pyarrow.parquet as pq

        self._number += 1
        name = f"{self._prefix}-{self._write_id}-{self._number:05d}-deletes.parquet"
        key = cast("PartitionKey", _PartitionPath(self._partition_path)) if self._partition_path else None
        path = self._locations.new_data_location(data_file_name=name, partition_key=key)
        stream = self._io.new_output(path).create(overwrite=False)
        self._paths.append(path)
        writer = pq.ParquetWriter(stream, schema=self._arrow_schema, **self._writer_kwargs)
        self._current = _OpenFile(path=path, stream=stream, writer=writer)
        return self._current

    def _flush(self, current: _OpenFile) -> None:
        import pyarrow as pa

        if not self._buffered:
            return
        table = pa.Table.from_batches(self._buffered, schema=self._arrow_schema)
        before = current.stream.tell()
        current.writer.write_table(table, row_group_size=table.num_rows)
        self._compressed += current.stream.tell() - before
        self._uncompressed += self._buffered_bytes
        self._buffered, self._buffered_bytes = [], 0

    def _close_current(self) -> None:
        current = self._current
        if current is None:
            return
        self._current = None
        self._flush(current)
        current.writer.close()
        size = current.stream.tell()
        current.stream.close()
        if current.rows == 0:
            self._io.delete(current.path)
            return
        self._written.append(self._entry(current, current.writer.writer.metadata, size))
        self.rows_written += current.rows
        log.info("wrote position delete file %s: %d positions, %d bytes", current.path, current.rows, size)

    def _entry(self, current: _OpenFile, metadata: Any, size: int) -> DataFile:
        from pyiceberg.conversions import to_bytes
        from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
        from pyiceberg.types import LongType

        column_sizes = {FILE_PATH_FIELD_ID: 0, POS_FIELD_ID: 0}
        for group in range(metadata.num_row_groups):
            row_group = metadata.row_group(group)
            column_sizes[FILE_PATH_FIELD_ID] += row_group.column(0).total_compressed_size
            column_sizes[POS_FIELD_ID] += row_group.column(1).total_compressed_size
        first, last = current.first_path or "", current.last_path or ""  # set: the file has rows
        single = first == last
        data_file = DataFile.from_args(
            _table_format_version=3,
            content=DataFileContent.POSITION_DELETES,
            file_path=current.path,
            file_format=FileFormat.PARQUET,
            partition=self._partition,
            record_count=current.rows,
            file_size_in_bytes=size,
            column_sizes=column_sizes,
            value_counts={FILE_PATH_FIELD_ID: current.rows, POS_FIELD_ID: current.rows},
            null_value_counts={FILE_PATH_FIELD_ID: 0, POS_FIELD_ID: 0},
            nan_value_counts={},
            lower_bounds={
                FILE_PATH_FIELD_ID: first.encode(),
                POS_FIELD_ID: to_bytes(LongType(), current.min_pos or 0),
            },
            upper_bounds={
                FILE_PATH_FIELD_ID: last.encode(),
                POS_FIELD_ID: to_bytes(LongType(), current.max_pos or 0),
            },
            split_offsets=None,
            sort_order_id=None,
            equality_ids=None,
            key_metadata=None,
            referenced_data_file=first if single else None,
        )
        data_file.spec_id = self._spec.spec_id
        return data_file

    def close(self) -> list[DataFile]:
        """Finish the open file and return every file written."""
        self._close_current()
        return list(self._written)

    def abort(self) -> None:
        """Remove every file this writer created, finished or not."""
        current, self._current = self._current, None
        if current is not None:
            try:
                current.writer.close()
            finally:
                current.stream.close()
        for path in self._paths:
            try:
                self._io.delete(path)
            except (FileNotFoundError, OSError):
                log.warning("could not remove partial output %s", path)
        self._written.clear()


def _writer_kwargs(properties: Mapping[str, str]) -> dict[str, Any]:
    """PyArrow writer options from the table's Parquet properties, ``write.delete.parquet.*`` first."""
    from airflow_provider_iceberg_exec.engine.io.pyiceberg_internals import parquet_writer_kwargs

    merged = {
        k: v for k, v in properties.items() if k.startswith("write.parquet.") and k != _ROW_GROUP_SIZE_BYTES
    }
    for key, value in properties.items():
        if key.startswith(_DELETE_PARQUET_PREFIX):
            merged["write.parquet." + key[len(_DELETE_PARQUET_PREFIX) :]] = value
    merged.pop(_ROW_GROUP_SIZE_BYTES, None)
    kwargs = parquet_writer_kwargs(merged)
    kwargs["max_rows_per_page"] = kwargs.pop("write_batch_size")
    return kwargs


def write_position_deletes(
    io: FileIO,
    location_provider: LocationProvider,
    spec: PartitionSpec,
    partition: Record,
    batches_sorted_by_path_pos: Iterable[pa.RecordBatch],
    target_file_size_bytes: int,
    *,
    schema: Schema,
    properties: Mapping[str, str],
    buffer_bytes: int,
    granularity: DeleteGranularity = DeleteGranularity.FILE,
    file_prefix: str = "deletes",
) -> list[DataFile]:
    """Write ``(file_path, pos)`` batches, sorted by both, as position delete files of one partition.

    Streams the batches; on any failure every file written is removed and the error raised. See
    :class:`PositionDeleteWriter` for the parameters.

    :returns: the files written (none for no rows), not committed.
    """
    writer = PositionDeleteWriter(
        io=io,
        location_provider=location_provider,
        spec=spec,
        schema=schema,
        partition=partition,
        target_file_size_bytes=target_file_size_bytes,
        properties=properties,
        buffer_bytes=buffer_bytes,
        granularity=granularity,
        file_prefix=file_prefix,
    )
    try:
        for batch in batches_sorted_by_path_pos:
            writer.write(batch)
        return writer.close()
    except BaseException:
        writer.abort()
        raise
