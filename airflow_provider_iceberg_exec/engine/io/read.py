"""Reading a group of Iceberg data files as one bounded stream of record batches in the table schema.

Files are read one after another, each with PyArrow's streaming Parquet reader (no pre-buffering, one
row group in flight), so memory does not grow with the number or the size of the files. Columns are
matched by Iceberg field id through PyIceberg's projection (renamed, added, dropped and promoted
columns; files without field ids through the table's name mapping). We measured DataFusion 55's own
Parquet scan holding memory in proportion to the bytes it had read (about 780 MB peak RSS for one 627 MB
file, against 146 MB for this reader), so DataFusion gets the work that can spill -- sorting and
joining -- over a staged copy, not the scan of the inputs (docs/adr/0001-reading-and-staging.md).
"""

from __future__ import annotations

import collections
import logging
import threading
from collections.abc import Generator, Iterator, Sequence
from typing import TYPE_CHECKING, TypeVar, cast

from airflow_provider_iceberg_exec.engine.errors import ConfigurationError, DataFileReadError
from airflow_provider_iceberg_exec.engine.io.lineage import (
    RowLineage,
    materialise_lineage,
    with_lineage_columns,
)

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.io import FileIO
    from pyiceberg.manifest import DataFile
    from pyiceberg.partitioning import PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.table.name_mapping import NameMapping

__all__ = [
    "READ_AHEAD_BATCHES",
    "READ_AHEAD_BYTES",
    "iter_data_file_batches",
    "iter_group_batches",
    "read_ahead",
    "read_batch_rows",
]

log = logging.getLogger(__name__)

_READ_BUFFER_BYTES = 1 << 20
#: Batches a rewrite reads ahead of its writer, and their most bytes (beyond one batch).
READ_AHEAD_BATCHES = 8
READ_AHEAD_BYTES = 16 * 1024 * 1024
#: Decoded bytes per batch of a streamed read: the projection into the table schema runs in Python once
#: per batch, so 8192-row batches of narrow rows spent a fifth of the read there.
_READ_BATCH_BYTES = 4 * 1024 * 1024
_MAX_READ_BATCH_ROWS = 65536
#: Decoded rows take about this many times their compressed Parquet bytes (a guess on the safe side).
_DECODED_PER_STORED_BYTE = 2
#: How often a blocked producer checks whether its consumer went away.
_POLL_SECONDS = 0.1

T = TypeVar("T")


def iter_data_file_batches(
    io: FileIO,
    data_file: DataFile,
    *,
    table_schema: Schema,
    spec: PartitionSpec,
    name_mapping: NameMapping | None,
    format_version: int,
    batch_size: int,
    lineage: RowLineage | None = None,
) -> Iterator[pa.RecordBatch]:
    """Stream one data file's rows in ``table_schema`` (with field ids), in file order.

    Row positions are the running row count, because batches come in file order and unfiltered.

    :param lineage: for a v3 rewrite: the rows also carry ``_row_id`` and
        ``_last_updated_sequence_number`` (last two columns), inherited values made explicit
        (:mod:`.lineage`).

    :raises DataFileReadError: when the file is missing or is not readable Parquet.
    :raises ConfigurationError: when the file has no field ids and the table has no name mapping.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyiceberg.io.pyarrow import pyarrow_to_schema
    from pyiceberg.schema import prune_columns
    from pyiceberg.types import ListType, MapType

    from airflow_provider_iceberg_exec.engine.io.pyiceberg_internals import (
        batch_projection,
        partition_projection_values,
    )

    path = data_file.file_path
    try:
        stream = io.new_input(path).open()
    except (FileNotFoundError, OSError) as err:
        raise DataFileReadError(f"data file {path} cannot be opened: {err}") from err
    with stream:
        try:
            parquet = pq.ParquetFile(stream, pre_buffer=False, buffer_size=_READ_BUFFER_BYTES)
        except (pa.ArrowInvalid, pa.ArrowIOError, OSError) as err:
            raise DataFileReadError(f"data file {path} is not readable Parquet: {err}") from err
        try:
            file_schema = pyarrow_to_schema(
                parquet.schema_arrow,
                name_mapping,
                downcast_ns_timestamp_to_us=format_version <= 2,
                format_version=format_version,  # type: ignore[arg-type]
            )
        except ValueError as err:
            raise ConfigurationError(
                f"data file {path} has no Iceberg field ids and the table has no name mapping "
                "(schema.name-mapping.default); add one"
            ) from err
        # Columns missing from a file but fixed by an identity partition are filled from the partition.
        missing_values = partition_projection_values(data_file, table_schema, spec, file_schema.field_ids)
        read_schema = with_lineage_columns(table_schema) if lineage is not None else table_schema
        # Like PyIceberg's ArrowScan: list and map ids cannot be selected themselves (prune_columns
        # raises); selecting their element, key and value ids keeps them.
        wanted = {
            field_id
            for field_id in read_schema.field_ids
            if not isinstance(read_schema.find_type(field_id), (ListType, MapType))
        }
        file_projection = prune_columns(file_schema, wanted, select_full_types=False)
        columns = [column.name for column in file_projection.columns]
        project = batch_projection(
            read_schema, file_projection, format_version=format_version, missing_values=missing_values
        )
        read_rows = 0
        try:
            for batch in parquet.iter_batches(batch_size=batch_size, columns=columns, use_threads=False):
                start, read_rows = read_rows, read_rows + batch.num_rows
                projected = project(batch)
                yield projected if lineage is None else materialise_lineage(projected, start, lineage)
        except (pa.ArrowInvalid, pa.ArrowIOError, OSError) as err:
            raise DataFileReadError(f"data file {path} is corrupt: {err}") from err
        if read_rows != data_file.record_count:
            # The manifest and the file disagree: never write a rewrite that could lose rows.
            raise DataFileReadError(
                f"data file {path} holds {read_rows} rows but its manifest entry says "
                f"{data_file.record_count}"
            )


def read_batch_rows(data_file: DataFile, minimum: int) -> int:
    """Rows per batch for streaming ``data_file``: about ``_READ_BATCH_BYTES`` decoded, never below
    ``minimum`` (the configured batch size) nor above ``_MAX_READ_BATCH_ROWS``."""
    row_bytes = _DECODED_PER_STORED_BYTE * data_file.file_size_in_bytes // max(1, data_file.record_count)
    return max(minimum, min(_MAX_READ_BATCH_ROWS, _READ_BATCH_BYTES // max(1, row_bytes)))


def iter_group_batches(
    io: FileIO,
    data_files: Sequence[DataFile],
    *,
    table_schema: Schema,
    specs: dict[int, PartitionSpec],
    name_mapping: NameMapping | None,
    format_version: int,
    batch_size: int,
) -> Iterator[pa.RecordBatch]:
    """Stream every row of ``data_files``, one file after another, in ``table_schema``."""
    for number, data_file in enumerate(data_files, start=1):
        log.debug("reading %s (%d of %d)", data_file.file_path, number, len(data_files))
        yield from iter_data_file_batches(
            io,
            data_file,
            table_schema=table_schema,
            spec=specs[data_file.spec_id],
            name_mapping=name_mapping,
            format_version=format_version,
            batch_size=batch_size,
        )


class _Raised:
    def __init__(self, error: BaseException) -> None:
        self.error = error


_DONE = object()


class _Lead:
    """The items a producer thread has made and the consumer not yet taken, bounded in count and bytes."""

    def __init__(self, depth: int, max_bytes: int | None) -> None:
        self._queued: collections.deque[tuple[object, int]] = collections.deque()
        self._bytes = 0
        self._depth = max(1, depth)
        self._max_bytes = max_bytes
        self._changed = threading.Condition()
        self.stopped = False

    def _has_room(self, size: int) -> bool:
        if not self._queued:
            return True  # one item, however big, always fits: the producer never stalls for good
        if len(self._queued) >= self._depth:
            return False
        return self._max_bytes is None or self._bytes + size <= self._max_bytes

    def put(self, item: object) -> bool:
        """Queue ``item`` once there is room; ``False`` when the consumer went away."""
        size = int(getattr(item, "nbytes", 0) or 0) if self._max_bytes is not None else 0
        with self._changed:
            while not self.stopped and not self._has_room(size):
                self._changed.wait(_POLL_SECONDS)
            if self.stopped:
                return False
            self._queued.append((item, size))
            self._bytes += size
            self._changed.notify_all()
        return True

    def take(self) -> object:
        with self._changed:
            while not self._queued:
                self._changed.wait()
            item, size = self._queued.popleft()
            self._bytes -= size
            self._changed.notify_all()
        return item

    def stop(self) -> None:
        with self._changed:
            self.stopped = True
            self._changed.notify_all()


def read_ahead(items: Iterator[T], depth: int, *, max_bytes: int | None = None) -> Generator[T, None, None]:
    """Yield ``items`` while a background thread produces up to ``depth`` of them ahead.

    Decoding Parquet and encoding it release the GIL, so reading the next batches on a second thread
    while the caller writes keeps two cores busy. Memory grows by at most ``depth`` items, and, with
    ``max_bytes``, by at most that many bytes of them (``nbytes``) beyond one item. An error in the
    producer is raised in the caller. Close the returned generator (``contextlib.closing``) when stopping
    early: that stops and joins the producer, which closes ``items`` on its own thread.
    """
    lead = _Lead(depth, max_bytes)

    def produce() -> None:
        try:
            for item in items:
                if not lead.put(item):
                    return
            lead.put(_DONE)
        except BaseException as err:  # handed to the consumer, which raises it
            lead.put(_Raised(err))
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    worker = threading.Thread(target=produce, name="iceberg-exec-read-ahead", daemon=True)
    worker.start()
    try:
        while True:
            item = lead.take()
            if item is _DONE:
                return
            if isinstance(item, _Raised):
                raise item.error
            yield cast(T, item)
    finally:
        lead.stop()
        worker.join()
