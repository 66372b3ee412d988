"""A MERGE's source: Parquet files (local or on the table's object store) or an Iceberg table at a snapshot.

Its columns are matched to the table's by name: a column the table has is cast to the table's type where
Iceberg's promotion rules allow it (int to long, float to double, a wider decimal of the same scale, and
the same type in another Arrow spelling), and is an error otherwise; other columns are kept as they are,
for conditions and expressions (a CDC feed's ``op``, say). Rows stream in file order, so every task of a
plan numbers them alike (the source ordinal the matching joins on).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_iceberg_exec.engine.errors import ConfigurationError, first_line

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.table import Table

    from airflow_provider_iceberg_exec.engine.config import ResourceLimits

__all__ = ["MergeSource", "SourceFile", "resolve_source"]


@dataclass(frozen=True)
class SourceFile:
    path: str
    size_bytes: int
    record_count: int


@dataclass(frozen=True)
class MergeSource:
    """What a plan reads as the source: Parquet ``files``, or ``table`` at ``snapshot_id``.

    :param arrow_schema: the source row as the clauses see it (``s``): the table's columns it has, in the
        table's types, then its other columns.
    """

    files: tuple[SourceFile, ...]
    table: str | None
    snapshot_id: int | None
    arrow_schema: pa.Schema

    @property
    def record_count(self) -> int:
        return sum(f.record_count for f in self.files)

    @property
    def size_bytes(self) -> int:
        return sum(f.size_bytes for f in self.files)

    def to_json(self) -> dict[str, Any]:
        return {
            "files": [
                {"path": f.path, "size-in-bytes": f.size_bytes, "record-count": f.record_count}
                for f in self.files
            ],
            "table": self.table,
            "snapshot_id": self.snapshot_id,
        }

    @classmethod
    def from_json(cls, target: Table, doc: Mapping[str, Any]) -> MergeSource:
        """The source a document names, checked again against the target table (the files' footers)."""
        if doc.get("table"):
            return resolve_source(target, source_table=str(doc["table"]), snapshot_id=doc.get("snapshot_id"))
        return resolve_source(target, paths=[str(f["path"]) for f in doc.get("files") or []])

    def batches(self, target: Table, limits: ResourceLimits, spill_dir: str) -> Iterator[pa.RecordBatch]:
        """The source rows in :attr:`arrow_schema`, in source order."""
        if self.table is not None:
            yield from self._table_batches(target, limits, spill_dir)
            return
        for source_file in self.files:
            yield from self._file_batches(target, source_file, limits.batch_size)

    def _file_batches(
        self, target: Table, source_file: SourceFile, batch_size: int
    ) -> Iterator[pa.RecordBatch]:
        import pyarrow.parquet as pq

        with target.io.new_input(source_file.path).open() as stream:
            reader = pq.ParquetFile(stream, pre_buffer=False)
            for batch in reader.iter_batches(batch_size=batch_size):
                yield conform_source(batch, self.arrow_schema, source_file.path)

    def _table_batches(
        self, target: Table, limits: ResourceLimits, spill_dir: str
    ) -> Iterator[pa.RecordBatch]:
        from airflow_provider_iceberg_exec.engine.deletes.apply import DeleteStats, iter_live_group_batches
        from airflow_provider_iceberg_exec.engine.meta.scan import scan_data_files

        source_table, snapshot = _load_table(target, str(self.table), self.snapshot_id)
        if snapshot is None:
            return
        from pyiceberg.expressions import AlwaysTrue

        files = scan_data_files(source_table, snapshot, AlwaysTrue())
        for batch in iter_live_group_batches(
            source_table.io,
            source_table.metadata,
            files,
            limits=limits,
            spill_dir=spill_dir,
            stats=DeleteStats(),
        ):
            yield conform_source(batch, self.arrow_schema, str(self.table))


def resolve_source(
    target: Table,
    *,
    paths: Sequence[str] = (),
    source_table: str | None = None,
    snapshot_id: int | None = None,
) -> MergeSource:
    """Check the source against the target table; read footers (or the source table's metadata) only.

    :raises ConfigurationError: for no source or two, an unreadable file, a source table or snapshot that
        does not exist, or a column whose type does not fit the table's.
    """
    if bool(paths) == bool(source_table):
        raise ConfigurationError(
            "give the merge source as Parquet file paths or as a source table, one of them"
        )
    if source_table:
        table, snapshot = _load_table(target, source_table, snapshot_id)
        # Its rows are read in its current schema (renamed columns keep their field ids).
        schema = table.metadata.schema().as_arrow()
        return MergeSource(
            (),
            source_table,
            None if snapshot is None else snapshot.snapshot_id,
            source_schema(target, schema, source_table),
        )
    files, arrow_schema = [], None
    for path in paths:
        source_file, file_schema = _inspect(target, path)
        files.append(source_file)
        schema_here = source_schema(target, file_schema, path)
        if arrow_schema is not None and not schema_here.equals(arrow_schema):
            raise ConfigurationError(
                f"source file {path} has other columns than {paths[0]}; give files of one schema"
            )
        arrow_schema = schema_here
    assert arrow_schema is not None
    return MergeSource(tuple(files), None, None, arrow_schema)


def _inspect(target: Table, path: str) -> tuple[SourceFile, pa.Schema]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        input_file = target.io.new_input(path)
        size = len(input_file)
        with input_file.open() as stream:
            footer = pq.ParquetFile(stream, pre_buffer=False)
            return SourceFile(path, size, footer.metadata.num_rows), footer.schema_arrow
    except (FileNotFoundError, OSError, pa.ArrowInvalid, ValueError) as err:
        raise ConfigurationError(f"cannot read merge source {path}: {first_line(err)}") from err


def _load_table(target: Table, name: str, snapshot_id: int | None) -> tuple[Table, Any]:
    from pyiceberg.exceptions import NoSuchTableError

    catalog = target.catalog
    try:
        table = catalog.load_table(name)
    except NoSuchTableError:
        raise ConfigurationError(f"merge source table {name} does not exist") from None
    if snapshot_id is None:
        return table, table.current_snapshot()
    snapshot = table.metadata.snapshot_by_id(int(snapshot_id))
    if snapshot is None:
        raise ConfigurationError(f"merge source table {name} has no snapshot {snapshot_id}")
    return table, snapshot


def source_schema(target: Table, given: pa.Schema, where: str) -> pa.Schema:
    """The source row schema: the table's columns the source has (table types), then its others."""
    import pyarrow as pa

    table_schema = target.metadata.schema().as_arrow()
    by_name = {f.name: f for f in given}
    if len(by_name) != len(given):
        raise ConfigurationError(f"merge source {where} has a column name twice")
    fields = []
    for table_field in table_schema:
        found = by_name.get(table_field.name)
        if found is None:
            continue
        if not _promotable(found.type, table_field.type):
            raise ConfigurationError(
                f"merge source {where}: column {found.name} is {found.type}, which cannot be read as the "
                f"table's {table_field.type}"
            )
        fields.append(
            pa.field(table_field.name, table_field.type, nullable=True, metadata=table_field.metadata)
        )
    table_names = set(table_schema.names)
    fields.extend(pa.field(f.name, f.type, nullable=True) for f in given if f.name not in table_names)
    return pa.schema(fields)


def _promotable(source: pa.DataType, target: pa.DataType) -> bool:
    """Iceberg's type promotions, and one type's Arrow spellings (large, view, dictionary-encoded)."""
    import pyarrow as pa

    if pa.types.is_dictionary(source):
        source = source.value_type
    if source == target or pa.types.is_null(source):
        return True
    return any(rule(source, target) for rule in _RULES)


def _same_family(source: Any, target: Any) -> bool:
    import pyarrow as pa

    t = pa.types
    families = (
        (t.is_string, t.is_large_string, t.is_string_view),
        (t.is_binary, t.is_large_binary, t.is_binary_view),
    )
    return any(any(f(source) for f in fam) and any(f(target) for f in fam) for fam in families)


def _wider_number(source: Any, target: Any) -> bool:
    import pyarrow as pa

    t = pa.types
    if t.is_signed_integer(source) and t.is_signed_integer(target):
        return bool(source.bit_width <= target.bit_width)
    if t.is_floating(source) and t.is_floating(target):
        return bool(source.bit_width <= target.bit_width)
    if t.is_decimal(source) and t.is_decimal(target):
        return bool(source.scale == target.scale and source.precision <= target.precision)
    return False


def _coarser_timestamp(source: Any, target: Any) -> bool:
    import pyarrow as pa

    if not (pa.types.is_timestamp(source) and pa.types.is_timestamp(target)):
        return False
    return (source.tz is None) == (target.tz is None) and source.unit in ("s", "ms", "us", target.unit)


def _nested(source: Any, target: Any) -> bool:
    import pyarrow as pa

    return bool(pa.types.is_nested(source) and pa.types.is_nested(target))  # the cast checks each field


_RULES = (_same_family, _wider_number, _coarser_timestamp, _nested)


def conform_source(batch: pa.RecordBatch, schema: pa.Schema, where: str) -> pa.RecordBatch:
    """``batch`` in the source row ``schema`` (columns by name, cast)."""
    import pyarrow as pa

    columns = []
    for field in schema:
        column = batch.column(field.name)
        if column.type != field.type:
            try:
                column = column.cast(field.type, safe=True)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
                raise ConfigurationError(
                    f"merge source {where}: column {field.name} does not fit {field.type}: {first_line(err)}"
                ) from err
        columns.append(column)
    return pa.RecordBatch.from_arrays(columns, schema=schema)
