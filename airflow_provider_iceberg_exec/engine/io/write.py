"""Writing record batches as Iceberg data files: Parquet with field ids, rolled at the target size.

The writer buffers at most one row group (``ResourceLimits.writer_buffer_bytes`` or the table's
``write.parquet.row-group-size-bytes``, whichever is smaller) and keeps one file open at a time, so its
memory does not depend on the size of the output. Input must be clustered by partition: the caller sorts
by the partition keys whenever rows of several partitions are mixed.

Dictionary encoding is decided per column from the first row group: a column whose distinct values
already overflow the dictionary page limit (``write.parquet.dict-size-bytes``) would fall back to plain
encoding in every row group after paying for the dictionary, so it is written plain from the start
(parquet-mr makes the same call per column chunk). That was a fifth of the CPU of a compaction and made
files about 10% larger.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow_provider_iceberg_exec.engine.errors import ConfigurationError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.io import FileIO, OutputStream
    from pyiceberg.manifest import DataFile
    from pyiceberg.partitioning import PartitionKey, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.table.locations import LocationProvider
    from pyiceberg.typedef import Record

__all__ = ["PartitionSplitter", "RollingDataFileWriter", "check_required", "conform_batch"]

log = logging.getLogger(__name__)

_ROW_GROUP_SIZE_BYTES = "write.parquet.row-group-size-bytes"
_DEFAULT_ROW_GROUP_SIZE_BYTES = 128 * 1024 * 1024
#: Until the first row group tells the real compression ratio, assume none, so a file cannot overshoot.
_INITIAL_COMPRESSION_RATIO = 1.0
#: PyArrow's own default for ``dictionary_pagesize_limit``.
_DEFAULT_DICTIONARY_PAGE_BYTES = 1024 * 1024
#: How many leading rows of the first row group decide a column's encoding, and how many the first step
#: looks at (each next step twice as many).
_DICTIONARY_PROBE_ROWS = 1 << 20
_DICTIONARY_PROBE_SLICE_ROWS = 1 << 16


def conform_batch(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    """Return ``batch`` with exactly ``schema``'s names, types and field ids (columns taken by position).

    DataFusion hands back storage types for extension types and may drop field metadata; this restores
    them without copying data where the types already agree.
    """
    import pyarrow as pa

    columns = []
    for column, target in zip(batch.columns, schema, strict=True):
        if column.type == target.type:
            columns.append(column)
        elif isinstance(target.type, pa.ExtensionType):
            columns.append(pa.ExtensionArray.from_storage(target.type, column.cast(target.type.storage_type)))
        else:
            columns.append(column.cast(target.type))
    return pa.RecordBatch.from_arrays(columns, schema=schema)


class PartitionSplitter:
    """Cut batches into runs of rows that share one partition of ``spec``."""

    def __init__(self, spec: PartitionSpec, schema: Schema) -> None:
        self._spec = spec
        self._schema = schema
        self._transforms = []
        for partition_field in spec.fields:
            source = schema.find_field(partition_field.source_id)
            name = schema.find_column_name(partition_field.source_id)
            if name is None:
                raise ConfigurationError(
                    f"partition field {partition_field.name!r} has no source column in the table schema"
                )
            self._transforms.append(
                (name, partition_field, partition_field.transform.pyarrow_transform(source.field_type))
            )

    def split(self, batch: pa.RecordBatch) -> list[tuple[PartitionKey | None, pa.RecordBatch]]:
        """Split ``batch`` where its partition changes; each run with its partition key."""
        import pyarrow.compute as pc
        from pyiceberg.partitioning import PartitionFieldValue, PartitionKey

        if not self._transforms:
            return [(None, batch)]
        if batch.num_rows == 0:
            return []
        keys = [fn(column_of(batch, name)) for name, _field, fn in self._transforms]
        boundaries: list[int] = []
        if batch.num_rows > 1:
            changed = None
            for key in keys:
                head, tail = key.slice(0, len(key) - 1), key.slice(1)
                differs = pc.fill_null(pc.not_equal(head, tail), False)
                null_flip = pc.xor(pc.is_null(head), pc.is_null(tail))
                step = pc.or_(differs, null_flip)
                changed = step if changed is None else pc.or_(changed, step)
            boundaries = [i + 1 for i in pc.indices_nonzero(changed).to_pylist()]
        runs: list[tuple[PartitionKey | None, pa.RecordBatch]] = []
        starts = [0, *boundaries]
        ends = [*boundaries, batch.num_rows]
        for start, end in zip(starts, ends, strict=True):
            key = PartitionKey(
                field_values=[
                    PartitionFieldValue(field=partition_field, value=keys[i][start].as_py())
                    for i, (_name, partition_field, _fn) in enumerate(self._transforms)
                ],
                partition_spec=self._spec,
                schema=self._schema,
            )
            runs.append((key, batch.slice(start, end - start)))
        return runs


def column_of(batch: pa.RecordBatch, dotted_name: str) -> pa.Array:
    import pyarrow.compute as pc

    parts = dotted_name.split(".")
    array = batch.column(parts[0])
    for part in parts[1:]:
        array = pc.struct_field(array, part)
    return array


@dataclass
class _OpenFile:
    path: str
    partition_key: PartitionKey | None
    stream: OutputStream
    writer: Any = None  # pq.ParquetWriter, opened with the first row group
    flushed_uncompressed_bytes: int = 0
    buffered: list[pa.RecordBatch] = field(default_factory=list)
    buffered_bytes: int = 0
    rows: int = 0
    nan_counts: dict[int, int] = field(default_factory=dict)


class RollingDataFileWriter:
    """Write batches of one output spec as Parquet data files of about ``target_file_size_bytes`` each.

    :param io: the table's FileIO.
    :param location_provider: the table's location provider (places files, partition paths included).
    :param schema: the table schema the batches are in.
    :param spec: the output partition spec.
    :param properties: the table properties (codec, level, page and row-group sizes, metrics modes).
    :param target_file_size_bytes: roll to a new file when the current one reaches this size.
    :param buffer_bytes: the most a row group may buffer in memory (further capped by the table property).
    :param sort_order_id: stamped on every file (None when rows follow no table sort order).
    :param file_prefix: a prefix for file names, e.g. the group id.
    """

    def __init__(
        self,
        *,
        io: FileIO,
        location_provider: LocationProvider,
        schema: Schema,
        spec: PartitionSpec,
        properties: Mapping[str, str],
        target_file_size_bytes: int,
        buffer_bytes: int,
        sort_order_id: int | None = None,
        file_prefix: str = "rewrite",
    ) -> None:
        from pyiceberg.io.pyarrow import (
            compute_statistics_plan,
            parquet_path_to_id_mapping,
            schema_to_pyarrow,
        )
        from pyiceberg.schema import sanitize_column_names

        from airflow_provider_iceberg_exec.engine.io.pyiceberg_internals import parquet_writer_kwargs

        self._io = io
        self._locations = location_provider
        self._spec = spec
        self._schema = schema
        file_schema = sanitize_column_names(schema)
        self._arrow_schema = schema_to_pyarrow(file_schema, include_field_ids=True)
        self._properties = dict(properties)
        row_group_bytes = int(self._properties.get(_ROW_GROUP_SIZE_BYTES, _DEFAULT_ROW_GROUP_SIZE_BYTES))
        self._row_group_bytes = max(1, min(row_group_bytes, buffer_bytes))
        # PyIceberg warns on row-group-size-bytes because it does not implement it; we do.
        self._writer_kwargs = parquet_writer_kwargs(
            {k: v for k, v in self._properties.items() if k != _ROW_GROUP_SIZE_BYTES}
        )
        # PyIceberg passes write.parquet.page-row-limit (20000) as PyArrow's write_batch_size, and PyArrow
        # checks the page size only once per write batch, so page-size-bytes was ignored for pages
        # under 20000 values. The property is Java's rows-per-page cap: pass it as that.
        self._writer_kwargs["max_rows_per_page"] = self._writer_kwargs.pop("write_batch_size")
        self._stats_plan = compute_statistics_plan(file_schema, self._properties)
        self._path_to_id = parquet_path_to_id_mapping(file_schema)
        self._has_floats = any(_is_float(t) for t in _leaf_types(self._arrow_schema))
        # None until the first row group shows which columns a dictionary suits.
        self._use_dictionary: bool | list[str] | None = None
        self._target = target_file_size_bytes
        self._sort_order_id = sort_order_id
        self._prefix = file_prefix
        self._write_id = uuid.uuid4().hex
        self._file_number = 0
        self._current: _OpenFile | None = None
        self._written: list[DataFile] = []
        self._paths: list[str] = []
        self._compressed_total = 0
        self._uncompressed_total = 0
        self.rows_written = 0

    @property
    def data_files(self) -> list[DataFile]:
        """The files closed so far."""
        return list(self._written)

    def _ratio(self) -> float:
        if self._uncompressed_total == 0:
            return _INITIAL_COMPRESSION_RATIO
        return self._compressed_total / self._uncompressed_total

    def write(self, partition_key: PartitionKey | None, batch: pa.RecordBatch) -> None:
        """Append rows that all belong to ``partition_key``'s partition."""
        if batch.num_rows == 0:
            return
        batch = conform_batch(batch, self._arrow_schema)
        current = self._current
        if current is not None and _partition(current.partition_key) != _partition(partition_key):
            self._close_current()
            current = None
        while batch.num_rows:
            if current is None:
                current = self._open(partition_key)
            take, file_full, group_limit = self._cut(current, batch)
            piece = batch.slice(0, take)
            batch = batch.slice(take)
            self._buffer(current, piece)
            if current.buffered_bytes >= group_limit or (batch.num_rows and not file_full):
                self._flush(current)
            if file_full or current.stream.tell() + current.buffered_bytes * self._ratio() >= self._target:
                self._close_current()
                current = None

    def _cut(self, current: _OpenFile, batch: pa.RecordBatch) -> tuple[int, bool, float]:
        """How many rows of ``batch`` go into ``current`` now, whether that fills the file, and the
        row-group limit: the rows that fit the file's target size (by the compression ratio so far),
        cut again where the row group is full."""
        ratio = self._ratio()
        room = self._target - current.stream.tell() - current.buffered_bytes * ratio
        expected = batch.nbytes * ratio
        if expected <= room:
            take = batch.num_rows
        else:
            take = max(1, int(batch.num_rows * max(room, 0.0) / expected))
        file_full = take < batch.num_rows
        first_group_cap = self._target / 8 if self._uncompressed_total == 0 else self._row_group_bytes
        group_limit = min(self._row_group_bytes, first_group_cap)
        # Cut the batch where the row group is full too, so that a row group (and the memory it
        # buffers) does not overshoot row-group-size-bytes by up to a whole batch.
        group_room = group_limit - current.buffered_bytes
        if batch.slice(0, take).nbytes > group_room:
            group_take = max(1, int(batch.num_rows * max(group_room, 0.0) / max(batch.nbytes, 1)))
            if group_take < take:
                take, file_full = group_take, False
        return take, file_full, group_limit

    def _buffer(self, current: _OpenFile, piece: pa.RecordBatch) -> None:
        """Add ``piece`` to ``current``'s row group in memory, with its rows' NaN counts."""
        current.buffered.append(piece)
        current.buffered_bytes += piece.nbytes
        current.rows += piece.num_rows
        if self._has_floats:
            _add_nan_counts(self._arrow_schema, piece, current.nan_counts)

    def _open(self, partition_key: PartitionKey | None) -> _OpenFile:
        self._file_number += 1
        name = f"{self._prefix}-{self._write_id}-{self._file_number:05d}.parquet"
        path = self._locations.new_data_location(data_file_name=name, partition_key=partition_key)
        stream = self._io.new_output(path).create(overwrite=False)
        self._paths.append(path)
        self._current = _OpenFile(path=path, partition_key=partition_key, stream=stream)
        return self._current

    def _flush(self, current: _OpenFile) -> None:
        if not current.buffered:
            return
        self._encode(current)

    def _encode(self, current: _OpenFile) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.Table.from_batches(current.buffered, schema=self._arrow_schema)
        if current.writer is None:
            if self._use_dictionary is None:
                limit = int(
                    self._writer_kwargs.get("dictionary_pagesize_limit") or _DEFAULT_DICTIONARY_PAGE_BYTES
                )
                # Judged for the row groups to come: the first one is smaller (see write()).
                rows_per_group = int(table.num_rows * self._row_group_bytes / max(1, table.nbytes))
                self._use_dictionary = dictionary_columns(table, limit, rows_per_group)
            current.writer = pq.ParquetWriter(
                current.stream,
                schema=self._arrow_schema,
                store_decimal_as_integer=True,
                use_dictionary=self._use_dictionary,
                **self._writer_kwargs,
            )
        before = current.stream.tell()
        current.writer.write_table(table, row_group_size=table.num_rows)
        self._compressed_total += current.stream.tell() - before
        self._uncompressed_total += current.buffered_bytes
        current.flushed_uncompressed_bytes += current.buffered_bytes
        current.buffered = []
        current.buffered_bytes = 0

    def _close_current(self) -> None:
        from pyiceberg.io.pyarrow import MetricModeTypes, data_file_statistics_from_parquet_metadata
        from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
        from pyiceberg.typedef import Record

        current = self._current
        if current is None:
            return
        self._current = None
        self._flush(current)
        if current.writer is not None:
            current.writer.close()
        size = current.stream.tell()
        current.stream.close()
        if current.rows == 0:
            self._io.delete(current.path)
            return
        statistics = data_file_statistics_from_parquet_metadata(
            parquet_metadata=current.writer.writer.metadata,
            stats_columns=self._stats_plan,
            parquet_column_mapping=self._path_to_id,
        )
        # Parquet footers carry no NaN counts, so PyIceberg leaves them out; Java writes them for every
        # float and double column whose metrics mode is not "none", and so do we (counted while writing).
        statistics = dataclasses.replace(
            statistics,
            nan_value_counts={
                field_id: count
                for field_id, count in current.nan_counts.items()
                if field_id in self._stats_plan
                and self._stats_plan[field_id].mode.type != MetricModeTypes.NONE
            },
        )
        data_file = DataFile.from_args(
            content=DataFileContent.DATA,
            file_path=current.path,
            file_format=FileFormat.PARQUET,
            partition=current.partition_key.partition if current.partition_key else Record(),
            file_size_in_bytes=size,
            sort_order_id=self._sort_order_id,
            spec_id=self._spec.spec_id,
            equality_ids=None,
            key_metadata=None,
            **statistics.to_serialized_dict(),
        )
        self.rows_written += current.rows
        self._written.append(data_file)
        log.info("wrote %s: %d rows, %d bytes", current.path, current.rows, size)

    def close(self) -> list[DataFile]:
        """Finish the open file and return every file written."""
        self._close_current()
        return self.data_files

    def abort(self) -> None:
        """Remove every file this writer created, finished or not (a failed group leaves nothing behind)."""
        current = self._current
        self._current = None
        if current is not None:
            try:
                if current.writer is not None:
                    current.writer.close()
            finally:
                current.stream.close()
        for path in self._paths:
            try:
                self._io.delete(path)
            except (FileNotFoundError, OSError):
                log.warning("could not remove partial output %s", path)
        self._written.clear()


def dictionary_columns(
    row_group: pa.Table, page_limit_bytes: int, row_group_rows: int | None = None
) -> bool | list[str]:
    """PyArrow's ``use_dictionary`` for a file whose first row group is ``row_group``.

    A top-level column is written plain when its distinct values in a row group of ``row_group_rows``
    rows (default: this one's) would hold more bytes than ``page_limit_bytes``: the Parquet writer would
    build that dictionary, overflow it and fall back to plain encoding in every row group. Every other
    leaf keeps its dictionary. Only the first ``_DICTIONARY_PROBE_ROWS`` rows are looked at, in prefixes
    from ``_DICTIONARY_PROBE_SLICE_ROWS`` rows, twice as long at each step; a column whose distinct
    values still grow in step with the rows is extrapolated to the row group size (the first row group is
    smaller than the later ones).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    target_rows = max(row_group_rows or 0, row_group.num_rows)
    plain = {
        name
        for name, column in zip(row_group.column_names, row_group.columns, strict=True)
        if _has_dictionary_encoding(column.type)
        and _distinct_bytes(column, target_rows, page_limit_bytes) > page_limit_bytes
    }
    if not plain:
        return True
    # A list of columns enables the dictionary for exactly those leaves: name every other leaf by the
    # path the Parquet schema gives it (nested leaves included).
    sink = pa.BufferOutputStream()
    pq.write_table(row_group.schema.empty_table(), sink)
    metadata = pq.read_metadata(pa.BufferReader(sink.getvalue()))
    paths = [metadata.schema.column(i).path for i in range(metadata.num_columns)]
    return [path for path in paths if path.split(".", 1)[0] not in plain]


def _distinct_bytes(column: pa.ChunkedArray, target_rows: int, page_limit_bytes: int) -> int:
    """The bytes of ``column``'s distinct values in a row group of ``target_rows`` rows, as probed by
    :func:`dictionary_columns` (exact up to the limit, extrapolated for a column still growing)."""
    probe_rows = min(len(column), _DICTIONARY_PROBE_ROWS)
    if not probe_rows:
        return 0
    # The distinct values of a first slice, then of a prefix twice as long each time, hashed from its
    # chunks in place: the rows are hashed about twice in all, where merging each next slice into the
    # distinct values so far hashed those again every time (307,692 user ids: 0.054 s).
    probed = min(probe_rows, _DICTIONARY_PROBE_SLICE_ROWS)
    probed_bytes: dict[int, int] = {}  # rows of each prefix hashed -> its distinct bytes
    while True:
        seen = _unique(column.slice(0, probed))
        probed_bytes[probed] = seen.nbytes
        if (
            probed == probe_rows
            or seen.nbytes > page_limit_bytes
            # Every value so far distinct (ids, timestamps): the rows to come add as many, so the
            # extrapolation decides now (probing further took 0.6 s on 400,000 ids).
            or (len(seen) == probed and seen.nbytes * target_rows // probed > page_limit_bytes)
        ):
            break
        probed = min(probe_rows, 2 * probed)
    estimate = int(seen.nbytes)
    if len(seen) == probed:
        return estimate * target_rows // probed
    if estimate <= page_limit_bytes < estimate * target_rows // probed:
        # Distinct bytes that nearly doubled from the first half of the probe to all of it keep
        # growing with the rows (ids, timestamps): extrapolate; saturated ones (categories) do not.
        half_rows = max(1, probed // 2)
        half = probed_bytes.get(half_rows)  # the step before, unless the last step was cut short
        if half is None:
            half = _unique(column.slice(0, half_rows)).nbytes
        if estimate >= 1.5 * half:
            return estimate * target_rows // probed
    return estimate


def _unique(values: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
    """``pyarrow.compute.unique(values)``, and ``values`` themselves when they are whole numbers (or what is
    stored as them: dates, times, timestamps, decimals) rising strictly with no null: Arrow's hash table
    took 19 ms for 65,536 consecutive ids or timestamps (about 0.03 s a file written), against 3 ms for as
    many random ones; the check takes a fraction of a millisecond.

    >>> import pyarrow as pa
    >>> ids = pa.array([1, 2, 5])
    >>> _unique(ids) is ids
    True
    >>> [_unique(pa.array(v)).to_pylist() for v in ([3, 1, 3], [1, 2, 2], [1, None, 2])]
    [[3, 1], [1, 2], [1, None, 2]]
    >>> len(_unique(pa.array([(0, 1, 0), (0, 2, 0)], pa.month_day_nano_interval())))
    2
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = values.type
    if (
        len(values) > 1
        and not values.null_count
        and (pa.types.is_integer(kind) or pa.types.is_temporal(kind) or pa.types.is_decimal(kind))
        and not pa.types.is_interval(kind)  # temporal, but not ordered
        and pc.all(pc.greater(values.slice(1), values.slice(0, len(values) - 1))).as_py()
    ):
        return values
    return pc.unique(values)


def _has_dictionary_encoding(arrow_type: pa.DataType) -> bool:
    """Whether Parquet dictionary-encodes this (top-level) type: every flat type except boolean."""
    import pyarrow as pa

    if pa.types.is_boolean(arrow_type):
        return False
    return bool(
        pa.types.is_primitive(arrow_type)
        or pa.types.is_decimal(arrow_type)
        or pa.types.is_string(arrow_type)
        or pa.types.is_large_string(arrow_type)
        or pa.types.is_binary(arrow_type)
        or pa.types.is_large_binary(arrow_type)
        or pa.types.is_fixed_size_binary(arrow_type)
    )


def _field_id(arrow_field: pa.Field) -> int:
    return int((arrow_field.metadata or {})[b"PARQUET:field_id"])


def _is_float(arrow_type: pa.DataType) -> bool:
    import pyarrow as pa

    return bool(pa.types.is_float32(arrow_type) or pa.types.is_float64(arrow_type))


def _leaf_types(schema: pa.Schema) -> list[pa.DataType]:
    import pyarrow as pa

    leaves: list[pa.DataType] = []
    pending = [f.type for f in schema]
    while pending:
        arrow_type = pending.pop()
        if pa.types.is_struct(arrow_type):
            pending.extend(arrow_type.field(i).type for i in range(arrow_type.num_fields))
        elif pa.types.is_map(arrow_type):
            pending.extend([arrow_type.key_type, arrow_type.item_type])
        elif pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
            pending.append(arrow_type.value_type)
        else:
            leaves.append(arrow_type)
    return leaves


def _add_nan_counts(schema: pa.Schema, batch: pa.RecordBatch, counts: dict[int, int]) -> None:
    """Add the NaN values of every float/double column of ``batch`` (nested ones too) to ``counts``."""
    for arrow_field, column in zip(schema, batch.columns, strict=True):
        _count_nans(arrow_field, column, counts)


def _count_nans(arrow_field: pa.Field, array: pa.Array, counts: dict[int, int]) -> None:
    import pyarrow as pa
    import pyarrow.compute as pc

    arrow_type = arrow_field.type
    if _is_float(arrow_type):
        nans = pc.sum(pc.is_nan(array)).as_py() or 0
        counts[_field_id(arrow_field)] = counts.get(_field_id(arrow_field), 0) + nans
    elif pa.types.is_struct(arrow_type):
        # flatten() folds the struct's own nulls into its children.
        for child_field, child in zip(arrow_type, array.flatten(), strict=True):
            _count_nans(child_field, child, counts)
    elif pa.types.is_map(arrow_type):
        entries = pa.list_(pa.struct([arrow_type.key_field, arrow_type.item_field]))
        keys, items = array.cast(entries).flatten().flatten()
        _count_nans(arrow_type.key_field, keys, counts)
        _count_nans(arrow_type.item_field, items, counts)
    elif pa.types.is_list(arrow_type) or pa.types.is_large_list(arrow_type):
        _count_nans(arrow_type.value_field, array.flatten(), counts)


def _partition(key: PartitionKey | None) -> Record | None:
    return key.partition if key is not None else None


def sizes(files: Sequence[DataFile]) -> int:
    """Total bytes of ``files``."""
    return sum(f.file_size_in_bytes for f in files)


def check_required(batch: pa.RecordBatch, schema: Schema, where: str) -> None:
    """Fail when a required top-level column holds a null (PyArrow does not check non-nullable fields)."""
    for position, column in enumerate(schema.columns):
        if column.required and batch.column(position).null_count:
            raise ConfigurationError(
                f"{where}: {batch.column(position).null_count} row(s) have null in required column "
                f"{column.name}; nothing was committed"
            )
